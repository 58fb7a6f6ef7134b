"""The default scheduler's part, for the one node: a pod with no nodeName
whose schedulerName is empty or "default-scheduler" is bound here when the
node fits it, and otherwise stays Pending with the condition PodScheduled
False, reason Unschedulable, and the scheduler's message. A pod fits when
every PersistentVolumeClaim it mounts exists and is Bound, the node is not
cordoned (spec.unschedulable), the pod tolerates the node's NoSchedule and
NoExecute taints (node.kubernetes.io/unreachable...), every label of its
nodeSelector is the node's, and its requests (per resource: the
containers' and the native sidecars' together, or an init container's own
when larger; a request left out is its limit) are within the node's
allocatable (cpu, memory, pods, and no nvidia.com/gpu or other extended
resource at all). Other pods' requests are not counted, nor is affinity. A
pod with scheduling gates is not looked at until they are all removed. A
pod bound here without it (spec.nodeName set by its maker) goes through the
kubelet's own admission instead, which refuses one whose requests exceed
the node's allocatable (Failed, reason OutOfcpu...).
Pods left unschedulable are looked at again every few seconds, as the
scheduler retries them (a label added to the node with kubectl, a claim
created, an uncordon make them fit).

A mixin of Kubelet (node.py).
"""
import re
import threading
import time

from ..client import ApiError
from ..clock import now_iso
from .log import log

_SUFFIXES = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
             "Ei": 2 ** 60, "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "K": 1e3,
             "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
RETRY_SECONDS = 2.0


def quantity(text):
    """A resource.Quantity ("100m", "64Mi", "2") as a number."""
    m = re.match(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$", str(text).strip())
    if not m or m.group(2) not in _SUFFIXES:
        return 0.0
    return float(m.group(1)) * _SUFFIXES[m.group(2)]


def container_requests(container):
    resources = container.get("resources") or {}
    wanted = dict(resources.get("limits") or {})
    wanted.update(resources.get("requests") or {})
    return {name: quantity(value) for name, value in wanted.items()}


def pod_requests(spec):
    total = {}
    for c in spec.get("containers", []) + [i for i in spec.get("initContainers", [])
                                           if i.get("restartPolicy") == "Always"]:
        for name, value in container_requests(c).items():
            total[name] = total.get(name, 0) + value
    for c in spec.get("initContainers", []):
        if c.get("restartPolicy") != "Always":
            for name, value in container_requests(c).items():
                total[name] = max(total.get(name, 0), value)
    return total


def tolerates(tolerations, taint):
    """Whether one of the pod's tolerations tolerates the node's taint."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def claim_problem(spec, claims):
    """The scheduler's words for a claim of the pod that is missing or not
    bound (claims: name -> PersistentVolumeClaim, or None when there is
    none), else None. The volume binding plugin refuses such a pod before
    it looks at any node."""
    for v in spec.get("volumes") or []:
        name = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if name is None:
            continue
        claim = claims.get(name)
        if claim is None:
            return 'persistentvolumeclaim "%s" not found' % name
        if (claim.get("status") or {}).get("phase") != "Bound":
            return "pod has unbound immediate PersistentVolumeClaims"
    return None


def unschedulable_message(spec, node, claims=None):
    """The scheduler's message when `node` cannot take a pod of `spec`, else None."""
    labels = node.get("metadata", {}).get("labels") or {}
    reasons = []
    problem = claim_problem(spec, claims or {})
    if problem:
        reasons.append(problem)
    elif node.get("spec", {}).get("unschedulable"):
        reasons.append("1 node(s) were unschedulable")
    else:
        for taint in node.get("spec", {}).get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and \
                    not tolerates(spec.get("tolerations"), taint):
                reasons.append("1 node(s) had untolerated taint {%s: %s}" % (
                    taint.get("key"), taint.get("value", "")))
                break
    if not reasons:
        selector = spec.get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons.append("1 node(s) didn't match Pod's node affinity/selector")
        allocatable = node.get("status", {}).get("allocatable") or {}
        for name, wanted in sorted(pod_requests(spec).items()):
            if wanted > quantity(allocatable.get(name, "0")):
                reasons.append("1 Insufficient %s" % name)
    if not reasons:
        return None
    return ("0/1 nodes are available: %s. preemption: 0/1 nodes are available: 1 Preemption is "
            "not helpful for scheduling." % ", ".join(reasons))


def admission_problem(spec, node):
    """The kubelet's own admission of a pod bound to its node without the
    scheduler (spec.nodeName set by whoever made it): (reason, message) of
    a request the node's allocatable cannot meet, as the kubelet's resource
    fit refuses it (OutOfcpu, OutOfmemory, OutOfnvidia.com/gpu), else None.
    Other pods' requests are not counted, as in the scheduler above."""
    allocatable = node.get("status", {}).get("allocatable") or {}
    for name, wanted in sorted(pod_requests(spec).items()):
        have = quantity(allocatable.get(name, "0"))
        if wanted > have:
            scale = 1000 if name == "cpu" else 1   # the kubelet says cpu in millicores
            return ("OutOf" + name,
                    "Pod was rejected: Node didn't have enough resource: %s, requested: %d, "
                    "used: 0, capacity: %d" % (name, wanted * scale, have * scale))
    return None


class Scheduler:
    def rejected_at_admission(self, pod):
        """Whether the kubelet refuses `pod`, bound here, before running any
        of it: it ends Failed with the reason and message of
        admission_problem, or of the node shutting down (the kubelet's
        shutdown manager admits nothing then), and no container statuses,
        and is never started."""
        try:
            node = self.client.get("/api/v1/nodes/%s" % self.node_name)
        except (ApiError, OSError):
            return False
        problem = admission_problem(pod.get("spec", {}), node)
        if self.shutting_down:
            problem = ("NodeShutdown",
                       "Pod was rejected: Pod was rejected as the node is shutting down.")
        if problem is None:
            return False
        md = pod["metadata"]
        # What others wrote (qosClass, conditions) stays, as the kubelet's
        # status manager merges.
        status = dict(pod.get("status") or {}, phase="Failed", reason=problem[0],
                      message=problem[1], startTime=now_iso())
        try:
            self.client.patch(self.pod_path(md["namespace"], md["name"]) + "/status",
                              [{"op": "test", "path": "/metadata/uid", "value": md["uid"]},
                               {"op": "replace", "path": "/status", "value": status}],
                              kind="json")
        except (ApiError, OSError) as e:
            log("reject %s: %s" % (md["name"], e))
        return True

    def schedule(self, pod):
        """Binds `pod` to this node, or says why it cannot be (once per message)."""
        md = pod["metadata"]
        if pod.get("spec", {}).get("schedulingGates"):
            return  # not a candidate until its gates are removed (the API server said so)
        path = self.pod_path(md["namespace"], md["name"])
        try:
            node = self.client.get("/api/v1/nodes/%s" % self.node_name)
        except (ApiError, OSError) as e:
            log("schedule %s: reading the node: %s" % (md["name"], e))
            return
        claims = {}
        for v in pod.get("spec", {}).get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                continue
            try:
                claims[claim] = self.client.get("/api/v1/namespaces/%s/persistentvolumeclaims/%s"
                                                % (md["namespace"], claim))
            except ApiError as e:
                if e.code != 404:
                    log("schedule %s: reading claim %s: %s" % (md["name"], claim, e))
                    return
        message = unschedulable_message(pod.get("spec", {}), node, claims)
        with self.lock:
            if message:
                self.unscheduled[md["uid"]] = pod
            else:
                self.unscheduled.pop(md["uid"], None)
        try:
            if message is None:
                self.client.post(path + "/binding", {
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": md["name"], "namespace": md["namespace"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}})
                return
            status = pod.get("status") or {}
            for c in status.get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("message") == message:
                    return   # said already
            self.client.patch(path + "/status", {"status": {
                "phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": None,
                    "lastTransitionTime": now_iso()}]}}, kind="merge")
        except ApiError as e:
            if e.code not in (404, 409):
                log("schedule %s: %s" % (md["name"], e))

    def retry_unschedulable(self):
        """Looks at the unschedulable pods again, as the scheduler's queue does."""
        while not self.stopping:
            time.sleep(RETRY_SECONDS)
            with self.lock:
                pods = list(self.unscheduled.values())
            for pod in pods:
                md = pod["metadata"]
                try:
                    current = self.client.get(self.pod_path(md["namespace"], md["name"]))
                except (ApiError, OSError):
                    with self.lock:
                        self.unscheduled.pop(md["uid"], None)
                    continue
                if current["metadata"]["uid"] != md["uid"] or \
                        current.get("spec", {}).get("nodeName") or \
                        current["metadata"].get("deletionTimestamp"):
                    with self.lock:
                        self.unscheduled.pop(md["uid"], None)
                    continue
                self.schedule(current)

    def start_scheduler(self):
        threading.Thread(target=self.retry_unschedulable, daemon=True).start()
