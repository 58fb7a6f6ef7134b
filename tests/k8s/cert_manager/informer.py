"""The stand-in of cert-manager's informers: list-then-watch caches of
Issuers, Certificates and Secrets in all namespaces."""
import threading

from emulator.client import ApiError


class Informer:
    """A list-then-watch cache of one resource in all namespaces, as a
    client-go informer keeps: re-watches from the last resourceVersion when
    a stream ends, lists again on 410 Gone or an error, waits while the
    resource is not served (CRDs not installed yet)."""

    def __init__(self, client, path, stopped, wake):
        self.client = client
        self.path = path
        self.stopped = stopped
        self.wake = wake
        self.lock = threading.Lock()
        self.objects = {}
        self.synced = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name="informer " + path)

    @staticmethod
    def _rv(obj):
        try:
            return int(obj["metadata"].get("resourceVersion", "0"))
        except (TypeError, ValueError):
            return 0

    def put(self, obj):
        """Stores `obj` unless the cache holds a newer version (an own write's
        answer is stored at once; its watch event comes later)."""
        md = obj["metadata"]
        key = (md.get("namespace", ""), md["name"])
        with self.lock:
            old = self.objects.get(key)
            if old is None or self._rv(old) <= self._rv(obj):
                self.objects[key] = obj

    def remove(self, obj):
        md = obj["metadata"]
        key = (md.get("namespace", ""), md["name"])
        with self.lock:
            old = self.objects.get(key)
            if old is not None and self._rv(old) <= self._rv(obj):
                del self.objects[key]

    def get(self, namespace, name):
        with self.lock:
            return self.objects.get((namespace, name))

    def items(self):
        with self.lock:
            return list(self.objects.values())

    def _run(self):
        while not self.stopped.is_set():
            try:
                listing = self.client.get(self.path)
            except (ApiError, OSError, ValueError):
                self.stopped.wait(0.3)
                continue
            with self.lock:
                self.objects = {}
            for obj in listing.get("items") or []:
                self.put(obj)
            self.synced.set()
            self.wake.set()
            self._watch(listing["metadata"].get("resourceVersion", ""))

    def _watch(self, rv):
        while not self.stopped.is_set():
            url = "%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=5&resourceVersion=%s" % (
                self.path, rv)
            try:
                for event in self.client.watch(url, timeout=20):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        return
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] == "DELETED":
                        self.remove(obj)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self.put(obj)
                    else:
                        continue
                    self.wake.set()
                    if self.stopped.is_set():
                        return
            except (ApiError, OSError, ValueError):
                return
