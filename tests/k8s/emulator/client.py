"""A small REST client of the emulated API server, what a controller uses:
bearer token, the cluster's CA, JSON bodies, the four patch content types
and watch streams. The kubelet, the cluster launcher and the tests use it.
"""
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.request

from .kubeconfig import read_kubeconfig


class ApiError(Exception):
    def __init__(self, code, body):
        self.code = code
        self.body = body
        try:
            self.status = json.loads(body)
        except (ValueError, TypeError):
            self.status = {}
        super().__init__("HTTP %d: %s" % (code, self.status.get("message", body)))

    @property
    def reason(self):
        return self.status.get("reason")


class Client:
    """A minimal REST client for the API server (what a controller uses)."""

    def __init__(self, server, ca_pem, token, timeout=30):
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.ctx = ssl.create_default_context()
        fd, ca_path = tempfile.mkstemp(prefix="k8s-ca-", suffix=".crt")
        with os.fdopen(fd, "wb") as f:
            f.write(ca_pem)
        self.ctx.load_verify_locations(ca_path)
        os.unlink(ca_path)

    @classmethod
    def from_kubeconfig(cls, path, token=None):
        server, ca, tok = read_kubeconfig(path)
        return cls(server, ca, token or tok)

    def open(self, method, path, body=None, content_type="application/json", headers=None,
             timeout=None):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            return urllib.request.urlopen(req, context=self.ctx,
                                          timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None

    def request(self, method, path, body=None, content_type="application/json", headers=None):
        with self.open(method, path, body, content_type, headers) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def put(self, path, body):
        return self.request("PUT", path, body)

    def patch(self, path, body, kind="merge"):
        ctype = {"merge": "application/merge-patch+json",
                 "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json",
                 "apply": "application/apply-patch+yaml"}[kind]
        return self.request("PATCH", path, body, ctype)

    def delete(self, path, body=None):
        return self.request("DELETE", path, body)

    def watch(self, path, timeout=None):
        """Yields watch events (dicts) from a ?watch=1 URL until the stream
        ends. `timeout` is the socket read timeout."""
        resp = self.open("GET", path, timeout=timeout or 3600)
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp.close()
