"""A CustomResourceDefinition's CEL rules (x-kubernetes-validations), as the
API server (1.30 to 1.32) runs them on every write of a custom resource
(apiextensions-apiserver's schema/cel/validation.go):

- a rule applies to the value at its place in the schema, `self`; a
  transition rule (one that names `oldSelf`) only where the write replaces
  an old value it is paired with: an object's fields by name, a map-type
  list's items by their keys; never on a create;
- a rule that does not hold fails the write with its messageExpression's
  message, or its message, or "failed rule: <rule>", at its path (and
  fieldPath), as the reason it names; the value shown is the schema's type
  name ("object", "integer"); a rule that cannot be evaluated fails it with
  "<error> evaluating rule: <message or rule>";
- ratcheting (on by default since 1.30): a rule other than a transition
  rule that fails on a value the write left as it was (paired as above, a
  plain list's items by index, a set's or an atomic list's with the whole
  list) is a warning, not an error;
- where the schema's own checks found a value of the wrong type, a missing
  required field or one past its bounds of length or items, no rule runs,
  and a cause says so;
- when the CRD is written, each rule is compiled: one that does not parse,
  names a field its schema lacks, has a fieldPath that leads nowhere, an
  unknown reason, a message on several lines, or names oldSelf where nothing
  is paired is refused there.

The real server runs cel-go; here Buf's CEL for ECMAScript runs in a Node.js
process (tests/k8s/cel/evaluate.mjs), installed by scripts/install-deps.sh.
It has no type checker to call: the fields a rule names are looked up in the
schema here. Kubernetes' own CEL libraries (quantity(), isSorted(), url()
...) are not there: a rule using one fails the write with a message that
says so, never passes unchecked.
"""
import json
import os
import re
import subprocess
import threading

from .crd_schema import go_value

_EVALUATOR = os.path.join(os.path.dirname(__file__), "..", "..", "cel", "evaluate.mjs")
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_OLD_SELF = re.compile(r"\boldSelf\b")
_CHAIN = re.compile(r"\b(self|oldSelf)((?:\.[A-Za-z_]\w*)+)")
_REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired",
            "FieldValueDuplicate")
# Errors whose kind makes the server skip the rules (strategy.go, hasBlockingErr).
_BLOCKING = ("FieldValueNotSupported", "FieldValueRequired", "FieldValueTooLong",
             "FieldValueTooMany", "FieldValueTypeInvalid")
# Buf's words for what cel-go says otherwise, in the messages users read.
_CEL_GO_WORDS = ((re.compile(r"^field not found: "), "no such key: "),
                 (re.compile(r"^int divide by zero"), "division by zero"))


class CelUnavailable(Exception):
    """Node.js or the CEL package is missing: the stand-in cannot enforce
    the rules, and says so instead of letting every write through."""


def uses_old_self(rule):
    return bool(_OLD_SELF.search(_STRING_LITERAL.sub("''", rule)))


class CelEvaluator:
    """The Node.js process that parses and runs CEL, asked one line at a
    time (the API server calls it under its store's lock)."""

    def __init__(self):
        self._process = None
        self._lock = threading.Lock()
        self._typings = {}  # id(schema): (schema, its typing); the schema kept, so is its id

    def _typing_of(self, schema):
        with self._lock:
            kept = self._typings.get(id(schema))
            if kept is None or kept[0] is not schema:
                kept = self._typings[id(schema)] = (schema, _typing(schema))
            return kept[1]

    def _ask(self, request):
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise CelUnavailable("the CEL evaluator (%s) stopped" % _EVALUATOR)
        return json.loads(line)

    @staticmethod
    def _start():
        package = os.path.join(os.path.dirname(_EVALUATOR), "node_modules", "@bufbuild", "cel")
        if not os.path.isdir(package):
            raise CelUnavailable("CRD validation rules need @bufbuild/cel: run "
                                 "`npm ci --prefix tests/k8s/cel` (scripts/install-deps.sh does)")
        try:
            return subprocess.Popen(["node", _EVALUATOR], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True, bufsize=1)
        except FileNotFoundError:
            raise CelUnavailable("CRD validation rules need Node.js (node) on PATH")

    def compile_error(self, expression):
        return self._ask({"op": "compile", "expression": expression}).get("error")

    def evaluate(self, expressions, schema, value, old=None, has_old=False):
        """(result, error) of each expression on one value, in one request."""
        request = {"op": "eval", "expressions": expressions, "schema": self._typing_of(schema),
                   "self": value}
        if has_old:
            request["oldSelf"] = old
        out = []
        for expression, answer in zip(expressions, self._ask(request)["results"]):
            if "error" not in answer:
                out.append((answer["value"], None))
                continue
            error = answer["error"]
            if error.startswith("unbound function"):
                raise CelUnavailable("%s: a Kubernetes CEL library function the stand-in does not "
                                     "have (rule: %s)" % (error, expression))
            for buf, cel_go in _CEL_GO_WORDS:
                error = buf.sub(cel_go, error)
            out.append((None, error))
        return out


def _typing(schema):
    """What the evaluator needs of a schema to type values: types, nested."""
    if not isinstance(schema, dict):
        return None
    out = {k: schema[k] for k in ("type", "x-kubernetes-int-or-string") if k in schema}
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: _typing(v) for k, v in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _typing(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        out["additionalProperties"] = _typing(schema["additionalProperties"])
    return out


# --------------------------------------------------------------------------
# When the CRD is written


def _go_rule(rule):
    """A rule as Go's %#v prints an apiextensions.ValidationRule."""
    reason = rule.get("reason")
    return ("apiextensions.ValidationRule{Rule:%s, Message:%s, MessageExpression:%s, "
            "Reason:%s, FieldPath:%s, OptionalOldSelf:(*bool)(nil)}" % (
                json.dumps(rule.get("rule", "")), json.dumps(rule.get("message", "")),
                json.dumps(rule.get("messageExpression", "")),
                "(*apiextensions.FieldValueErrorReason)(nil)" if reason is None else
                json.dumps(reason), json.dumps(rule.get("fieldPath", ""))))


def _field_of(schema, name):
    """The schema of `name` under `schema`; None where it has no such field,
    "any" where anything goes (a map, preserved unknown fields)."""
    if not isinstance(schema, dict):
        return "any"
    if name in (schema.get("properties") or {}):
        return schema["properties"][name]
    if isinstance(schema.get("additionalProperties"), dict):
        return schema["additionalProperties"]
    if schema.get("x-kubernetes-preserve-unknown-fields") or \
            schema.get("additionalProperties") is True:
        return "any"
    return None


def _undefined_field(schema, expression):
    """cel-go's type check of the fields a rule selects from self and
    oldSelf: the first one the schema lacks, as "<column>: '<name>'"."""
    text = _STRING_LITERAL.sub(lambda m: " " * len(m.group(0)), expression)
    for m in _CHAIN.finditer(text):
        at, node = m.start(2), schema
        for name in m.group(2)[1:].split("."):
            if text[at + 1 + len(name):].lstrip().startswith("("):
                break  # a method call, not a field
            node = _field_of(node, name)
            if node is None:
                return "%d: undefined field '%s'" % (at + 1, name)
            if node == "any":
                break
            at += 1 + len(name)
    return None


def normalized_field_path(schema, path):
    """ValidFieldPath: `.a.b` or `['a'].b` as field names; None where it
    leads nowhere in the schema."""
    names = re.findall(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]", path)
    if not path or "".join(".%s" % a if a else "['%s']" % b for a, b in names) != path:
        return None
    node, out = schema, []
    for dotted, quoted in names:
        name = dotted or quoted
        node = _field_of(node, name)
        if node is None or node == "any":
            return None
        out.append(name)
    return out


def compile_errors(evaluator, schema, path, errors, in_unpaired_list=False):
    """The checks of the CRD's own write: every rule of `schema` compiles."""
    if not isinstance(schema, dict):
        return
    for i, rule in enumerate(schema.get("x-kubernetes-validations") or []):
        where = "%s.x-kubernetes-validations[%d]" % (path, i)
        text = rule.get("rule") or ""
        problem = None
        if not text.strip():
            errors.append((where + ".rule", "FieldValueRequired", "Required value"))
            continue
        if "\n" in (rule.get("message") or "") or \
                ("message" in rule and not rule["message"].strip()):
            errors.append((where + ".message", "FieldValueInvalid",
                           "Invalid value: %s: message must be non-empty and may not contain "
                           "line breaks" % go_value(rule["message"])))
        if rule.get("reason") is not None and rule["reason"] not in _REASONS:
            errors.append((where + ".reason", "FieldValueNotSupported",
                           "Unsupported value: %s: supported values: %s" % (
                               go_value(rule["reason"]), ", ".join(go_value(r) for r in
                                                                   _REASONS))))
        if rule.get("fieldPath") and normalized_field_path(schema, rule["fieldPath"]) is None:
            errors.append((where + ".fieldPath", "FieldValueInvalid",
                           "Invalid value: %s: fieldPath must be a valid path: does not refer "
                           "to a valid field" % go_value(rule["fieldPath"])))
        error = evaluator.compile_error(text)
        if error is None:
            undefined = _undefined_field(schema, text)
            if undefined:
                error = "<input>:1:" + undefined
        if error is not None:
            problem = "compilation failed: ERROR: " + error
        elif in_unpaired_list and uses_old_self(text):
            problem = ("oldSelf cannot be used on the uncorrelatable portion of the schema "
                       "within %s" % path)
        if problem:
            errors.append((where, "FieldValueInvalid",
                           "Invalid value: %s: %s" % (_go_rule(rule), problem)))
        message_error = rule.get("messageExpression") and \
            evaluator.compile_error(rule["messageExpression"])
        if message_error:
            errors.append((where, "FieldValueInvalid", "Invalid value: %s: messageExpression "
                           "compilation failed: ERROR: %s" % (_go_rule(rule), message_error)))
    for key, sub in (schema.get("properties") or {}).items():
        compile_errors(evaluator, sub, "%s.properties[%s]" % (path, key), errors,
                       in_unpaired_list)
    compile_errors(evaluator, schema.get("additionalProperties"), path + ".additionalProperties",
                   errors, in_unpaired_list)
    compile_errors(evaluator, schema.get("items"), path + ".items", errors,
                   in_unpaired_list or schema.get("x-kubernetes-list-type") != "map")


# --------------------------------------------------------------------------
# On every write of a custom resource


def _join(path, key):
    return key if not path else path + "." + key


def same(a, b):
    """reflect.DeepEqual of two JSON values: 1 is not 1.0, nor true."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def _failure(path, schema, detail, reason):
    shown = go_value(schema.get("type") or "")
    if reason == "FieldValueForbidden":
        return (path, reason, "Forbidden: " + detail)
    if reason == "FieldValueRequired":
        return (path, reason, "Required value: " + detail)
    if reason == "FieldValueDuplicate":
        return (path, reason, "Duplicate value: " + shown)
    return (path, "FieldValueInvalid", "Invalid value: %s: %s" % (shown, detail))


def _message(evaluator, rule, schema, value, old, has_old):
    if rule.get("messageExpression"):
        [(message, _)] = evaluator.evaluate([rule["messageExpression"]], schema, value, old,
                                            has_old)
        if isinstance(message, str) and message.strip() and "\n" not in message.strip() \
                and len(message.strip()) <= 5 * 1024:
            return message.strip()
    return (rule.get("message") or "").strip() or "failed rule: " + rule["rule"].strip()


def _check_rules(evaluator, node, schema, path, errors, warnings):
    value, old, paired, unchanged = node
    field = path or "<nil>"
    rules = [rule for rule in schema.get("x-kubernetes-validations") or []
             if rule.get("rule") and (paired or not uses_old_self(rule["rule"]))]
    if not rules:
        return
    results = evaluator.evaluate([rule["rule"] for rule in rules], schema, value, old, paired)
    for rule, (result, error) in zip(rules, results):
        expression = rule["rule"]
        transition = uses_old_self(expression)
        if error is not None:
            named = (rule.get("message") or "").strip() or expression.strip()
            errors.append((field, "FieldValueInvalid", "Invalid value: %s: %s evaluating rule: %s"
                           % (go_value(schema.get("type") or ""), error, named)))
            continue
        if result is True:
            continue
        at = path
        if rule.get("fieldPath"):
            for name in normalized_field_path(schema, rule["fieldPath"]) or []:
                at = _join(at, name)
        failure = _failure(at or "<nil>", schema,
                           _message(evaluator, rule, schema, value, old, paired),
                           rule.get("reason"))
        if not transition and unchanged():
            warnings.append("%s: %s" % failure[::2])  # ratcheted: this write did not break it
        else:
            errors.append(failure)


def _list_key(schema, item):
    keys = schema.get("x-kubernetes-list-map-keys") or []
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys) \
        if isinstance(item, dict) else None


def _children(value, node, schema, path):
    """(child node, its schema, its path) of a value's fields or items, each
    with the old value the server pairs it with: for oldSelf where every
    step down pairs them, for ratcheting also a plain list's by index."""
    _, old, paired, unchanged = node
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        more = schema.get("additionalProperties")
        olds = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = props.get(key) if key in props else more if isinstance(more, dict) else None
            if sub is not None:
                was = olds.get(key)
                yield ((item, was, paired and key in olds,
                        lambda item=item, was=was, key=key: key in olds and same(item, was)),
                       sub, _join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        kind = schema.get("x-kubernetes-list-type")
        olds = old if isinstance(old, list) else []
        by_key = {_list_key(schema, o): o for o in olds} if kind == "map" else {}
        for i, item in enumerate(value):
            if kind == "map":
                key = _list_key(schema, item)
                was, found = by_key.get(key), key in by_key
                child = (item, was, paired and found,
                         lambda item=item, was=was, found=found: found and same(item, was))
            elif kind in ("set", "atomic"):
                child = (item, None, False, unchanged)  # unchanged with the whole list
            else:  # a plain list: by index, for ratcheting only
                was, found = (olds[i], True) if i < len(olds) else (None, False)
                child = (item, was, False,
                         lambda item=item, was=was, found=found: found and same(item, was))
            yield child, schema["items"], "%s[%d]" % (path, i)


def rule_errors(evaluator, node, schema, path, errors, warnings):
    """Appends (field, reason, message) for each rule in `schema` that a
    node's value fails. A node: (value, the old value paired with it or
    None, whether oldSelf may read that, and a function that says whether
    the write left the value as it was, called only where a rule fails)."""
    if not isinstance(schema, dict) or node[0] is None:
        return
    _check_rules(evaluator, node, schema, path, errors, warnings)
    for child, sub, where in _children(node[0], node, schema, path):
        rule_errors(evaluator, child, sub, where, errors, warnings)


def object_rule_errors(evaluator, schema, obj, old, schema_errors, warnings):
    """The rules of a whole custom resource (`old`: the object it replaces,
    or None), after the schema's own checks; appended to `schema_errors`."""
    if any(reason in _BLOCKING for _, reason, _ in schema_errors):
        schema_errors.append(("<nil>", "FieldValueInvalid", 'Invalid value: "null": some '
                              "validation rules were not checked because the object was invalid; "
                              "correct the existing errors to complete validation"))
        return
    node = (obj, old, old is not None, lambda: old is not None and same(obj, old))
    rule_errors(evaluator, node, schema, "", schema_errors, warnings)
