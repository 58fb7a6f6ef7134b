"""pods/log: the container log files the kubelet writes under --log-dir
(<ns>_<pod>_<uid>/<container>.<restartCount>.log), with container, previous,
tailLines and follow (streamed in chunks while the container runs).

A mixin of the request handler (routing.py).
"""
import os
import ssl
import time

from .errors import ApiError, not_found


class PodLogStream:
    def pod_log(self, namespace, name, query):
        """Serves GET pods/NAME/log."""
        api = self.api
        t = api.served[("", "v1", "pods")]
        pod = api.store.get(t, namespace, name)
        if pod is None:
            raise not_found(t, name)
        containers = [c["name"] for c in pod["spec"].get("containers", [])]
        container = query.get("container")
        if not container:
            if len(containers) != 1:
                raise ApiError(400, "BadRequest", "a container name must be specified for pod %s, "
                               "choose one of: %s" % (name, containers))
            container = containers[0]
        directory = os.path.join(api.args.log_dir or "", "%s_%s_%s" % (
            namespace, name, pod["metadata"]["uid"]))
        restarts = 0
        for cs in pod.get("status", {}).get("containerStatuses", []) + \
                pod.get("status", {}).get("initContainerStatuses", []):
            if cs["name"] == container:
                restarts = cs.get("restartCount", 0)
        attempt = restarts - 1 if query.get("previous") == "true" else restarts
        path = os.path.join(directory, "%s.%d.log" % (container, attempt))
        if not api.args.log_dir or not os.path.exists(path):
            if query.get("previous") == "true":
                raise ApiError(400, "BadRequest", 'previous terminated container "%s" in pod "%s" '
                               'not found' % (container, name))
            raise ApiError(400, "BadRequest", 'container "%s" in pod "%s" is waiting to start: '
                           'ContainerCreating' % (container, name))
        with open(path, "rb") as f:
            data = f.read()
        if query.get("tailLines"):
            n = int(query["tailLines"])
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n > 0 else b""
        if query.get("follow") != "true":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._code = 200
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._code = 200
        try:
            if data:
                self.write_chunk(data)
            with open(path, "rb") as f:
                f.seek(0, 2)
                while True:
                    chunk = f.read(65536)
                    if chunk:
                        self.write_chunk(chunk)
                        continue
                    cur = api.store.get(t, namespace, name)
                    running = cur is not None and cur["metadata"]["uid"] == pod["metadata"]["uid"] \
                        and any(cs["name"] == container and cs.get("restartCount", 0) == attempt
                                and "running" in cs.get("state", {})
                                for cs in cur.get("status", {}).get("containerStatuses", []) +
                                cur.get("status", {}).get("initContainerStatuses", []))
                    if not running:
                        chunk = f.read()
                        if chunk:
                            self.write_chunk(chunk)
                        break
                    time.sleep(0.2)
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
