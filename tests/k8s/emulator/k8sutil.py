"""Pieces shared by the Kubernetes emulator (apiserver.py, kubelet.py,
cluster.py): timestamps, label and field selectors, the three patch formats,
and a small HTTPS client for the emulated API server.

Python standard library only.
"""
import base64
import copy
import datetime
import json
import os
import re
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request


# --------------------------------------------------------------------------
# Time


def now_iso():
    """RFC 3339 UTC timestamp with second precision, like metav1.Time."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro():
    """RFC 3339 timestamp with microseconds, like metav1.MicroTime."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text):
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return "%ds" % s
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return "%dm" % minutes if sec == 0 else "%dm%ds" % (minutes, sec)
    if minutes < 180:
        return "%dm" % minutes
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return "%dh" % hours if m == 0 else "%dh%dm" % (hours, m)
    if hours < 48:
        return "%dh" % hours
    if hours < 24 * 8:
        h = hours % 24
        return "%dd" % (hours // 24) if h == 0 else "%dd%dh" % (hours // 24, h)
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return "%dy" % (hours // 24 // 365) if dy == 0 else "%dy%dd" % (hours // 24 // 365, dy)
    return "%dy" % (hours // 24 // 365)


def age(timestamp):
    t = parse_time(timestamp)
    if t is None:
        return "<unknown>"
    return human_duration(time.time() - t)


# --------------------------------------------------------------------------
# Selectors


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


# --------------------------------------------------------------------------
# Patches


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


# --------------------------------------------------------------------------
# Certificates and kubeconfig


def make_certificates(directory, hosts=("127.0.0.1", "localhost")):
    """Creates ca.crt/ca.key and a server certificate server.crt/server.key
    for `hosts` with the openssl CLI. Returns a dict of the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {n: os.path.join(directory, n) for n in ("ca.crt", "ca.key", "server.crt", "server.key")}

    def run(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", paths["ca.key"], "-out", paths["ca.crt"], "-days", "30",
        "-subj", "/CN=kubeps-emulator-ca")
    sans = ",".join(("IP:" if re.match(r"^[\d.]+$|:", h) else "DNS:") + h for h in hosts)
    ext = os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" % sans)
    csr = os.path.join(directory, "server.csr")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", paths["server.key"], "-out", csr, "-subj", "/CN=kube-apiserver")
    run("x509", "-req", "-in", csr, "-CA", paths["ca.crt"], "-CAkey", paths["ca.key"],
        "-CAcreateserial", "-out", paths["server.crt"], "-days", "30", "-extfile", ext)
    return paths


def write_kubeconfig(path, server, ca_file, token, user="admin", namespace="default",
                     context="kubeps-emulator"):
    """A kubeconfig (JSON is valid YAML) for one user with a bearer token."""
    with open(ca_file, "rb") as f:
        ca_data = base64.b64encode(f.read()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {
            "server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {
            "cluster": context, "user": user, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, path)
    return path


def read_kubeconfig(path):
    """Reads a kubeconfig written by write_kubeconfig (JSON). Returns
    (server, ca_pem_bytes, token)."""
    with open(path) as f:
        config = json.load(f)
    ctx_name = config["current-context"]
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), user.get("token")


# --------------------------------------------------------------------------
# A small client


class ApiError(Exception):
    def __init__(self, code, body):
        self.code = code
        self.body = body
        try:
            self.status = json.loads(body)
        except (ValueError, TypeError):
            self.status = {}
        super().__init__("HTTP %d: %s" % (code, self.status.get("message", body)))

    @property
    def reason(self):
        return self.status.get("reason")


class Client:
    """A minimal REST client for the API server (what a controller uses)."""

    def __init__(self, server, ca_pem, token, timeout=30):
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.ctx = ssl.create_default_context()
        fd, ca_path = tempfile.mkstemp(prefix="k8s-ca-", suffix=".crt")
        with os.fdopen(fd, "wb") as f:
            f.write(ca_pem)
        self.ctx.load_verify_locations(ca_path)
        os.unlink(ca_path)

    @classmethod
    def from_kubeconfig(cls, path, token=None):
        server, ca, tok = read_kubeconfig(path)
        return cls(server, ca, token or tok)

    def open(self, method, path, body=None, content_type="application/json", headers=None,
             timeout=None):
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            return urllib.request.urlopen(req, context=self.ctx,
                                          timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None

    def request(self, method, path, body=None, content_type="application/json", headers=None):
        with self.open(method, path, body, content_type, headers) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body):
        return self.request("POST", path, body)

    def put(self, path, body):
        return self.request("PUT", path, body)

    def patch(self, path, body, kind="merge"):
        ctype = {"merge": "application/merge-patch+json",
                 "strategic": "application/strategic-merge-patch+json",
                 "json": "application/json-patch+json",
                 "apply": "application/apply-patch+yaml"}[kind]
        return self.request("PATCH", path, body, ctype)

    def delete(self, path, body=None):
        return self.request("DELETE", path, body)

    def watch(self, path, timeout=None):
        """Yields watch events (dicts) from a ?watch=1 URL until the stream
        ends. `timeout` is the socket read timeout."""
        resp = self.open("GET", path, timeout=timeout or 3600)
        try:
            while True:
                line = resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp.close()


# --------------------------------------------------------------------------
# Protobuf bodies
#
# kubectl 1.32's typed clients (`kubectl create secret|configmap|namespace|
# service ...`) send request bodies as application/vnd.kubernetes.protobuf
# and do not retry as JSON. This decodes the few types those generators
# create; anything else is refused with 415 by the API server emulator.


class ProtobufError(ValueError):
    pass


def _varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            v = bytes(buf[i:i + n])
            i += n
        elif wt == 1:
            v, i = bytes(buf[i:i + 8]), i + 8
        elif wt == 5:
            v, i = bytes(buf[i:i + 4]), i + 4
        else:
            raise ProtobufError("unsupported wire type %d" % wt)
        yield fn, v


def _int64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


_OWNER_REF = {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"),
              5: ("apiVersion", "str"), 6: ("controller", "bool"),
              7: ("blockOwnerDeletion", "bool")}
_OBJECT_META = {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"),
                4: ("selfLink", "str"), 5: ("uid", "str"), 6: ("resourceVersion", "str"),
                7: ("generation", "int"), 8: ("creationTimestamp", "time"),
                11: ("labels", "map_str"), 12: ("annotations", "map_str"),
                13: ("ownerReferences", "rep_msg", _OWNER_REF), 14: ("finalizers", "rep_str")}
_INT_OR_STRING = {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "str")}
_SERVICE_PORT = {1: ("name", "str"), 2: ("protocol", "str"), 3: ("port", "int"),
                 4: ("targetPort", "intorstr", _INT_OR_STRING), 5: ("nodePort", "int"),
                 6: ("appProtocol", "str")}
_PROTO_TYPES = {
    ("v1", "Secret"): {1: ("metadata", "msg", _OBJECT_META), 2: ("data", "map_bytes"),
                       3: ("type", "str"), 4: ("stringData", "map_str"),
                       5: ("immutable", "bool")},
    ("v1", "ConfigMap"): {1: ("metadata", "msg", _OBJECT_META), 2: ("data", "map_str"),
                          3: ("binaryData", "map_bytes"), 4: ("immutable", "bool")},
    ("v1", "Namespace"): {1: ("metadata", "msg", _OBJECT_META),
                          2: ("spec", "msg", {1: ("finalizers", "rep_str")}),
                          3: ("status", "skip")},
    ("v1", "Service"): {1: ("metadata", "msg", _OBJECT_META), 2: ("spec", "msg", {
        1: ("ports", "rep_msg", _SERVICE_PORT), 2: ("selector", "map_str"),
        3: ("clusterIP", "str"), 4: ("type", "str"), 5: ("externalIPs", "rep_str"),
        7: ("sessionAffinity", "str"), 8: ("loadBalancerIP", "str"),
        10: ("externalName", "str"), 11: ("externalTrafficPolicy", "str"),
        12: ("healthCheckNodePort", "int"), 13: ("publishNotReadyAddresses", "bool"),
        18: ("clusterIPs", "rep_str"), 19: ("ipFamilies", "rep_str"),
        17: ("ipFamilyPolicy", "str"), 20: ("allocateLoadBalancerNodePorts", "bool"),
        21: ("loadBalancerClass", "str"), 22: ("internalTrafficPolicy", "str")}),
        3: ("status", "skip")},
}


def _decode(buf, schema, what):
    out = {}
    for fn, v in _fields(buf):
        if fn not in schema:
            if v in (0, b""):
                continue  # an empty field the generated marshaller always writes
            raise ProtobufError("field %d of %s is not understood by the emulator" % (fn, what))
        name, kind = schema[fn][:2]
        if v in (0, b"") and kind in ("str", "int", "bool"):
            continue  # zero values: what JSON would omit
        if kind == "skip":
            continue
        if kind == "str":
            out[name] = v.decode()
        elif kind == "int":
            out[name] = _int64(v)
        elif kind == "bool":
            out[name] = bool(v)
        elif kind == "msg":
            out[name] = _decode(v, schema[fn][2], name)
        elif kind == "intorstr":
            d = _decode(v, schema[fn][2], name)
            out[name] = d.get("strVal", "") if d.get("type") == 1 else d.get("intVal", 0)
        elif kind == "rep_msg":
            out.setdefault(name, []).append(_decode(v, schema[fn][2], name))
        elif kind == "rep_str":
            out.setdefault(name, []).append(v.decode())
        elif kind in ("map_str", "map_bytes"):
            entry = dict(_fields(v))
            key = entry.get(1, b"").decode()
            val = entry.get(2, b"")
            out.setdefault(name, {})[key] = base64.b64encode(val).decode() \
                if kind == "map_bytes" else val.decode()
        elif kind == "time":
            t = dict(_fields(v))
            if _int64(t.get(1, 0)) <= 0:
                continue
            out[name] = datetime.datetime.fromtimestamp(
                _int64(t.get(1, 0)), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def decode_protobuf_object(body):
    """A Kubernetes protobuf envelope ('k8s\\0' + runtime.Unknown) to a JSON
    object, for the types in _PROTO_TYPES. Raises ProtobufError."""
    if not body.startswith(b"k8s\x00"):
        raise ProtobufError("missing the k8s protobuf envelope")
    unknown = dict(_fields(body[4:]))
    type_meta = dict(_fields(unknown.get(1, b"")))
    api_version = type_meta.get(1, b"").decode()
    kind = type_meta.get(2, b"").decode()
    schema = _PROTO_TYPES.get((api_version, kind))
    if schema is None:
        raise ProtobufError("protobuf bodies of %s %s are not supported by the emulator (use "
                            "kubectl apply -f / create -f, which send JSON)" % (api_version, kind))
    obj = _decode(unknown.get(2, b""), schema, kind)
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj


def exit_with_parent(on_exit):
    """Calls on_exit() once the process that started us is gone (we were
    re-parented), so a killed test run leaves no emulator behind."""
    import threading
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        on_exit()
    threading.Thread(target=watch, daemon=True).start()
