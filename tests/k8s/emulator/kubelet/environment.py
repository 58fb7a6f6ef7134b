"""What a container runs with: its environment (env with $(VAR) expansion,
the downward API through fieldRef and resourceFieldRef, Secret and
ConfigMap keys, envFrom, the service variables of the API server) and its
program (command, args, or the image's entrypoint, looked up in the
--bin-dir folders, on this machine or on PATH).

A mixin of PodWorker (pod_worker.py).
"""
import base64
import math
import os
import re
import shutil
import urllib.parse

from ..client import ApiError
from .containers import ConfigError, expand


QUANTITY_SUFFIXES = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
                     "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40,
                     "Pi": 2 ** 50, "Ei": 2 ** 60}


def quantity(text):
    """A resource quantity ("500m", "2", "1.5", "4Gi") in its base unit."""
    m = re.match(r"^([0-9]*\.?[0-9]+)([a-zA-Z]*)$", str(text).strip())
    if not m or m.group(2) not in QUANTITY_SUFFIXES:
        raise ConfigError("resourceFieldRef: %r is not a quantity" % (text,))
    return float(m.group(1)) * QUANTITY_SUFFIXES[m.group(2)]


def resource_field(ref, spec):
    """A container's resourceFieldRef as the kubelet resolves it: the request or
    limit over the divisor (default 1), rounded up. The API server made a
    request of each limit set alone; a missing limit is the node's capacity, a
    missing request (neither set) 0."""
    kind, _, name = ref.get("resource", "").partition(".")
    value = ((spec.get("resources") or {}).get(kind) or {}).get(name)
    if value is None:
        capacity = {"cpu": os.cpu_count(),
                    "memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}
        value = capacity.get(name, 0) if kind == "limits" else 0
    # Less a hair: float division may land just above a whole number (1.5Mi / 1Ki).
    return str(math.ceil(quantity(value) / quantity(ref.get("divisor", "1")) - 1e-9))


class ContainerEnvironment:
    def field_ref(self, path, pod=None):
        """The value of a fieldRef of the pod (of `pod`, a version of it)."""
        pod = pod or self.pod
        md = pod["metadata"]
        m = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        return {
            "metadata.name": md["name"], "metadata.namespace": md["namespace"],
            "metadata.uid": md["uid"], "spec.nodeName": self.kubelet.node_name,
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": self.ip, "status.podIPs": self.ip, "status.hostIP": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
        }.get(path, "")

    def get_object(self, kind, name, optional):
        try:
            return self.kubelet.client.get("/api/v1/namespaces/%s/%s/%s" % (
                self.ns, kind, urllib.parse.quote(name)))
        except ApiError as e:
            if e.code == 404:
                if optional:
                    return None
                raise ConfigError("CreateContainerConfigError", '%s "%s" not found' % (
                    kind[:-1], name))
            raise

    def key_value(self, ref, kind):
        obj = self.get_object(kind, ref.get("name", ""), ref.get("optional"))
        if obj is None:
            return None
        if kind == "secrets":
            data = obj.get("data") or {}
            if ref["key"] in data:
                return base64.b64decode(data[ref["key"]]).decode(errors="replace")
        else:
            data = obj.get("data") or {}
            if ref["key"] in data:
                return data[ref["key"]]
        if ref.get("optional"):
            return None
        raise ConfigError("CreateContainerConfigError", "couldn't find key %s in %s %s/%s" % (
            ref["key"], kind[:-1].capitalize(), self.ns, ref.get("name")))

    def container_env(self, c):
        spec = c.spec
        env = {"PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                               "/usr/bin:/sbin:/bin")}
        for k in ["LANG", "LC_ALL"] + self.kubelet.pass_env:
            if k in os.environ:
                env[k] = os.environ[k]
        env["HOSTNAME"] = self.hostname
        env["HOME"] = "/root"
        host, port = self.kubelet.apiserver_hostport()
        env["KUBERNETES_SERVICE_HOST"] = host
        env["KUBERNETES_SERVICE_PORT"] = port
        env["KUBERNETES_SERVICE_PORT_HTTPS"] = port
        for src in spec.get("envFrom", []):
            prefix = src.get("prefix", "")
            if "secretRef" in src:
                obj = self.get_object("secrets", src["secretRef"].get("name", ""),
                                      src["secretRef"].get("optional"))
                for k, v in ((obj or {}).get("data") or {}).items():
                    env[prefix + k] = base64.b64decode(v).decode(errors="replace")
            if "configMapRef" in src:
                obj = self.get_object("configmaps", src["configMapRef"].get("name", ""),
                                      src["configMapRef"].get("optional"))
                for k, v in ((obj or {}).get("data") or {}).items():
                    env[prefix + k] = v
        for e in spec.get("env", []):
            name = e["name"]
            if "value" in e:
                env[name] = expand(e["value"], env)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                value = None
                if "fieldRef" in vf:
                    value = self.field_ref(vf["fieldRef"].get("fieldPath", ""))
                elif "secretKeyRef" in vf:
                    value = self.key_value(vf["secretKeyRef"], "secrets")
                elif "configMapKeyRef" in vf:
                    value = self.key_value(vf["configMapKeyRef"], "configmaps")
                elif "resourceFieldRef" in vf:
                    value = resource_field(vf["resourceFieldRef"], spec)
                if value is not None:
                    env[name] = value
            else:
                env[name] = ""
        return env

    def resolve_program(self, c, env):
        spec = c.spec
        command = [expand(x, env) for x in spec.get("command") or []]
        args = [expand(x, env) for x in spec.get("args") or []]
        if not command:
            image = spec.get("image", "")
            mapped = self.kubelet.image_map.get(image) or self.kubelet.image_map.get(
                image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image)
            if mapped:
                command = list(mapped)
            else:
                base = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
                command = [base] if base else []
        if not command:
            return None, []
        first = command[0]
        base = os.path.basename(first)
        for d in self.kubelet.bin_dirs:
            candidate = os.path.join(d, base)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate, command[1:] + args
        if os.path.isabs(first) and os.path.exists(first):
            return first, command[1:] + args
        found = shutil.which(first, path=env.get("PATH"))
        if found and "/" not in first:
            return found, command[1:] + args
        return None, command + args
