"""OpenAPI v3 structural schemas of CustomResourceDefinitions, as the API
server applies them to custom resources: pruning, defaulting, validation
with the real server's field-level messages, and simple JSONPath for
printer columns."""
import copy
import json
import re


# --------------------------------------------------------------------------
# OpenAPI v3 structural schemas: pruning, defaulting, validation


def go_value(v):
    """A value as Go's %v prints it in field errors."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e21:
            return str(int(v))
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "null"
    return json.dumps(v, separators=(",", ":"))


_LATE_FLAGS = re.compile(r"^(\^?)\(\?([imsU]+)\)")


def go_pattern(pattern):
    """A CRD's pattern (Go's RE2 syntax) as Python's re reads it. RE2 takes
    flags after an anchor ("^(?i)[a-z]", as in Kueue's Workload); Python
    wants global flags first: moved ahead of the anchor, they mean the same."""
    m = _LATE_FLAGS.match(pattern)
    if m and m.group(1):
        return "(?%s)^%s" % (m.group(2).replace("U", ""), pattern[m.end():])
    return pattern


def _type_name(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _join(path, key):
    return key if not path else path + "." + key


def prune_and_default(value, schema, path, unknown, root=False):
    """Returns `value` with unknown fields removed (their paths appended to
    `unknown`) and defaults applied, as the API server does for custom
    resources before validation."""
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
        if props is None and addl is None and preserve:
            return value
        if props is None and addl is None and schema.get("type") not in (None, "object"):
            return value
        out = {}
        for k, x in value.items():
            if root and k in ("apiVersion", "kind", "metadata"):
                out[k] = x
                continue
            if props is not None and k in props:
                ps = props[k]
                if x is None and not ps.get("nullable"):
                    continue  # null of a non-nullable field: pruned, then defaulted
                out[k] = prune_and_default(x, ps, _join(path, k), unknown)
            elif isinstance(addl, dict):
                out[k] = prune_and_default(x, addl, _join(path, k), unknown)
            elif addl is True or preserve:
                out[k] = x
            else:
                unknown.append(_join(path, k))
        for k, ps in (props or {}).items():
            if k not in out and "default" in ps:
                out[k] = prune_and_default(copy.deepcopy(ps["default"]), ps, _join(path, k), [])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(x, schema["items"], "%s[%d]" % (path, i), unknown)
                for i, x in enumerate(value)]
    return value


def _type_ok(value, typ):
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


def validate_schema(value, schema, path, errors):
    """Appends (field, reason, message) for each violation of `schema`."""
    if schema is None:
        return
    if value is None:
        if schema.get("nullable"):
            return
        typ = schema.get("type")
        if typ:
            errors.append((path, "FieldValueTypeInvalid",
                           'Invalid value: "null": %s in body must be of type %s: "null"'
                           % (path, typ)))
        return
    typ = schema.get("type")
    if typ and not _type_ok(value, typ):
        if not (schema.get("x-kubernetes-int-or-string") and isinstance(value, (int, str))):
            errors.append((path, "FieldValueTypeInvalid",
                           'Invalid value: "%s": %s in body must be of type %s: "%s"'
                           % (_type_name(value), path, typ, _type_name(value))))
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append((path, "FieldValueNotSupported", "Unsupported value: %s: supported values: %s"
                       % (go_value(value), ", ".join(go_value(e) for e in schema["enum"]))))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            mn = schema["minimum"]
            excl = schema.get("exclusiveMinimum") is True
            if (excl and not value > mn) or (not excl and value < mn):
                errors.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be "
                               "greater than %s%s" % (go_value(value), path,
                                                      "" if excl else "or equal to ", go_value(mn))))
        if "maximum" in schema:
            mx = schema["maximum"]
            excl = schema.get("exclusiveMaximum") is True
            if (excl and not value < mx) or (not excl and value > mx):
                errors.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be "
                               "less than %s%s" % (go_value(value), path,
                                                   "" if excl else "or equal to ", go_value(mx))))
        if "multipleOf" in schema and schema["multipleOf"]:
            if (value / schema["multipleOf"]) % 1:
                errors.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be "
                               "a multiple of %s" % (go_value(value), path,
                                                     go_value(schema["multipleOf"]))))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should be at "
                           "least %d chars long" % (go_value(value), path, schema["minLength"])))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append((path, "FieldValueTooLong", "Too long: may not be more than %d bytes"
                           % schema["maxLength"]))
        if "pattern" in schema and not re.search(go_pattern(schema["pattern"]), value):
            errors.append((path, "FieldValueInvalid", "Invalid value: %s: %s in body should match "
                           "'%s'" % (go_value(value), path, schema["pattern"])))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append((path, "FieldValueInvalid", "Invalid value: %d: %s in body should have at "
                           "least %d items" % (len(value), path, schema["minItems"])))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append((path, "FieldValueTooMany", "Too many: %d: must have at most %d items"
                           % (len(value), schema["maxItems"])))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, x in enumerate(value):
                validate_schema(x, items, "%s[%d]" % (path, i), errors)
    if isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                errors.append((_join(path, req), "FieldValueRequired", "Required value"))
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for k, x in value.items():
            if k in props:
                validate_schema(x, props[k], _join(path, k), errors)
            elif isinstance(addl, dict):
                validate_schema(x, addl, _join(path, k), errors)
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errors.append((path, "FieldValueInvalid", "Invalid value: %d: %s in body should have at "
                           "least %d properties" % (len(value), path, schema["minProperties"])))


def check_structural(schema, path, errors):
    """The structural-schema rules a CRD must follow (a subset)."""
    if not isinstance(schema, dict):
        return
    props = schema.get("properties")
    if props is not None and "additionalProperties" in schema:
        addl = schema["additionalProperties"]
        if addl is not True:
            errors.append((path + ".additionalProperties", "FieldValueForbidden",
                           "Forbidden: additionalProperties and properties are mutual exclusive"))
    if not schema.get("type") and not schema.get("x-kubernetes-int-or-string") and \
            not schema.get("x-kubernetes-preserve-unknown-fields"):
        errors.append((path + ".type", "FieldValueRequired",
                       "Required value: must not be empty for specified object fields"))
    for k, ps in (props or {}).items():
        check_structural(ps, "%s.properties[%s]" % (path, k), errors)
    if isinstance(schema.get("items"), dict):
        check_structural(schema["items"], path + ".items", errors)
    if isinstance(schema.get("additionalProperties"), dict):
        check_structural(schema["additionalProperties"], path + ".additionalProperties", errors)
    if "default" in schema:
        errs = []
        validate_schema(schema["default"], {k: v for k, v in schema.items() if k != "default"},
                        "", errs)
        for field, reason, msg in errs:
            errors.append((path + ".default" + ("." + field if field else ""), reason, msg))


def simple_jsonpath(obj, expr):
    """Evaluates `.a.b[0].c` and `.a[?(@.k=='v')].c` (the printer-column
    subset: Kueue's Admitted column reads its condition by type). None when
    absent; a filter keeps the first match, as kubectl prints one cell."""
    cur = obj
    # Spaces around "==" are allowed, as Kubernetes' JSONPath allows them
    # (cert-manager's Ready column is `[?(@.type == "Ready")]`).
    parts = re.findall(r"\.([^.\[\]]+)|\[(\d+)\]|\[\?\(@\.([^=!\s]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]",
                       expr.strip().lstrip("{").rstrip("}"))
    for name, index, key, value in parts:
        if name:
            if not isinstance(cur, dict) or name not in cur:
                return None
            cur = cur[name]
        elif key:
            if not isinstance(cur, list):
                return None
            cur = next((x for x in cur if isinstance(x, dict) and str(x.get(key)) == value), None)
            if cur is None:
                return None
        else:
            i = int(index)
            if not isinstance(cur, list) or i >= len(cur):
                return None
            cur = cur[i]
    return cur
