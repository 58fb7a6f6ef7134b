"""OpenAPI v3 documents of the custom resources, built from the schemas of
the CRDs the server holds, as the real API server publishes them: what
`kubectl explain` reads.

  GET /openapi/v3                 {"paths": {"apis/G/V": {"serverRelativeURL": ...}}}
  GET /openapi/v3/apis/G/V?hash=  the group version's document: its paths and
                                  components.schemas, one per kind, named like
                                  the real server's ("io.kubeps.v1alpha1.TrainingJob"),
                                  and autoscaling/v1 Scale where a CRD has /scale

Only the group versions of CRDs are listed: for built-in types kubectl keeps
its compiled-in types (strategic merge patch), as before. A custom resource's
PATCH names the content types the real server takes for it (no strategic
merge patch) and the fieldValidation parameter, so that `kubectl apply` still
sends a merge patch and leaves field validation to this server.
"""
import copy
import hashlib
import json

from .errors import ApiError

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
LIST_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/apply-patch+yaml")

# What the real server puts in place of a CRD's `metadata`, shortened to the
# fields a user of explain looks for.
_META_SCHEMAS = {
    OBJECT_META: {
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which "
                       "includes all objects users must create.",
        "properties": {
            "name": {"type": "string", "description": "Name must be unique within a namespace."},
            "namespace": {"type": "string", "description": "Namespace defines the space within "
                          "which each name must be unique."},
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                       "description": "Map of string keys and values that can be used to "
                       "organize and categorize (scope and select) objects."},
            "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                            "description": "Annotations is an unstructured key value map."},
            "uid": {"type": "string", "description": "UID is the unique in time and space "
                    "value for this object."},
            "resourceVersion": {"type": "string", "description": "An opaque value that "
                                "represents the internal version of this object."},
            "generation": {"type": "integer", "format": "int64", "description": "A sequence "
                           "number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description":
                                  "CreationTimestamp is a timestamp representing the server "
                                  "time when this object was created."},
        },
    },
    LIST_META: {
        "type": "object",
        "description": "ListMeta describes metadata that synthetic resources must have.",
        "properties": {
            "resourceVersion": {"type": "string", "description": "String that identifies the "
                                "server's internal version of this object."},
            "continue": {"type": "string", "description": "continue may be set if the user set "
                         "a limit on the number of items returned."},
        },
    },
}


SCALE = "io.k8s.api.autoscaling.v1.Scale"
# the Scale of the scale subresource (scale.py), as the real document has it
_SCALE_SCHEMA = {
    "type": "object",
    "description": "Scale represents a scaling request for a resource.",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"allOf": [{"$ref": "#/components/schemas/" + OBJECT_META}]},
        "spec": {"type": "object", "description": "ScaleSpec describes the attributes of a "
                 "scale subresource.", "properties": {"replicas": {
                     "type": "integer", "format": "int32",
                     "description": "replicas is the desired number of instances for the "
                                    "scaled object."}}},
        "status": {"type": "object", "description": "ScaleStatus represents the current status "
                   "of a scale subresource.", "required": ["replicas"], "properties": {
                       "replicas": {"type": "integer", "format": "int32", "description":
                                    "replicas is the actual number of observed instances of "
                                    "the scaled object."},
                       "selector": {"type": "string", "description": "selector is the label "
                                    "query over pods that should match the replicas count."}}},
    },
    "x-kubernetes-group-version-kind": [{"group": "autoscaling", "version": "v1",
                                         "kind": "Scale"}],
}


def schema_name(group, version, kind):
    """The real server's name: the group's labels reversed, then version and kind."""
    return ".".join(list(reversed(group.split("."))) + [version, kind])


def _crd_types(api):
    return [t for t in api.served.values() if t.crd is not None]


def _group_versions(api):
    out = {}
    for t in _crd_types(api):
        out.setdefault("apis/%s/%s" % (t.group, t.version), []).append(t)
    return out


def _gvk(t):
    return [{"group": t.group, "version": t.version, "kind": t.kind}]


def _ref(name):
    return {"allOf": [{"$ref": "#/components/schemas/" + name}]}


def _resource_schema(t):
    schema = copy.deepcopy(t.schema or {"type": "object"})
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned "
                           "schema of this representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing the "
                     "REST resource this object represents."}
    props["metadata"] = dict(_ref(OBJECT_META), description="Standard object's metadata.")
    schema["x-kubernetes-group-version-kind"] = _gvk(t)
    return schema


def _list_schema(t, item):
    return {
        "type": "object",
        "description": "%sList is a list of %s" % (t.kind, t.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": _ref(item)},
            "metadata": _ref(LIST_META),
        },
        "x-kubernetes-group-version-kind": [dict(_gvk(t)[0], kind=t.kind + "List")],
    }


def _operation(t, name, action, body=None, gvk=None):
    op = {
        "operationId": action,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk or _gvk(t)[0],
        "responses": {"200": {"description": "OK", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/" + name}}}}},
    }
    if body is not None:
        op["requestBody"] = {"content": {ct: {"schema": {"type": "object"}} for ct in body}}
        op["parameters"] = [{"name": "fieldValidation", "in": "query",
                             "schema": {"type": "string", "uniqueItems": True}}]
    return op


def _paths(t, name):
    base = "/apis/%s/%s/%s%s" % (t.group, t.version,
                                 "namespaces/{namespace}/" if t.namespaced else "", t.plural)
    item = base + "/{name}"
    paths = {
        base: {"get": _operation(t, name + "List", "list"),
               "post": _operation(t, name, "post", body=["application/json"])},
        item: {"get": _operation(t, name, "get"),
               "put": _operation(t, name, "put", body=["application/json"]),
               "patch": _operation(t, name, "patch", body=PATCH_TYPES)},
    }
    if t.status:
        paths[item + "/status"] = {"get": _operation(t, name, "get"),
                                   "put": _operation(t, name, "put", body=["application/json"]),
                                   "patch": _operation(t, name, "patch", body=PATCH_TYPES)}
    if t.scale is not None:
        gvk = _SCALE_SCHEMA["x-kubernetes-group-version-kind"][0]
        paths[item + "/scale"] = {
            "get": _operation(t, SCALE, "get", gvk=gvk),
            "put": _operation(t, SCALE, "put", body=["application/json"], gvk=gvk),
            "patch": _operation(t, SCALE, "patch", body=PATCH_TYPES, gvk=gvk)}
    return paths


def group_version_document(types):
    schemas = copy.deepcopy(_META_SCHEMAS)
    paths = {}
    for t in types:
        name = schema_name(t.group, t.version, t.kind)
        schemas[name] = _resource_schema(t)
        schemas[name + "List"] = _list_schema(t, name)
        paths.update(_paths(t, name))
        if t.scale is not None:
            schemas[SCALE] = copy.deepcopy(_SCALE_SCHEMA)
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": paths,
            "components": {"schemas": schemas}}


def _hash(document):
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:128].upper()


def document(api, path):
    """The body of GET `path` under /openapi/v3. A document's URL carries
    the hash of its content, so kubectl's disk cache never serves an old one
    after a CRD changes."""
    path = path.split("?", 1)[0].rstrip("/")
    with api.store.lock:
        group_versions = {gv: group_version_document(types)
                          for gv, types in _group_versions(api).items()}
    if path == "/openapi/v3":
        return {"paths": {gv: {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (gv, _hash(doc))}
                          for gv, doc in sorted(group_versions.items())}}
    doc = group_versions.get(path[len("/openapi/v3/"):])
    if doc is None:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return doc
