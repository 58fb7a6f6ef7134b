"""startupProbe, readinessProbe and livenessProbe: exec (in the container's
mount namespace), tcpSocket, httpGet (and grpc as a
TCP connect), with initialDelaySeconds, periodSeconds, timeoutSeconds and the
success and failure thresholds.

A mixin of PodWorker (pod_worker.py).
"""
import http.client
import socket
import subprocess
import time

from ..client import ApiError
from ..clock import parse_time
from .containers import ConfigError


class Probes:
    def probe(self, c, kind):
        spec = c.spec.get(kind)
        if not spec or "running" not in c.state:
            return None
        now = time.time()
        started = parse_time(c.started_at) or now
        nxt = c.probe_next.get(kind, started + spec.get("initialDelaySeconds", 0))
        if now < nxt:
            return None
        c.probe_next[kind] = now + spec.get("periodSeconds", 10)
        timeout = spec.get("timeoutSeconds", 1)
        ok = False
        try:
            if "exec" in spec:
                env = self.container_env(c)
                command = list(spec["exec"].get("command", []))
                if self.kubelet.isolation == "namespace" and c.proc is not None:
                    # in the container's mount namespace, where its volumes are
                    command = ["nsenter", "--target", str(c.proc.pid), "--mount", "--"] + command
                r = subprocess.run(command, env=env, timeout=timeout,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                ok = r.returncode == 0
            elif "tcpSocket" in spec:
                port = self.port_number(c, spec["tcpSocket"].get("port"))
                host = spec["tcpSocket"].get("host") or self.ip
                with socket.create_connection((host, port), timeout=timeout):
                    ok = True
            elif "httpGet" in spec:
                g = spec["httpGet"]
                port = self.port_number(c, g.get("port"))
                conn = http.client.HTTPConnection(g.get("host") or self.ip, port, timeout=timeout)
                conn.request("GET", g.get("path", "/"), headers={
                    h["name"]: h["value"] for h in g.get("httpHeaders", [])})
                ok = 200 <= conn.getresponse().status < 400
                conn.close()
            elif "grpc" in spec:
                port = self.port_number(c, spec["grpc"].get("port"))
                with socket.create_connection((self.ip, port), timeout=timeout):
                    ok = True
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException, ConfigError,
                ApiError):
            ok = False
        counts = c.probe_counts.setdefault(kind, [0, 0])
        if ok:
            counts[0] += 1
            counts[1] = 0
        else:
            counts[1] += 1
            counts[0] = 0
        if ok and counts[0] >= spec.get("successThreshold", 1):
            return True
        if not ok and counts[1] >= spec.get("failureThreshold", 3):
            return False
        return None

    def port_number(self, c, port):
        if isinstance(port, int):
            return port
        if isinstance(port, str) and port.isdigit():
            return int(port)
        for p in c.spec.get("ports", []):
            if p.get("name") == port:
                return p["containerPort"]
        raise OSError("no port named %s" % port)
