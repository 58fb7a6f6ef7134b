"""LimitRange admission, as the API server's LimitRanger plugin does it
(plugin/pkg/admission/limitranger), for the items of type Container:

  * A LimitRange is defaulted as it is made (SetDefaults_LimitRangeItem): a
    resource with a max and no default limit gets the max as its default; one
    with a default limit and no default request gets the limit as its
    request; one with neither but a min gets the min as its request.
  * A pod's containers (init containers too) get the default limit and
    request of each resource they set none of, and the pod the annotation
    kubernetes.io/limit-ranger saying so ("LimitRanger plugin set: cpu
    request for container worker"). The pod's own defaulting ran before
    (admission.py): a container that set only a limit already requests it.
  * Then each container's requests and limits are checked against min and
    max: 403 `pods "x" is forbidden: maximum cpu usage per Container is 2,
    but limit is 4` (several in brackets, comma-separated).

Items of type Pod and PersistentVolumeClaim, and maxLimitRequestRatio, are
not modelled: kubeps makes no use of them.
"""
from .errors import ApiError
from .resource_quota import parse_quantity

LIMIT_RANGE_TYPE = ("", "v1", "limitranges")
ANNOTATION = "kubernetes.io/limit-ranger"


def default_limit_range(obj):
    """SetDefaults_LimitRangeItem, on a LimitRange being made."""
    for item in (obj.get("spec") or {}).get("limits") or []:
        if item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        request = item.setdefault("defaultRequest", {})
        for name, value in (item.get("max") or {}).items():
            default.setdefault(name, value)
        for name, value in default.items():
            request.setdefault(name, value)
        for name, value in (item.get("min") or {}).items():
            request.setdefault(name, value)
        for quantities in (item.get(k) or {} for k in ("default", "defaultRequest", "min", "max")):
            for value in quantities.values():
                parse_quantity(value)


def admit(api, pod, namespace):
    """Defaults `pod`'s containers from each LimitRange of `namespace` (the
    mutating phase), then refuses it (403) where a container breaks a min or
    a max of one (the validating phase, the first LimitRange that refuses
    says why); store lock held."""
    limit_ranges = [[item for item in (r.get("spec") or {}).get("limits") or []
                     if item.get("type") == "Container"] for r in _limit_ranges(api, namespace)]
    spec = pod.get("spec") or {}
    containers = [("container", c) for c in spec.get("containers") or []] + \
        [("init container", c) for c in spec.get("initContainers") or []]
    for items in limit_ranges:
        defaults = {"defaultRequest": {}, "default": {}}
        for item in items:
            for source, quantities in defaults.items():
                quantities.update(item.get(source) or {})
        said = []
        for prefix, c in containers:
            said += _default(c, defaults, prefix)
        if said:
            annotations = pod["metadata"].setdefault("annotations", {})
            annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(said)
    for items in limit_ranges:
        errors = [e for item in items for _, c in containers for e in _check(c, item)]
        if errors:
            why = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            name = pod["metadata"].get("name", "")
            raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: %s' % (name, why),
                           {"name": name, "kind": "pods"})


def _limit_ranges(api, namespace):
    return sorted(api.store.list(api.served[LIMIT_RANGE_TYPE], namespace),
                  key=lambda r: r["metadata"]["name"])


def _default(container, defaults, prefix):
    """mergeContainerResources: what it set, for the annotation."""
    resources = container.setdefault("resources", {})
    said = []
    for kind, source, what in (("requests", "defaultRequest", "request"),
                               ("limits", "default", "limit")):
        have = resources.get(kind) or {}
        added = sorted(name for name in defaults[source] if name not in have)
        if not added:
            continue
        for name in added:
            have[name] = defaults[source][name]
        resources[kind] = have
        said.append("%s %s for %s %s" % (", ".join(added), what, prefix, container.get("name")))
    return said


def _check(container, item):
    """minConstraint and maxConstraint of each resource the item bounds."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    errors = []
    for name, bound in sorted((item.get("min") or {}).items()):
        least = "minimum %s usage per Container is %s" % (name, bound)
        if name not in requests:
            errors.append(least + ".  No request is specified")
        elif parse_quantity(requests[name]) < parse_quantity(bound):
            errors.append("%s, but request is %s" % (least, requests[name]))
        elif name in limits and parse_quantity(limits[name]) < parse_quantity(bound):
            errors.append("%s, but limit is %s" % (least, limits[name]))
    for name, bound in sorted((item.get("max") or {}).items()):
        most = "maximum %s usage per Container is %s" % (name, bound)
        if name not in limits:
            errors.append(most + ".  No limit is specified")
        elif parse_quantity(limits[name]) > parse_quantity(bound):
            errors.append("%s, but limit is %s" % (most, limits[name]))
        elif name in requests and parse_quantity(requests[name]) > parse_quantity(bound):
            errors.append("%s, but request is %s" % (most, requests[name]))
    return errors
