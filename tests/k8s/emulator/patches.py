"""The three patch formats of PATCH requests: JSON merge patch (RFC 7386),
JSON patch (RFC 6902) and the subset of the strategic merge patch that
kubectl sends for built-in types.
"""
import copy
import json


class PatchError(ValueError):
    pass


def json_merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def _unescape_pointer(token):
    return token.replace("~1", "/").replace("~0", "~")


def json_patch(target, operations):
    """RFC 6902: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(target)

    def walk(path):
        if path == "":
            return None, None
        if not path.startswith("/"):
            raise PatchError("invalid JSON pointer %r" % path)
        tokens = [_unescape_pointer(t) for t in path[1:].split("/")]
        parent = doc
        for t in tokens[:-1]:
            if isinstance(parent, list):
                try:
                    parent = parent[int(t)]
                except (ValueError, IndexError):
                    raise PatchError("path %s not found" % path)
            elif isinstance(parent, dict) and t in parent:
                parent = parent[t]
            else:
                raise PatchError("doc is missing path: %s" % path)
        return parent, tokens[-1]

    def get(path):
        parent, key = walk(path)
        if parent is None:
            return doc
        if isinstance(parent, list):
            try:
                return parent[int(key)]
            except (ValueError, IndexError):
                raise PatchError("path %s not found" % path)
        if key not in parent:
            raise PatchError("doc is missing key: %s" % path)
        return parent[key]

    def add(path, value):
        nonlocal doc
        parent, key = walk(path)
        if parent is None:
            doc = value
            return
        if isinstance(parent, list):
            if key == "-":
                parent.append(value)
            else:
                idx = int(key)
                if idx > len(parent):
                    raise PatchError("index out of range: %s" % path)
                parent.insert(idx, value)
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            raise PatchError("cannot add to %s" % path)

    def remove(path):
        parent, key = walk(path)
        if isinstance(parent, list):
            try:
                return parent.pop(int(key))
            except (ValueError, IndexError):
                raise PatchError("path %s not found" % path)
        if not isinstance(parent, dict) or key not in parent:
            raise PatchError("doc is missing key: %s" % path)
        return parent.pop(key)

    for op in operations:
        kind = op.get("op")
        path = op.get("path", "")
        if kind == "add":
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            remove(path) if path else None
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            value = remove(op["from"])
            add(path, value)
        elif kind == "copy":
            add(path, copy.deepcopy(get(op["from"])))
        elif kind == "test":
            if get(path) != op.get("value"):
                raise PatchError("testing value %s failed" % path)
        else:
            raise PatchError("unexpected kind of operation: %r" % kind)
    return doc


# Strategic merge patch: the merge keys of the built-in list fields that
# `kubectl apply` / `kubectl patch` send. Lists not named here are replaced
# (the strategic-merge default for lists without a patch strategy).
SMP_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "readinessGates": None,
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
    "subsets": None,
}
# Lists of scalars merged as sets.
SMP_MERGE_SCALARS = {"finalizers"}


def _ports_key(items):
    for item in items:
        if isinstance(item, dict):
            if "containerPort" in item:
                return "containerPort"
            if "port" in item:
                return "port"
    return None


def _merge_key(field, items):
    if field == "ports":
        return _ports_key(items)
    return SMP_MERGE_KEYS.get(field)


def strategic_merge_patch(target, patch):
    """The subset of the strategic merge patch that kubectl sends for the
    built-in types: maps merge recursively (null deletes a key), lists with a
    known merge key merge by that key (elements with `$patch: delete` are
    removed, `$patch: replace` replaces), `$setElementOrder/<field>` orders
    the merged list, `$deleteFromPrimitiveList/<field>` removes scalars,
    `$retainKeys` drops keys not listed, a map with `$patch: replace`
    replaces and `$patch: delete` deletes."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    orders = {}
    for key, value in patch.items():
        if key == "$patch":
            continue
        if key == "$retainKeys":
            continue
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        if isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
            if result[key] is None:
                result.pop(key)
            continue
        merged = strategic_merge_patch(result.get(key), value)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    for field, order in orders.items():
        items = result.get(field)
        if not isinstance(items, list) or not isinstance(order, list):
            continue
        mk = _merge_key(field, items + order)
        if mk is None:
            continue
        pos = {}
        for i, o in enumerate(order):
            if isinstance(o, dict) and mk in o:
                pos[json.dumps(o[mk])] = i
        result[field] = sorted(
            items, key=lambda it: pos.get(json.dumps(it.get(mk)) if isinstance(it, dict) else "", len(pos)))
    if "$retainKeys" in patch and isinstance(patch["$retainKeys"], list):
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _smp_list(field, current, patch_items):
    if field in SMP_MERGE_SCALARS:
        out = list(current or [])
        for v in patch_items:
            if v not in out:
                out.append(v)
        return out
    replace = any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch_items)
    if replace:
        return [copy.deepcopy(p) for p in patch_items if not (isinstance(p, dict) and "$patch" in p)]
    mk = _merge_key(field, list(patch_items) + list(current or []))
    if mk is None or not isinstance(current, list):
        return [copy.deepcopy(p) for p in patch_items
                if not (isinstance(p, dict) and p.get("$patch") == "delete")]
    out = copy.deepcopy(current)
    for p in patch_items:
        if not isinstance(p, dict) or mk not in p:
            if isinstance(p, dict) and p.get("$patch") == "delete":
                continue
            out.append(copy.deepcopy(p))
            continue
        idx = next((i for i, c in enumerate(out) if isinstance(c, dict) and c.get(mk) == p[mk]), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strategic_merge_patch({}, p))
        else:
            out[idx] = strategic_merge_patch(out[idx], p)
    return out
