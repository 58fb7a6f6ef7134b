"""ResourceQuota admission, as the API server's quota plugin does it
(k8s.io/apiserver quota admission with the core evaluators): every
ResourceQuota of the object's namespace limits, in spec.hard, the count of
pods (`pods`, `count/pods`), of Services, Secrets and ConfigMaps (`services`,
`count/services` and so on), and the sum of the containers' requests.cpu,
requests.memory (also spelt cpu, memory), limits.cpu and limits.memory over
the namespace's pods that have not finished (Succeeded and Failed pods no
longer count).

  * A quota that limits a compute resource makes every container (init
    containers too) say it: otherwise 403 `failed quota: NAME: must specify
    requests.cpu for: c1,c2; limits.memory for: c1`.
  * A pod that would take the usage past a hard limit: 403 `exceeded quota:
    NAME, requested: pods=1, used: pods=2, limited: pods=2` (the exceeded
    resources only).
  * status.hard and status.used follow at once (the real quota controller
    catches up within seconds): on every pod admission, pod deletion and
    write of a ResourceQuota, creation and deletion of what it counts.
"""
import copy
import re
from decimal import Decimal

from .errors import ApiError

QUOTA_TYPE = ("", "v1", "resourcequotas")
# quota name -> (the pod's requirement it sums, the resource)
COMPUTE = {"requests.cpu": ("requests", "cpu"), "cpu": ("requests", "cpu"),
           "requests.memory": ("requests", "memory"), "memory": ("requests", "memory"),
           "limits.cpu": ("limits", "cpu"), "limits.memory": ("limits", "memory")}
# quota name -> the plural of the objects it counts
COUNTS = {"pods": "pods", "count/pods": "pods", "services": "services",
          "count/services": "services", "secrets": "secrets", "count/secrets": "secrets",
          "configmaps": "configmaps", "count/configmaps": "configmaps"}
COUNTED_PLURALS = sorted(set(COUNTS.values()))
SUFFIXES = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
            "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
            "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
            "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60}


def parse_quantity(text):
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", str(text).strip())
    if not m or m.group(2) not in SUFFIXES:
        raise ApiError(422, "Invalid", 'quantities must match the regular expression '
                       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': %r" % text)
    return Decimal(m.group(1)) * SUFFIXES[m.group(2)]


def format_quantity(value, resource):
    """As resource.Quantity prints: millicores below a whole cpu, binary
    suffixes for memory that divides evenly."""
    if value == value.to_integral_value():
        value = int(value)
        if "memory" in resource:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                if value and value % int(SUFFIXES[suffix]) == 0:
                    return "%d%s" % (value // int(SUFFIXES[suffix]), suffix)
        return str(value)
    return "%sm" % (value * 1000).to_integral_value()


def _containers(pod):
    spec = pod.get("spec") or {}
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def _requirement(container, kind, resource):
    """The container's request or limit (a pod's defaulting has made a
    request of each limit set alone, admission.py)."""
    return ((container.get("resources") or {}).get(kind) or {}).get(resource)


def usage(obj, plural, names):
    """What `obj` (one of `plural`) takes of each quota resource in `names`."""
    out = {}
    for name in names:
        if name in COUNTS:
            out[name] = Decimal(1 if COUNTS[name] == plural else 0)
        elif name in COMPUTE and plural == "pods":
            kind, resource = COMPUTE[name]
            out[name] = sum((parse_quantity(v) for v in (
                _requirement(c, kind, resource) for c in _containers(obj)) if v is not None),
                Decimal(0))
        else:
            out[name] = Decimal(0)
    return out


def _counted(obj, plural):
    return plural != "pods" or (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _pretty(values, names):
    return ",".join("%s=%s" % (n, format_quantity(values.get(n, Decimal(0)), n))
                    for n in sorted(names))


def _used(api, namespace, names):
    total = {n: Decimal(0) for n in names}
    for plural in COUNTED_PLURALS:
        for obj in api.store.list(api.served[("", "v1", plural)], namespace):
            if _counted(obj, plural):
                for n, v in usage(obj, plural, names).items():
                    total[n] += v
    return total


def _quotas(api, namespace):
    return sorted(api.store.list(api.served[QUOTA_TYPE], namespace),
                  key=lambda q: q["metadata"]["name"])


def _tracked(quota):
    return [n for n in ((quota.get("spec") or {}).get("hard") or {})
            if n in COUNTS or n in COMPUTE]


def admit(api, obj, namespace, plural="pods"):
    """Raises 403 when `obj`, one of `plural`, breaks a quota of `namespace`
    (store lock held)."""
    name = obj["metadata"].get("name", "")
    for quota in _quotas(api, namespace):
        qname, hard = quota["metadata"]["name"], quota["spec"]["hard"]
        missing = {}
        for resource in _tracked(quota):
            if resource not in COMPUTE or plural != "pods":
                continue
            kind, base = COMPUTE[resource]
            label = "%s.%s" % (kind, base) if resource in ("cpu", "memory") else resource
            for c in _containers(obj):
                if _requirement(c, kind, base) is None:
                    missing.setdefault(label, []).append(c.get("name", ""))
        if missing:
            raise _forbidden(plural, name, "failed quota: %s: must specify %s" % (qname, "; ".join(
                "%s for: %s" % (r, ",".join(sorted(set(cs)))) for r, cs in sorted(
                    missing.items()))))
        names = _tracked(quota)
        requested = usage(obj, plural, names)
        used = _used(api, namespace, names)
        # only what the object takes is checked
        exceeded = [n for n in names
                    if requested[n] > 0 and used[n] + requested[n] > parse_quantity(hard[n])]
        if exceeded:
            limited = {n: parse_quantity(hard[n]) for n in exceeded}
            raise _forbidden(plural, name, "exceeded quota: %s, requested: %s, used: %s, limited: %s" % (
                qname, _pretty(requested, exceeded), _pretty(used, exceeded),
                _pretty(limited, exceeded)))


def _forbidden(plural, name, why):
    return ApiError(403, "Forbidden", '%s "%s" is forbidden: %s' % (plural, name, why),
                    {"name": name, "kind": plural})


def refresh_status(api, namespace):
    """Writes status.hard and status.used of every quota of `namespace` (store
    lock held), as the quota controller does after a change."""
    rtype = api.served[QUOTA_TYPE]
    for quota in _quotas(api, namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = _used(api, namespace, _tracked(quota))
        status = {"hard": dict(hard),
                  "used": {n: format_quantity(v, n) for n, v in used.items()}}
        if quota.get("status") != status:
            new = copy.deepcopy(quota)
            new["status"] = status
            api.store.put(rtype, new, "MODIFIED", quota)


def check(quota):
    """Validation of a ResourceQuota's spec.hard: quantities only."""
    for value in ((quota.get("spec") or {}).get("hard") or {}).values():
        parse_quantity(value)
