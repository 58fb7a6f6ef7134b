"""HTTPS plumbing shared by the emulator's servers (the API server and the
TLS echo server of the C++ client's tests): a threading HTTP/1.1 server that
does each TLS handshake on the connection's own thread, and a request
handler base with chunked request bodies and chunked streaming responses.
"""
import http.server
import socketserver
import ssl
import sys


class ThreadingTLSServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    """Serves `handler` over TLS with `ssl_ctx` (which decides whether client
    certificates are required); a client that fails the handshake is dropped
    without disturbing the others."""
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, ssl_ctx):
        self.ssl_ctx = ssl_ctx
        super().__init__(addr, handler)
        self.address_str = "%s:%d" % self.server_address[:2]

    def finish_request(self, request, client_address):
        try:
            request.settimeout(60)
            tls = self.ssl_ctx.wrap_socket(request, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, OSError)):
            return
        super().handle_error(request, client_address)


class StreamingHandler(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, request bodies with Content-Length or chunked,
    and chunked responses (watch streams, followed logs)."""
    protocol_version = "HTTP/1.1"

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""


    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


    def end_chunks(self):
        """The last chunk of a chunked response."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
