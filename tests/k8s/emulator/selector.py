"""Label and field selectors: parsing the query strings of list, watch and
deletecollection (labelSelector, fieldSelector) and matching objects against
them, as k8s.io/apimachinery/pkg/labels and pkg/fields do.
"""
import re


class SelectorError(ValueError):
    pass


_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _split_top(text, sep=","):
    """Splits on `sep` outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_label_selector(text):
    """Parses a label selector string into [(key, op, [values])]; op is one of
    '=', '!=', 'in', 'notin', 'exists', '!', 'gt', 'lt'. Raises SelectorError."""
    reqs = []
    if text is None or not text.strip():
        return reqs
    for raw in _split_top(text):
        term = raw.strip()
        if not term:
            raise SelectorError("found '', expected: identifier")
        m = re.match(r"^([^\s!=<>(),]+)\s+(in|notin)\s*\((.*)\)$", term)
        if m:
            values = [v.strip() for v in m.group(3).split(",")]
            reqs.append((m.group(1), m.group(2), [v for v in values if v != ""] or [""]))
            continue
        m = re.match(r"^!\s*([^\s!=<>(),]+)$", term)
        if m:
            reqs.append((m.group(1), "!", []))
            continue
        m = re.match(r"^([^\s!=<>(),]+)\s*(==|=|!=|<|>)\s*([^\s!=<>(),]*)$", term)
        if m:
            op = {"==": "=", "=": "=", "!=": "!=", "<": "lt", ">": "gt"}[m.group(2)]
            reqs.append((m.group(1), op, [m.group(3)]))
            continue
        m = re.match(r"^([^\s!=<>(),]+)$", term)
        if m:
            reqs.append((m.group(1), "exists", []))
            continue
        raise SelectorError("unable to parse requirement: %r" % term)
    for key, _, _ in reqs:
        if not _LABEL_KEY.match(key):
            raise SelectorError("invalid label key %r" % key)
    return reqs


def labels_match(reqs, labels):
    labels = labels or {}
    for key, op, values in reqs:
        has = key in labels
        val = labels.get(key)
        if op == "=" and not (has and val == values[0]):
            return False
        if op == "!=" and has and val == values[0]:
            return False
        if op == "in" and not (has and val in values):
            return False
        if op == "notin" and has and val in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
        if op in ("gt", "lt"):
            try:
                a, b = int(val), int(values[0])
            except (TypeError, ValueError):
                return False
            if (op == "gt" and not a > b) or (op == "lt" and not a < b):
                return False
    return True


def selector_from_match_labels(match_labels):
    return [(k, "=", [v]) for k, v in sorted((match_labels or {}).items())]


def parse_field_selector(text):
    """Parses 'a.b=c,d!=e' (values may escape ',', '=' and '\\' with '\\')
    into [(path, op, value)]."""
    reqs = []
    if text is None or not text.strip():
        return reqs
    terms, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    terms.append("".join(cur))
    for term in terms:
        m = re.match(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$", term)
        if not m:
            raise SelectorError("invalid selector: '%s'; can't understand '%s'" % (text, term))
        value = re.sub(r"\\(.)", r"\1", m.group(3))
        reqs.append((m.group(1).strip(), "!=" if m.group(2) == "!=" else "=", value))
    return reqs


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs, obj):
    for path, op, value in reqs:
        actual = field_value(obj, path)
        if op == "=" and actual != value:
            return False
        if op == "!=" and actual == value:
            return False
    return True


def label_selector_reqs(label_selector):
    """The requirements of a metav1.LabelSelector object (matchLabels and
    matchExpressions with In, NotIn, Exists, DoesNotExist), for labels_match;
    an empty or missing selector has none and matches everything."""
    reqs = selector_from_match_labels((label_selector or {}).get("matchLabels"))
    for e in (label_selector or {}).get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists",
              "DoesNotExist": "!"}[e["operator"]]
        reqs.append((e["key"], op, list(e.get("values") or [])))
    return reqs
