"""Events the kubelet records about a pod (FailedMount...), aggregated as
client-go's event recorder does: the same reason and message about the
same pod is one Event whose count and lastTimestamp go up, not a new
Event each time.

A mixin of Kubelet (node.py).
"""
import os

from ..client import ApiError
from ..clock import now_iso
from .log import log


class EventRecorder:
    def record_event(self, pod, event_type, reason, message):
        md = pod["metadata"]
        key = (md["uid"], reason, message)
        with self.lock:
            known = self.events.get(key)
        path = "/api/v1/namespaces/%s/events" % md["namespace"]
        now = now_iso()
        try:
            if known:
                name, count = known
                self.client.patch("%s/%s" % (path, name), {"count": count + 1,
                                                           "lastTimestamp": now}, kind="merge")
                with self.lock:
                    self.events[key] = (name, count + 1)
                return
            name = "%s.%s" % (md["name"], os.urandom(8).hex())
            self.client.post(path, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": md["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": md["name"],
                                   "namespace": md["namespace"], "uid": md["uid"],
                                   "resourceVersion": md.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": event_type,
                "source": {"component": "kubelet", "host": self.node_name},
                "reportingComponent": "kubelet", "reportingInstance": self.node_name,
                "firstTimestamp": now, "lastTimestamp": now, "count": 1})
            with self.lock:
                self.events[key] = (name, 1)
        except (ApiError, OSError) as e:
            log("event %s for %s/%s not recorded: %s" % (reason, md["namespace"], md["name"], e))

    def forget_events(self, uid):
        with self.lock:
            for key in [k for k in self.events if k[0] == uid]:
                del self.events[key]
