"""kube-proxy for one ClusterIP Service port: a TCP listener on clusterIP:port
that forwards each connection, round-robin, to a ready endpoint.
"""
import itertools
import select
import socket
import threading


class ServiceProxy:
    """kube-proxy for one ClusterIP service port."""

    def __init__(self, kubelet, ip, port, key, port_spec):
        self.kubelet, self.ip, self.port, self.key = kubelet, ip, port, key
        self.port_spec = port_spec
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(64)
        self.closed = False
        self.rr = itertools.count()
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def accept_loop(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.forward, args=(conn,), daemon=True).start()

    def forward(self, conn):
        targets = self.kubelet.endpoints(self.key, self.port_spec)
        if not targets:
            conn.close()
            return
        host, port = targets[next(self.rr) % len(targets)]
        try:
            up = socket.create_connection((host, port), timeout=5)
            up.settimeout(None)
        except OSError:
            conn.close()
            return
        pair = [conn, up]
        try:
            while True:
                r, _, _ = select.select(pair, [], [])
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    (up if s is conn else conn).sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            up.close()
