"""What the kubelet learns from the API server: list + watch loops (relisting
after 410 Gone or a lost stream) over pods and Services; binding unscheduled
pods to this node, as the default scheduler would with one node (or saying
why it cannot: scheduling.py); a PodWorker for each pod bound here. Changes of pods and
Services also wake the NetworkPolicy table (policy_enforcer.py).

A mixin of Kubelet (node.py).
"""
import http.client
import threading
import time

from ..client import ApiError
from .log import log
from .pod_worker import PodWorker


class Informers:
    def informer(self, path, on_event, on_sync):
        """list + watch with relist on 410 and on stream end."""
        rv = None
        while not self.stopping:
            try:
                if rv is None:
                    lst = self.client.get(path)
                    rv = lst["metadata"]["resourceVersion"]
                    on_sync(lst["items"])
                sep = "&" if "?" in path else "?"
                for ev in self.client.watch("%s%swatch=1&allowWatchBookmarks=true&"
                                            "resourceVersion=%s" % (path, sep, rv)):
                    if ev["type"] == "ERROR":
                        if ev["object"].get("code") == 410:
                            rv = None
                        break
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        try:
                            on_event(ev["type"], ev["object"])
                        except Exception:  # keep watching
                            import traceback
                            traceback.print_exc()
            except (ApiError, OSError, ValueError, http.client.HTTPException) as e:
                if not self.stopping:
                    log("watch %s: %s" % (path, e))
                    if isinstance(e, ApiError) and e.code == 410:
                        rv = None
                    time.sleep(0.5)

    def sync_pods(self, items):
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self.pod_event("ADDED", pod)
        with self.lock:
            for uid in list(self.workers):
                if uid not in seen:
                    self.pod_event("DELETED", self.workers[uid].pod)

    def pod_event(self, etype, pod):
        md = pod["metadata"]
        uid = md["uid"]
        spec = pod.get("spec", {})
        if etype == "DELETED":
            with self.lock:
                w = self.workers.get(uid)
                self.pods.pop(uid, None)
            if w:
                w.gone = True
                w.deleting = True
                w.wake.set()
                threading.Thread(target=w.stop_all, args=(0,), daemon=True).start()
            self.dns_dirty.set()
            self.policy_dirty.set()
            return
        node = spec.get("nodeName")
        if not node:
            if spec.get("schedulerName", "default-scheduler") in ("default-scheduler", "") and \
                    not md.get("deletionTimestamp"):
                self.schedule(pod)
            return
        if node != self.node_name:
            return
        with self.lock:
            known = uid in self.workers
        if not known and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and \
                not md.get("deletionTimestamp") and self.rejected_at_admission(pod):
            return
        with self.lock:
            self.pods[uid] = pod
            w = self.workers.get(uid)
            if w is None:
                phase = pod.get("status", {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    return  # finished before this kubelet started
                w = PodWorker(self, pod)
                self.workers[uid] = w
                w.start()
            else:
                w.update_pod(pod)
        self.dns_dirty.set()
        self.policy_dirty.set()

    def service_event(self, etype, svc):
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        with self.lock:
            if etype == "DELETED":
                self.services.pop(key, None)
            else:
                self.services[key] = svc
        self.dns_dirty.set()
        self.policy_dirty.set()

    def sync_services(self, items):
        with self.lock:
            self.services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in items}
        self.dns_dirty.set()
        self.policy_dirty.set()
