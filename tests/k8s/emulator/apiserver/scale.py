"""The scale subresource of custom resources, as the apiextensions-apiserver
serves it (registry/customresource/etcd.go, ScaleREST) for a CRD version that
declares subresources.scale {specReplicasPath, statusReplicasPath,
labelSelectorPath}:

  * GET .../NAME/scale: an autoscaling/v1 Scale with the custom resource's
    name, namespace, uid, resourceVersion and creationTimestamp, spec.replicas
    read at specReplicasPath (500 InternalError when it is missing),
    status.replicas at statusReplicasPath (0 when missing) and status.selector
    at labelSelectorPath (omitted when empty or missing);
  * PUT (a Scale) and PATCH (merge, JSON patch, apply; strategic merge is
    415 for custom resources, /scale included, as upstream) write
    spec.replicas at specReplicasPath and nothing else, through the custom
    resource's own update: a Scale's metadata.resourceVersion (or uid) is a
    precondition (409), the generation is bumped, the CR's schema validates
    it (422 with the CR's field paths), a watch event MODIFIED is sent, and
    the new Scale is the answer. A patch that leaves spec.replicas out where
    the resource has none is 400 "the spec replicas field ... cannot be
    empty".

A mixin of Api (api.py).
"""
import copy
import json

from .. import patches
from .crd_schema import go_value
from .errors import ApiError, not_found

SCALE_GV = "autoscaling/v1"
# what upstream puts in an old Scale whose spec replicas are missing
INVALID_SPEC_REPLICAS = -2147483648

CR_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
                  "application/apply-patch+yaml")


def _fields(path):
    """A simple JSONPath (".spec.a.b") as its field names."""
    return (path[1:] if path.startswith(".") else path).split(".")


def _go_type(v):
    return {bool: "bool", int: "int64", float: "float64", str: "string", list: "[]interface {}",
            dict: "map[string]interface {}"}.get(type(v), "<nil>")


def _go_v(v):
    """`v` as Go's %v prints it (a string unquoted)."""
    return "<nil>" if v is None else v if isinstance(v, str) else go_value(v)


def _nested(obj, path):
    """(value, found), as unstructured.NestedFieldNoCopy: a null on the way
    is not found; a level on the way that is not an object is an error (500)."""
    fields = _fields(path)
    cur = obj
    for i, f in enumerate(fields):
        if cur is None:
            return None, False
        if not isinstance(cur, dict):
            raise ApiError(500, "", "%s accessor error: %s is of the type %s, expected "
                           "map[string]interface{}" % ("." + ".".join(fields[:i + 1]),
                                                       _go_v(cur), _go_type(cur)))
        if f not in cur:
            return None, False
        cur = cur[f]
    return cur, True


def _nested_typed(obj, path, want, go_name):
    """unstructured.NestedInt64 / NestedString."""
    value, found = _nested(obj, path)
    if not found:
        return None, False
    if not isinstance(value, want) or isinstance(value, bool):
        raise ApiError(500, "", "%s accessor error: %s is of the type %s, expected %s" % (
            "." + ".".join(_fields(path)), _go_v(value), _go_type(value), go_name))
    return value, True


def _set_nested(obj, path, value):
    cur = obj
    fields = _fields(path)
    for i, f in enumerate(fields[:-1]):
        nxt = cur.setdefault(f, {})
        if not isinstance(nxt, dict):
            raise ApiError(500, "", "value cannot be set because %s is not a "
                           "map[string]interface{}" % ("." + ".".join(fields[:i + 1])))
        cur = nxt
    cur[fields[-1]] = value


def scale_of(rtype, obj):
    """(the Scale of custom resource `obj`, whether its spec replicas exist)."""
    paths = rtype.scale
    spec_replicas, found = _nested_typed(obj, paths["specReplicasPath"], int, "int64")
    status_replicas, _ = _nested_typed(obj, paths.get("statusReplicasPath", ""), int, "int64")
    selector = ""
    if paths.get("labelSelectorPath"):
        selector, _ = _nested_typed(obj, paths["labelSelectorPath"], str, "string")
    md = obj["metadata"]
    meta = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if md.get(k)}
    status = {"replicas": status_replicas or 0}
    if selector:
        status["selector"] = selector
    return {"kind": "Scale", "apiVersion": SCALE_GV, "metadata": meta,
            "spec": {"replicas": spec_replicas or 0}, "status": status}, found


def _replicas_of(scale):
    """spec.replicas of a Scale sent by a client, as Go decodes it into an
    int32 (missing or null: 0)."""
    spec = scale.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, dict) else spec
    if replicas is None:
        return 0
    if isinstance(replicas, int) and not isinstance(replicas, bool) and \
            -2 ** 31 <= replicas < 2 ** 31:
        return replicas
    if isinstance(replicas, (int, float)) and not isinstance(replicas, bool):
        what = "number %s" % replicas
    else:
        what = {bool: "bool", str: "string", list: "array", dict: "object"}[type(replicas)]
    field = "ScaleSpec.spec.replicas of type int32" if isinstance(spec, dict) else \
        "Scale.spec of type v1.ScaleSpec"
    raise ApiError(400, "BadRequest", 'Scale in version "v1" cannot be handled as a Scale: '
                   "json: cannot unmarshal %s into Go struct field %s" % (what, field))


def _check_scale_body(body, name, namespace):
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
    if body.get("kind") not in (None, "", "Scale") or \
            body.get("apiVersion") not in (None, "", SCALE_GV):
        raise ApiError(400, "BadRequest", 'no kind "%s" is registered for version "%s" in '
                       "scheme" % (body.get("kind", ""), body.get("apiVersion", "")))
    md = body.get("metadata") or {}
    if md.get("name") and md["name"] != name:
        raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name "
                       "on the URL (%s)" % (md["name"], name))
    if namespace and md.get("namespace") and md["namespace"] != namespace:
        raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                       "the namespace sent on the request")


class ScaleSubresource:
    def get_scale(self, rtype, namespace, name):
        with self.store.lock:
            obj = self.store.get(rtype, namespace, name)
            if obj is None:
                raise not_found(rtype, name)
            scale, found = scale_of(rtype, obj)
        if not found:
            msg = "the spec replicas field %s does not exist" % json.dumps(
                rtype.scale["specReplicasPath"])
            raise ApiError(500, "InternalError", "Internal error occurred: " + msg,
                           {"causes": [{"message": msg}]})
        return scale

    def update_scale(self, rtype, namespace, name, body, query, warnings, user=None):
        _check_scale_body(body, name, namespace)
        return self._write_scale(rtype, namespace, name, lambda old: body, query, warnings, user)

    def patch_scale(self, rtype, namespace, name, content_type, raw, query, warnings, user=None):
        ctype = content_type.split(";")[0].strip()
        if ctype not in CR_PATCH_TYPES:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           "unknown format - accepted media types include: " +
                           ", ".join(CR_PATCH_TYPES))
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding patch: %s" % e)

        def apply(old):
            if ctype == "application/json-patch+json":
                try:
                    return patches.json_patch(old, patch)
                except (patches.PatchError, KeyError, ValueError, TypeError) as e:
                    raise ApiError(422, "Invalid", str(e))
            if ctype == "application/apply-patch+yaml":
                _check_scale_body(patch, name, namespace)
            return patches.json_merge_patch(old, patch)

        return self._write_scale(rtype, namespace, name, apply, query, warnings, user)

    def _write_scale(self, rtype, namespace, name, updated, query, warnings, user):
        """Writes the spec replicas of the Scale that `updated` makes of the
        current one (scaleUpdatedObjectInfo.UpdatedObject) through the
        custom resource's own update."""
        with self.store.lock:
            old = self.store.get(rtype, namespace, name)
            if old is None:
                raise not_found(rtype, name)
            old_scale, found = scale_of(rtype, old)
            if not found:
                old_scale["spec"]["replicas"] = INVALID_SPEC_REPLICAS
            scale = updated(copy.deepcopy(old_scale))
            _check_scale_body(scale, name, namespace)
            replicas = _replicas_of(scale)
            if replicas == INVALID_SPEC_REPLICAS:
                raise ApiError(400, "BadRequest", "the spec replicas field %s cannot be empty"
                               % json.dumps(rtype.scale["specReplicasPath"]))
            cr = copy.deepcopy(old)
            _set_nested(cr, rtype.scale["specReplicasPath"], replicas)
            md = scale.get("metadata") or {}
            if md.get("resourceVersion"):
                cr["metadata"]["resourceVersion"] = md["resourceVersion"]
            if md.get("uid"):
                cr["metadata"]["uid"] = md["uid"]
            new, _ = self.update(rtype, namespace, name, cr, query, warnings, from_patch=True,
                                 user=user)
            return scale_of(rtype, new)[0]
