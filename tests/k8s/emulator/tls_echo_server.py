"""An HTTPS server of fixed answers for the C++ Kubernetes client's unit test
(tests/unit/operator/kubeclient/kube_client_test.cc): the edge cases of TLS,
client certificates, Status errors and watch streams that the emulated API
server has no reason to produce on demand. It runs on the emulator's
threading TLS server and streaming handler (http_server.py).

    python3 -m emulator.tls_echo_server --cert server.crt --key server.key \\
        [--client-ca ca.crt]            (from tests/k8s, or with it on PYTHONPATH)

Listens on 127.0.0.1 (or --host, such as ::1) on a free port and prints
"PORT <n>" once ready. With --client-ca it demands a client certificate
signed by that CA.

  /echo...            any method: 200 and the request as JSON
                      {"method", "path", "headers" (lower-case names),
                       "body", "client_cert" (subject CN or null)}
  /status/<code>      a Kubernetes Status object with that code
  /notjson            200 text/plain
  /release            opens the gate of /watch/gated
  /watch/echo         one ADDED event whose object is the request (as /echo)
  /watch/gated        ADDED 1, then waits (at most 5 s) for /release, then
                      MODIFIED 2 and DELETED 3; every object carries
                      "released": whether /release had come when it was sent
  /watch/split        three events written in awkward chunks: one line split
                      over two chunks, two lines in one chunk
  /watch/hang         one ADDED event, then nothing for 30 s
  /watch/gone         410 Gone (a Status object) before any event
  /watch/garbage      a line that is not JSON
  /throttled/<n>/<key>[?retryAfter=s][&code=503]
                      the first n requests (per key) get 429 TooManyRequests
                      (or `code`, e.g. 503 ServiceUnavailable)
                      with Retry-After: s (none without it), then 200 and
                      {"attempts": requests so far}; a 429's Status details
                      hold "attempts" too
"""
import argparse
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse

from .http_server import StreamingHandler, ThreadingTLSServer

released = threading.Event()
throttled_attempts = {}   # /throttled/<n>/<key>: requests per key
throttled_lock = threading.Lock()


class EchoHandler(StreamingHandler):
    def log_message(self, fmt, *args):  # quiet
        pass

    def request_json(self, body):
        cert = None
        try:
            peer = self.connection.getpeercert()
            if peer:
                for rdn in peer.get("subject", ()):
                    for key, value in rdn:
                        if key == "commonName":
                            cert = value
        except (AttributeError, ValueError):
            pass
        return {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
            "client_cert": cert,
        }

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def event(self, kind, obj):
        self.write_chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def handle_any(self):
        body = self.read_body()
        path = self.path.split("?", 1)[0]
        if path.startswith("/echo"):
            self.send_json(200, self.request_json(body))
        elif path.startswith("/status/"):
            code = int(path[len("/status/"):])
            self.send_json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": "trainingjobs.kubeps.io \"demo\" already exists",
                                  "reason": "AlreadyExists", "code": code})
        elif path.startswith("/throttled/"):
            self.throttled(path, self.path.partition("?")[2])
        elif path == "/notjson":
            data = b"hello"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif path == "/release":
            released.set()
            self.send_json(200, {"released": True})
        elif path == "/watch/echo":
            self.start_stream()
            self.event("ADDED", self.request_json(body))
            self.end_chunks()
        elif path == "/watch/gated":
            released.clear()
            self.start_stream()
            self.event("ADDED", {"n": 1, "released": released.is_set()})
            released.wait(5)
            self.event("MODIFIED", {"n": 2, "released": released.is_set()})
            time.sleep(0.05)
            self.event("DELETED", {"n": 3, "released": released.is_set()})
            self.end_chunks()
        elif path == "/watch/split":
            self.start_stream()
            line1 = json.dumps({"type": "ADDED", "object": {"n": 1}}).encode() + b"\n"
            line2 = json.dumps({"type": "MODIFIED", "object": {"n": 2}}).encode() + b"\n"
            line3 = json.dumps({"type": "BOOKMARK", "object": {"n": 3}}).encode() + b"\n"
            self.write_chunk(line1[:7])
            time.sleep(0.05)
            self.write_chunk(line1[7:] + line2 + line3[:5])
            time.sleep(0.05)
            self.write_chunk(line3[5:])
            self.end_chunks()
        elif path == "/watch/hang":
            self.start_stream()
            self.event("ADDED", {"n": 1})
            time.sleep(30)
            self.end_chunks()
        elif path == "/watch/gone":
            self.send_json(410, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "message": "too old resource version: 1 (42)",
                                 "reason": "Expired", "code": 410})
        elif path == "/watch/garbage":
            self.start_stream()
            self.write_chunk(b"this is not json\n")
            self.end_chunks()
        else:
            self.send_json(404, {"kind": "Status", "message": "no route " + path, "code": 404})

    def throttled(self, path, query):
        _, _, n, key = path.split("/", 3)
        params = urllib.parse.parse_qs(query)
        code = int(params.get("code", ["429"])[0])
        with throttled_lock:
            attempts = throttled_attempts[key] = throttled_attempts.get(key, 0) + 1
        if attempts > int(n):
            return self.send_json(200, {"attempts": attempts})
        reason, message = (("TooManyRequests", "Too many requests, please try again later.")
                           if code == 429 else
                           ("ServiceUnavailable", "the server is currently unable to handle "
                            "the request"))
        data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": message, "reason": reason, "code": code,
                           "details": {"attempts": attempts}}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if "retryAfter" in params:
            self.send_header("Retry-After", params["retryAfter"][0])
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m emulator.tls_echo_server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--client-ca")
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address: 127.0.0.1 or ::1")
    args = parser.parse_args(argv)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    if args.client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(args.client_ca)

    server_class = ThreadingTLSServer
    if ":" in args.host:
        class Ipv6Server(ThreadingTLSServer):
            address_family = socket.AF_INET6
        server_class = Ipv6Server
    server = server_class((args.host, 0), EchoHandler, context)
    print("PORT %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
