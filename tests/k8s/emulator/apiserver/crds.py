"""CustomResourceDefinitions: the structural checks of a CRD, its Established
status, (un)registering the resource types it defines, and pruning,
defaulting and validating custom resources against its schema
(crd_schema.py).

A mixin of Api (api.py): it uses its store and its table of served types.
"""
import copy

from ..clock import now_iso
from .cel_rules import CelEvaluator, CelUnavailable, compile_errors, object_rule_errors
from .crd_schema import check_structural, go_value, prune_and_default, validate_schema
from .errors import ApiError, invalid
from .resources import ResourceType


def _simple_json_path(path, field, errors):
    """validateSimpleJSONPath: whether `path` is a dotted path from the root."""
    if not path.startswith("."):
        errors.append((field, "FieldValueInvalid", "Invalid value: %s: must be a simple json "
                       "path starting with ." % go_value(path)))
        return False
    return True


def check_scale_paths(scale, prefix, errors):
    """ValidateCustomResourceDefinitionSubresources: the paths of a scale
    subresource, with the upstream field errors."""
    if scale is None:
        return
    if not isinstance(scale, dict):
        scale = {}
    for key, under, where in (("specReplicasPath", (".spec.",), ".spec"),
                              ("statusReplicasPath", (".status.",), ".status"),
                              ("labelSelectorPath", (".spec.", ".status."),
                               "either .spec or .status")):
        field = "%s.scale.%s" % (prefix, key)
        path = scale.get(key) or ""
        if not path:
            if key != "labelSelectorPath":
                errors.append((field, "FieldValueRequired", "Required value"))
            continue
        if _simple_json_path(path, field, errors) and not path.startswith(under):
            errors.append((field, "FieldValueInvalid", "Invalid value: %s: should be a json "
                           "path under %s" % (go_value(path), where)))


class CustomResources:
    def validate_custom(self, rtype, obj, field_validation, warnings, name, old=None):
        """Prunes, defaults and validates a custom resource in place: its
        schema, then its CEL rules unless the schema found a value of the
        wrong type or one missing (`old`: the object the write replaces, for
        transition rules and ratcheting)."""
        schema = rtype.schema
        if schema is None:
            return obj
        unknown = []
        pruned = prune_and_default(obj, schema, "", unknown, root=True)
        if unknown:
            if field_validation == "Strict":
                raise ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: '
                               'strict decoding error: %s' % (
                                   rtype.kind, rtype.version, rtype.kind,
                                   ", ".join('unknown field "%s"' % u for u in unknown)))
            if field_validation == "Warn":
                warnings.extend('unknown field "%s"' % u for u in unknown)
        errors = []
        body = {k: v for k, v in pruned.items() if k not in ("apiVersion", "kind", "metadata")}
        root = {k: v for k, v in schema.items() if k not in ("required",)}
        root_required = [r for r in schema.get("required", []) if r not in
                         ("apiVersion", "kind", "metadata")]
        if root_required:
            root["required"] = root_required
        root["properties"] = {k: v for k, v in (schema.get("properties") or {}).items()
                              if k not in ("apiVersion", "kind", "metadata")}
        validate_schema(body, root, "", errors)
        self._rule_errors(rtype, pruned, old, errors, warnings)
        if errors:
            raise invalid(rtype, name, errors)
        obj.clear()
        obj.update(pruned)
        return obj

    def _cel(self):
        if getattr(self, "_cel_evaluator", None) is None:
            self._cel_evaluator = CelEvaluator()
        return self._cel_evaluator

    @staticmethod
    def _rule_view(obj):
        """What a rule at the root sees: of metadata, only the name."""
        view = {k: v for k, v in obj.items() if k != "metadata"}
        md = obj.get("metadata") or {}
        view["metadata"] = {k: md[k] for k in ("name", "generateName") if k in md}
        return view

    def _rule_errors(self, rtype, obj, old, errors, warnings):
        try:
            object_rule_errors(self._cel(), rtype.schema, self._rule_view(obj),
                               self._rule_view(old) if old is not None else None, errors,
                               warnings)
        except CelUnavailable as e:
            raise ApiError(500, "InternalError", "the stand-in cannot check %s's validation "
                           "rules: %s" % (rtype.kind, e))

    def _check_crd(self, obj):
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        name = obj["metadata"].get("name", "")
        errors = []
        if not group:
            errors.append(("spec.group", "FieldValueRequired", "Required value"))
        if not names.get("plural"):
            errors.append(("spec.names.plural", "FieldValueRequired", "Required value"))
        if not names.get("kind"):
            errors.append(("spec.names.kind", "FieldValueRequired", "Required value"))
        if names.get("plural") and group and name != names["plural"] + "." + group:
            errors.append(("metadata.name", "FieldValueInvalid",
                           'Invalid value: "%s": must be spec.names.plural+"."+spec.group' % name))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errors.append(("spec.scope", "FieldValueNotSupported",
                           'Unsupported value: %s: supported values: "Cluster", "Namespaced"'
                           % go_value(spec.get("scope"))))
        versions = spec.get("versions") or []
        if not versions:
            errors.append(("spec.versions", "FieldValueInvalid",
                           "Invalid value: null: must have exactly one version marked as storage "
                           "version"))
        if sum(1 for v in versions if v.get("storage")) != 1 and versions:
            errors.append(("spec.versions", "FieldValueInvalid", "Invalid value: %s: must have "
                           "exactly one version marked as storage version" % "[]"))
        for i, v in enumerate(versions):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            path = "spec.versions[%d].schema.openAPIV3Schema" % i
            if schema is None:
                errors.append((path, "FieldValueRequired",
                               "Required value: schemas are required"))
                continue
            check_structural(schema, path, errors)
            try:
                compile_errors(self._cel(), schema, path, errors)
            except CelUnavailable as e:
                raise ApiError(500, "InternalError", "the stand-in cannot compile %s's "
                               "validation rules: %s" % (name, e))
            check_scale_paths((v.get("subresources") or {}).get("scale"),
                              "spec.versions[%d].subresources" % i, errors)
            if schema.get("type") != "object":
                errors.append((path + ".type", "FieldValueInvalid",
                               "Invalid value: %s: must be object at the root"
                               % go_value(schema.get("type"))))
        if errors:
            raise invalid(self.served[("apiextensions.k8s.io", "v1",
                                       "customresourcedefinitions")], name, errors)
        spec.setdefault("conversion", {"strategy": "None"})
        names.setdefault("singular", names.get("kind", "").lower())
        names.setdefault("listKind", names.get("kind", "") + "List")

    def _crd_established(self, obj):
        spec = obj["spec"]
        t = now_iso()
        obj["status"] = {
            "acceptedNames": copy.deepcopy(spec["names"]),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": t}],
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
        }

    def install_crd(self, crd):
        """(Re)registers the resource types a CRD defines."""
        spec = crd["spec"]
        names = spec["names"]
        self.uninstall_crd(crd["metadata"]["name"], delete_objects=False)
        types = []
        storage = None
        for v in spec["versions"]:
            if not v.get("served", True):
                continue
            cols = v.get("additionalPrinterColumns")
            t = ResourceType(spec["group"], v["name"], names["plural"], names["kind"],
                             namespaced=spec.get("scope") == "Namespaced",
                             singular=names.get("singular"),
                             short_names=names.get("shortNames", []),
                             categories=names.get("categories", []),
                             status="status" in (v.get("subresources") or {}),
                             schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                             printer_columns=cols, crd=crd["metadata"]["name"],
                             allow_unconditional_update=False,
                             scale=(v.get("subresources") or {}).get("scale"))
            types.append(t)
            if v.get("storage"):
                storage = t
        self.crd_types[crd["metadata"]["name"]] = types
        for t in types:
            self.served[(t.group, t.version, t.plural)] = t
        if storage is not None:
            self.store.types[storage.key] = storage

    def uninstall_crd(self, name, delete_objects=True):
        types = self.crd_types.pop(name, [])
        for t in types:
            self.served.pop((t.group, t.version, t.plural), None)
        if delete_objects and types:
            t = types[0]
            with self.store.lock:
                for obj in list(self.store.objects[t.key].values()):
                    o = copy.deepcopy(obj)
                    self.store.put(t, o, "DELETED", obj)
                    self.store.gc_queue.put(obj["metadata"]["uid"])
            self.store.types.pop(t.key, None)
