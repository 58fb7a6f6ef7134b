"""Protobuf request bodies.

kubectl 1.32's typed clients (`kubectl create secret|configmap|namespace|
service ...`) send request bodies as application/vnd.kubernetes.protobuf
and do not retry as JSON. This decodes the few types those generators
create; anything else is refused with 415 by the API server emulator.
"""
import base64
import datetime


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
