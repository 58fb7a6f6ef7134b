"""A node that goes NotReady, as the node lifecycle controller sees it when
the kubelet stops posting status (the machine died, or the network cut it
off): the Node's Ready condition turns Unknown, it is tainted
node.kubernetes.io/unreachable (NoSchedule and NoExecute), and once the
pods' toleration of that taint has run out (300 s by default; here
`evict_after` seconds) the taint manager deletes them gracefully, with the
condition DisruptionTarget (DeletionByTaintManager). With no kubelet to
finish those deletions the pods stay Terminating for good, whether their
processes still run (a partition) or not.

The kubelet is cut off by refusing every request of its user while the node
is NotReady (503, its watches ended), so it neither reports nor deletes;
the processes it started keep running. node_ready() lets it back: it
lists again, stops the processes of pods deleted meanwhile, and the taint
and condition go.

A mixin of the Api (api.py), driven by the test hooks (hooks.py).
"""
import copy
import threading
import time

from ..clock import now_iso

UNREACHABLE = "node.kubernetes.io/unreachable"


def kubelet_user(node):
    return "system:node:" + node


class NodeLifecycle:
    def node_not_ready(self, name, evict_after):
        nodes_t = self.served[("", "v1", "nodes")]
        with self.store.lock:
            self.cut_off_users.add(kubelet_user(name))
            for w in list(self.store.watchers):
                if w.user == kubelet_user(name):
                    w.q.put(("CUT", "end"))
            old = self.store.get(nodes_t, "", name)
            if old is None:
                return False
            node = copy.deepcopy(old)
            now = now_iso()
            for c in node.setdefault("status", {}).setdefault("conditions", []):
                if c.get("type") == "Ready":
                    c.update({"status": "Unknown", "reason": "NodeStatusUnknown",
                              "message": "Kubelet stopped posting node status.",
                              "lastTransitionTime": now})
            taints = [t for t in node.setdefault("spec", {}).get("taints") or []
                      if t.get("key") != UNREACHABLE]
            taints += [{"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": now},
                       {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": now}]
            node["spec"]["taints"] = taints
            self.store.put(nodes_t, node, "MODIFIED", old)
            generation = self.not_ready_since[name] = time.time()
        threading.Thread(target=self._evict_after, args=(name, generation, evict_after),
                         daemon=True).start()
        return True

    def node_ready(self, name):
        nodes_t = self.served[("", "v1", "nodes")]
        with self.store.lock:
            self.cut_off_users.discard(kubelet_user(name))
            self.not_ready_since.pop(name, None)
            old = self.store.get(nodes_t, "", name)
            if old is None:
                return False
            node = copy.deepcopy(old)
            for c in node.get("status", {}).get("conditions", []):
                if c.get("type") == "Ready":
                    c.update({"status": "True", "reason": "KubeletReady",
                              "message": "kubelet is posting ready status",
                              "lastTransitionTime": now_iso()})
            node["spec"]["taints"] = [t for t in node["spec"].get("taints") or []
                                      if t.get("key") != UNREACHABLE]
            self.store.put(nodes_t, node, "MODIFIED", old)
        return True

    def _evict_after(self, name, generation, seconds):
        time.sleep(seconds)
        pods_t = self.served[("", "v1", "pods")]
        with self.store.lock:
            if self.not_ready_since.get(name) != generation:
                return   # ready again meanwhile
            for pod in self.store.list(pods_t, None):
                if pod["spec"].get("nodeName") != name or \
                        pod["metadata"].get("deletionTimestamp") or \
                        (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                marked = copy.deepcopy(pod)
                marked.setdefault("status", {}).setdefault("conditions", []).append({
                    "type": "DisruptionTarget", "status": "True",
                    "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint",
                    "lastProbeTime": None, "lastTransitionTime": now_iso()})
                self.store.put(pods_t, marked, "MODIFIED", pod)
                md = pod["metadata"]
                self.delete(pods_t, md["namespace"], md["name"], {}, {})
