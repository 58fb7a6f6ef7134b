"""What a container runs with: its environment (env with $(VAR) expansion,
the downward API through fieldRef and resourceFieldRef, Secret and
ConfigMap keys, envFrom, the service variables of the API server) and its
program (command, args, or the image's entrypoint, looked up in the
--bin-dir folders, on this machine or on PATH).

A mixin of PodWorker (pod_worker.py).
"""
import base64
import os
import re
import shutil
import urllib.parse

from ..client import ApiError
from .containers import ConfigError, expand


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
                    res = vf["resourceFieldRef"].get("resource", "")
                    kind, _, rname = res.partition(".")
                    value = str(((spec.get("resources") or {}).get(kind) or {}).get(
                        rname, os.cpu_count() if rname == "cpu" else 0))
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
