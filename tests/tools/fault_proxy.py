#!/usr/bin/env python3
"""An HTTP CONNECT proxy that breaks connections on purpose.

gRPC C++ clients open every channel through an HTTP CONNECT tunnel when
`grpc_proxy` (or `https_proxy`, `http_proxy`) is set in their environment,
loopback targets included, unless the target matches `no_grpc_proxy` (or
`no_proxy`). Put this proxy there and every channel of a job runs through it:

    python3 tests/tools/fault_proxy.py --port 0 --reset-probability 0.005 --seed 3 &
    # first line on stdout: "listening on 127.0.0.1:PORT"
    grpc_proxy=http://127.0.0.1:PORT kubeps run job.yaml

Faults, every decision drawn from one generator seeded by --seed (the
sequence of decisions is fixed; which tunnel meets which decision also
depends on how the peers' traffic interleaves):

  --reset-probability P   per chunk read from either side of a tunnel (up to
                          64 KiB), reset the tunnel with probability P
  --reset-rate R          per tunnel and second, reset it with rate R
                          (checked every 50 ms)
  --blackhole-every-ms E  every E ms, pick one target that has carried
  --blackhole-ms D        traffic and blackhole it for D ms: its tunnels stop
                          forwarding in both directions (nothing is read,
                          nothing is closed) and new tunnels to it wait; then
                          traffic resumes where it stopped
  --only-ports P1,P2      faults only on tunnels to these target ports
  --grace-ms G            no faults during the first G ms
  --max-resets N          no more resets after N (0: no limit)

A reset closes both sockets of the tunnel with SO_LINGER 0, so both peers get
a TCP RST (ECONNRESET), as when a middlebox drops its connection state.

On SIGTERM or SIGINT the proxy prints its counters, one "name value" per
line, and exits 0:

    connections 12
    resets 5
    blackholes 2
    bytes 123456
    target 127.0.0.1:40423 connections 4 resets 3 blackholes 1 bytes 61728

(the totals, then one line per target that carried a tunnel).

--stats-file FILE also keeps them there (rewritten every second and at exit).

One thread, one selector: the loop owns every socket, so a reset takes
effect at once. Python standard library only.
"""
import argparse
import os
import random
import selectors
import signal
import socket
import struct
import sys
import time

CHUNK = 65536
BUFFER_LIMIT = 1 << 20  # stop reading a side while the other side has this much queued


class Side:
    """One socket of a tunnel and the bytes queued for it."""

    def __init__(self, sock):
        self.sock = sock
        self.out = bytearray()
        self.eof = False  # read returned 0: pass the end on once `peer.out` is flushed
        self.shut = False  # we sent FIN on this socket
        self.mask = 0


class Tunnel:
    def __init__(self, client, target, name):
        self.client = Side(client)
        self.upstream = None
        self.target = target
        self.name = name
        self.port = 0
        self.request = bytearray()
        self.pending = b""  # bytes the client sent after its CONNECT request
        self.state = "handshake"  # handshake -> waiting (blackholed target) -> connecting -> open
        self.closed = False

    def sides(self):
        return [s for s in (self.client, self.upstream) if s is not None]

    def other(self, side):
        return self.upstream if side is self.client else self.client


class Proxy:
    def __init__(self, args, listener):
        self.args = args
        self.listener = listener
        self.random = random.Random(args.seed)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.tunnels = []
        self.by_sock = {}
        self.targets = []  # "host:port" of every target that carried a tunnel
        self.blackholed = {}  # "host:port" -> monotonic end
        self.stats = {"connections": 0, "resets": 0, "blackholes": 0, "bytes": 0}
        self.per_target = {}  # "host:port" -> counters like self.stats
        self.started = time.monotonic()
        now = self.started
        self.next_blackhole = now + args.blackhole_every_ms / 1000.0 if args.blackhole_every_ms > 0 else None
        self.next_rate_tick = now + 0.05 if args.reset_rate > 0 else None
        self.next_stats = now + 1.0 if args.stats_file else None
        self.only_ports = {int(p) for p in args.only_ports.split(",") if p.strip()}

    # Counters --------------------------------------------------------------

    def count(self, name, target, amount=1):
        self.stats[name] += amount
        counters = self.per_target.setdefault(target, dict.fromkeys(self.stats, 0))
        counters[name] += amount

    def stats_text(self):
        lines = ["%s %d\n" % item for item in self.stats.items()]
        for target, counters in self.per_target.items():
            lines.append("target %s %s\n" % (target, " ".join("%s %d" % item for item in counters.items())))
        return "".join(lines)

    def write_stats(self):
        if self.args.stats_file:
            tmp = self.args.stats_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(self.stats_text())
            os.replace(tmp, self.args.stats_file)

    def log(self, text):
        if self.args.verbose:
            sys.stderr.write("[fault_proxy %.3f] %s\n" % (time.monotonic() - self.started, text))
            sys.stderr.flush()

    # Decisions -------------------------------------------------------------

    def faults_on(self, tunnel=None):
        if (time.monotonic() - self.started) * 1000 < self.args.grace_ms:
            return False
        if tunnel is not None and self.only_ports and tunnel.port not in self.only_ports:
            return False
        return True

    def roll_reset(self, tunnel, probability):
        if probability <= 0 or not self.faults_on(tunnel):
            return False
        if self.args.max_resets and self.stats["resets"] >= self.args.max_resets:
            return False
        return self.random.random() < probability

    def is_blackholed(self, name):
        end = self.blackholed.get(name)
        if end is None:
            return False
        if end <= time.monotonic():
            del self.blackholed[name]
            self.log("blackhole of %s over" % name)
            return False
        return True

    # Tunnel life -----------------------------------------------------------

    def accept(self):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        sock.setblocking(False)
        tunnel = Tunnel(sock, ("?", 0), "?")
        self.tunnels.append(tunnel)
        self.by_sock[sock] = (tunnel, tunnel.client)

    def drop(self, tunnel, reset):
        if tunnel.closed:
            return
        tunnel.closed = True
        for side in tunnel.sides():
            if side.mask:
                self.selector.unregister(side.sock)
            self.by_sock.pop(side.sock, None)
            if reset:
                try:
                    side.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            try:
                side.sock.close()
            except OSError:
                pass
        self.tunnels.remove(tunnel)
        if reset:
            self.count("resets", tunnel.name)
            self.log("reset tunnel to %s" % tunnel.name)

    def refuse(self, tunnel, status):
        try:
            tunnel.client.sock.send(("HTTP/1.1 %s\r\nContent-Length: 0\r\n\r\n" % status).encode())
        except OSError:
            pass
        self.drop(tunnel, reset=False)

    def read_request(self, tunnel):
        try:
            data = tunnel.client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.drop(tunnel, reset=False)
            return
        tunnel.request += data
        if b"\r\n\r\n" not in tunnel.request:
            if len(tunnel.request) > 65536:
                self.refuse(tunnel, "431 Request Header Fields Too Large")
            return
        head, _, rest = bytes(tunnel.request).partition(b"\r\n\r\n")
        first = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(first) != 3 or first[0].upper() != "CONNECT":
            self.refuse(tunnel, "405 Method Not Allowed")
            return
        host, _, port = first[1].rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit():
            self.refuse(tunnel, "400 Bad Request")
            return
        tunnel.target = (host, int(port))
        tunnel.port = int(port)
        tunnel.name = "%s:%s" % (host, port)
        tunnel.pending = bytes(rest)
        tunnel.state = "waiting"
        self.try_connect(tunnel)

    def try_connect(self, tunnel):
        # A blackholed target does not answer new connections either.
        if self.faults_on(tunnel) and self.is_blackholed(tunnel.name):
            return
        family = socket.AF_INET6 if ":" in tunnel.target[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        error = sock.connect_ex(tunnel.target)
        if error not in (0, 115):  # EINPROGRESS
            sock.close()
            self.log("cannot reach %s: %s" % (tunnel.name, os.strerror(error)))
            self.refuse(tunnel, "502 Bad Gateway")
            return
        tunnel.upstream = Side(sock)
        tunnel.upstream.out += tunnel.pending
        self.by_sock[sock] = (tunnel, tunnel.upstream)
        tunnel.state = "connecting"

    def connected(self, tunnel):
        error = tunnel.upstream.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            self.log("cannot reach %s: %s" % (tunnel.name, os.strerror(error)))
            self.refuse(tunnel, "502 Bad Gateway")
            return
        tunnel.client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tunnel.client.out[:0] = b"HTTP/1.1 200 Connection established\r\n\r\n"
        tunnel.state = "open"
        self.count("connections", tunnel.name)
        if tunnel.name not in self.targets:
            self.targets.append(tunnel.name)
        self.log("tunnel to %s" % tunnel.name)

    def read(self, tunnel, side):
        try:
            data = side.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(tunnel, reset=False)
            return
        other = tunnel.other(side)
        if not data:
            side.eof = True
            self.flush_eof(tunnel)
            return
        if self.roll_reset(tunnel, self.args.reset_probability):
            self.drop(tunnel, reset=True)
            return
        other.out += data
        self.count("bytes", tunnel.name, len(data))

    def write(self, tunnel, side):
        try:
            sent = side.sock.send(side.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(tunnel, reset=False)
            return
        del side.out[:sent]
        self.flush_eof(tunnel)

    def flush_eof(self, tunnel):
        """Passes an orderly end from one side to the other once its bytes are out."""
        if tunnel.closed:
            return
        for side in tunnel.sides():
            other = tunnel.other(side)
            if side.eof and not other.out and not other.shut:
                try:
                    other.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                other.shut = True
        if all(s.eof for s in tunnel.sides()) and all(not s.out for s in tunnel.sides()):
            self.drop(tunnel, reset=False)

    # The loop --------------------------------------------------------------

    def update_interest(self):
        for tunnel in list(self.tunnels):
            if tunnel.closed:
                continue
            black = tunnel.state == "open" and self.faults_on(tunnel) and self.is_blackholed(tunnel.name)
            for side in tunnel.sides():
                mask = 0
                if tunnel.state == "handshake":
                    if side is tunnel.client:
                        mask = selectors.EVENT_READ
                elif tunnel.state == "connecting":
                    if side is tunnel.upstream:
                        mask = selectors.EVENT_WRITE
                elif tunnel.state == "open" and not black:
                    other = tunnel.other(side)
                    if not side.eof and len(other.out) < BUFFER_LIMIT:
                        mask |= selectors.EVENT_READ
                    if side.out:
                        mask |= selectors.EVENT_WRITE
                if mask != side.mask:
                    if side.mask == 0:
                        self.selector.register(side.sock, mask, None)
                    elif mask == 0:
                        self.selector.unregister(side.sock)
                    else:
                        self.selector.modify(side.sock, mask, None)
                    side.mask = mask

    def timers(self):
        now = time.monotonic()
        if self.next_blackhole is not None and now >= self.next_blackhole:
            self.next_blackhole = now + self.args.blackhole_every_ms / 1000.0
            candidates = [t for t in self.targets
                          if not self.only_ports or int(t.rsplit(":", 1)[1]) in self.only_ports]
            if candidates and self.args.blackhole_ms > 0 and self.faults_on():
                target = self.random.choice(candidates)
                self.blackholed[target] = now + self.args.blackhole_ms / 1000.0
                self.count("blackholes", target)
                self.log("blackhole %s for %d ms" % (target, self.args.blackhole_ms))
        if self.next_rate_tick is not None and now >= self.next_rate_tick:
            self.next_rate_tick = now + 0.05
            probability = min(1.0, self.args.reset_rate * 0.05)
            for tunnel in list(self.tunnels):
                if tunnel.state == "open" and not tunnel.closed and self.roll_reset(tunnel, probability):
                    self.drop(tunnel, reset=True)
        if self.next_stats is not None and now >= self.next_stats:
            self.next_stats = now + 1.0
            self.write_stats()
        for tunnel in list(self.tunnels):
            if tunnel.state == "waiting":
                self.try_connect(tunnel)

    def next_timeout(self):
        now = time.monotonic()
        deadlines = [d for d in (self.next_blackhole, self.next_rate_tick, self.next_stats) if d is not None]
        deadlines += list(self.blackholed.values())
        if any(t.state == "waiting" for t in self.tunnels):
            deadlines.append(now + 0.01)
        if not deadlines:
            return 0.5
        return max(0.0, min(0.5, min(deadlines) - now))

    def serve_forever(self):
        while True:
            self.update_interest()
            for key, events in self.selector.select(self.next_timeout()):
                if key.fileobj is self.listener:
                    self.accept()
                    continue
                entry = self.by_sock.get(key.fileobj)
                if entry is None:
                    continue
                tunnel, side = entry
                if tunnel.closed:
                    continue
                if tunnel.state == "handshake":
                    self.read_request(tunnel)
                elif tunnel.state == "connecting":
                    self.connected(tunnel)
                elif tunnel.state == "open":
                    if events & selectors.EVENT_WRITE and side.out:
                        self.write(tunnel, side)
                    if events & selectors.EVENT_READ and not tunnel.closed:
                        self.read(tunnel, side)
            self.timers()


def parse_args(argv):
    parser = argparse.ArgumentParser(description="HTTP CONNECT proxy that resets and blackholes tunnels.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one")
    parser.add_argument("--reset-probability", type=float, default=0.0,
                        help="probability of resetting a tunnel per chunk read")
    parser.add_argument("--reset-rate", type=float, default=0.0,
                        help="resets per tunnel per second (checked every 50 ms)")
    parser.add_argument("--blackhole-every-ms", type=int, default=0,
                        help="start a blackhole on one target every this many ms")
    parser.add_argument("--blackhole-ms", type=int, default=0, help="how long a blackhole lasts")
    parser.add_argument("--only-ports", default="", help="comma-separated target ports to fault (default: all)")
    parser.add_argument("--grace-ms", type=int, default=0, help="no faults during the first this many ms")
    parser.add_argument("--max-resets", type=int, default=0, help="no more resets after this many (0: no limit)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault decisions")
    parser.add_argument("--stats-file", default="", help="also keep the counters in this file")
    parser.add_argument("--verbose", action="store_true", help="log tunnels and faults on stderr")
    args = parser.parse_args(argv)
    if not 0 <= args.reset_probability <= 1:
        parser.error("--reset-probability must be in [0, 1]")
    if min(args.reset_rate, args.blackhole_every_ms, args.blackhole_ms, args.grace_ms, args.max_resets) < 0:
        parser.error("rates, durations and counts must be >= 0")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    listener = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(256)
    listener.setblocking(False)
    proxy = Proxy(args, listener)

    def stop(signum, frame):
        proxy.write_stats()
        sys.stdout.write(proxy.stats_text())
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.stdout.write("listening on %s:%d\n" % listener.getsockname()[:2])
    sys.stdout.flush()
    proxy.serve_forever()


if __name__ == "__main__":
    main()
