"""The Eviction subresource (POST pods/NAME/eviction, a policy/v1 Eviction)
with PodDisruptionBudgets, as the API server's eviction REST handler and the
disruption controller decide it together: a pod no budget selects, or one
already finished, is deleted at once (gracefully, with the Eviction's
deleteOptions); a pod one budget selects is deleted only while that
budget allows a disruption, else 429 TooManyRequests "Cannot evict pod as
it would violate the pod's disruption budget."; two budgets are an error
(500). An evicted pod gets the condition DisruptionTarget (reason
EvictionByEvictionAPI) before its deletion, as since Kubernetes 1.26. What
`kubectl drain` and the cluster autoscaler use.

The budget's numbers, computed at each eviction from the pods it selects
(and written to its status, where `kubectl get pdb` reads them):
expectedPods, the pods selected and not being deleted; currentHealthy, of
those the Ready ones; desiredHealthy, minAvailable (a number, or a
percentage of expectedPods rounded up) or expectedPods less maxUnavailable
(likewise); disruptionsAllowed, currentHealthy less desiredHealthy. A pod
that is not Ready may be evicted whenever the budget is met
(unhealthyPodEvictionPolicy IfHealthyBudget, the default). There is no
disruption controller running between evictions.
"""
import copy
import math

from ..clock import now_iso
from ..selector import label_selector_reqs as _selector, labels_match
from .errors import ApiError, not_found, status_success


def _ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _count(value, total, round_up):
    """An IntOrString of a budget: a number, or a percentage of `total`."""
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100.0
        return int(math.ceil(share) if round_up else math.floor(share))
    return int(value)


def budget_status(pdb, pods):
    """The budget's status for `pods` (those of its namespace)."""
    spec = pdb.get("spec") or {}
    reqs = _selector(spec.get("selector"))
    selected = [p for p in pods if spec.get("selector") is not None and
                labels_match(reqs, p["metadata"].get("labels")) and
                not p["metadata"].get("deletionTimestamp") and
                (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    expected = len(selected)
    healthy = sum(1 for p in selected if _ready(p))
    if "minAvailable" in spec:
        desired = _count(spec["minAvailable"], expected, round_up=True)
    else:
        desired = expected - _count(spec.get("maxUnavailable", 0), expected, round_up=True)
    return {"observedGeneration": pdb["metadata"].get("generation", 1),
            "expectedPods": expected, "currentHealthy": healthy,
            "desiredHealthy": max(desired, 0),
            "disruptionsAllowed": max(healthy - max(desired, 0), 0),
            "conditions": [{"type": "DisruptionAllowed",
                            "status": "True" if healthy > desired else "False",
                            "reason": "SufficientPods" if healthy > desired
                            else "InsufficientPods",
                            "message": "", "observedGeneration":
                            pdb["metadata"].get("generation", 1),
                            "lastTransitionTime": now_iso()}]}


class Evictions:
    """A mixin of the Api (api.py)."""

    def evict(self, namespace, name, body):
        pods_t = self.served[("", "v1", "pods")]
        pdb_t = self.served[("policy", "v1", "poddisruptionbudgets")]
        with self.store.lock:
            pod = self.store.get(pods_t, namespace, name)
            if pod is None:
                raise not_found(pods_t, name)
            options = (body or {}).get("deleteOptions") or {}
            terminal = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if pod["metadata"].get("deletionTimestamp"):
                return status_success()     # already going: nothing to decide
            budgets = [b for b in self.store.list(pdb_t, namespace)
                       if (b.get("spec") or {}).get("selector") is not None and
                       labels_match(_selector(b["spec"]["selector"]),
                                    pod["metadata"].get("labels"))]
            if len(budgets) > 1:
                raise ApiError(500, "InternalError", "This pod has more than one "
                               "PodDisruptionBudget, which the eviction subresource does not "
                               "support.")
            if budgets and not terminal:
                budget = budgets[0]
                status = budget_status(budget, self.store.list(pods_t, namespace))
                self._write_budget_status(pdb_t, budget, status)
                unhealthy_ok = not _ready(pod) and \
                    status["currentHealthy"] >= status["desiredHealthy"]
                if status["disruptionsAllowed"] <= 0 and not unhealthy_ok:
                    raise ApiError(
                        429, "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {"causes": [{"reason": "DisruptionBudget", "message": (
                            "The disruption budget %s needs %d healthy pods and has %d "
                            "currently" % (budget["metadata"]["name"], status["desiredHealthy"],
                                           status["currentHealthy"]))}]})
            if not terminal:
                # Kubernetes 1.26+: why the pod goes, for its controller to read
                marked = copy.deepcopy(pod)
                conditions = marked.setdefault("status", {}).setdefault("conditions", [])
                conditions[:] = [c for c in conditions if c.get("type") != "DisruptionTarget"]
                conditions.append({"type": "DisruptionTarget", "status": "True",
                                   "reason": "EvictionByEvictionAPI",
                                   "message": "Eviction API: evicting",
                                   "lastProbeTime": None, "lastTransitionTime": now_iso()})
                self.store.put(pods_t, marked, "MODIFIED", pod)
            self.delete(pods_t, namespace, name, options, {})
            if budgets and not terminal:
                # one disruption spent until the pod is gone
                status = dict(status, disruptionsAllowed=max(
                    status["disruptionsAllowed"] - 1, 0))
                self._write_budget_status(pdb_t, self.store.get(
                    pdb_t, namespace, budgets[0]["metadata"]["name"]), status)
        return status_success()

    def _write_budget_status(self, pdb_t, budget, status):
        if budget is None or budget.get("status", {}).get("disruptionsAllowed") == \
                status["disruptionsAllowed"] and budget.get("status", {}).get(
                    "currentHealthy") == status["currentHealthy"]:
            return
        new = copy.deepcopy(budget)
        new["status"] = status
        self.store.put(pdb_t, new, "MODIFIED", budget)
