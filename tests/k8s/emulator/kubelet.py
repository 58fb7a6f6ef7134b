#!/usr/bin/env python3
"""A node emulator for tests: a kubelet (plus the scheduler's binding step
and a kube-proxy) that runs pods as local processes, talking to the API server
(apiserver.py) only through its REST API, with its own token, as a kubelet
does.

    python3 tests/k8s/kubelet.py --kubeconfig DIR/kubelet.kubeconfig \
        --state-dir DIR/node --bin-dir build/bin [--bin-dir ...]

Scheduling: a pod with no spec.nodeName whose schedulerName is empty or
"default-scheduler" is bound to this node (POST pods/NAME/binding), like the
default scheduler with one node. Pods asking for another scheduler stay
Pending, as they would on a cluster without that scheduler. nodeSelector,
affinity, tolerations and resource requests are not checked.

Containers: each container is one local process group.
  * The program: the basename of command[0] (or of the image's last path
    segment when there is no command) is looked up in every --bin-dir; then an
    absolute command[0] that exists on this machine runs as is (so /bin/sh
    works in tests whatever the image); then PATH. --image IMAGE=PROGRAM maps
    an image (with or without tag) to the program used when the container has
    no command (an image's ENTRYPOINT). Otherwise the container fails with
    reason StartError, exit code 128, as containerd reports it.
  * Environment: only what the pod says (no variables of the kubelet leak in
    except PATH, LANG and the names given with --pass-env), plus HOSTNAME,
    KUBERNETES_SERVICE_HOST/PORT (the emulated API server). env with value,
    $(VAR) expansion (also in command and args), valueFrom.fieldRef
    (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
    metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
    status.podIP, status.podIPs, status.hostIP), secretKeyRef and
    configMapKeyRef (optional honoured; a missing one keeps the container
    Waiting with CreateContainerConfigError and is retried), resourceFieldRef
    (the container's limit, or the node's capacity), envFrom.
  * Working directory: workingDir when set (created if missing), else the pod's
    own folder under --state-dir.
  * Logs: <state-dir>/logs/<ns>_<pod>_<uid>/<container>.<restartCount>.log,
    served by the API server as pods/log (kubectl logs, -f, --previous).
  * Volumes: secret, configMap (files for each key, or `items`), emptyDir
    (a per-pod folder), hostPath (the path itself), downwardAPI (labels,
    annotations, name, namespace). How a mountPath becomes visible:
      - isolation "namespace" (the default where unshare(2) works, e.g. as
        root): every container runs in its own mount and UTS namespace
        (`unshare --mount --uts`), the volume folder is bind-mounted on the
        real mountPath (created empty on the host when missing), a per-pod
        hosts file is bind-mounted on /etc/hosts and the hostname is the pod's
        hostname, exactly what the process would see in a container;
      - isolation "none": no namespaces; each mountPath that does not exist on
        the host is created as a symbolic link to the volume folder and removed
        when the pod goes (mountPaths that exist and are not ours are left
        alone and the container fails with CreateContainerError).
  * Networking: every pod gets its own loopback address 127.X.0.N (X per node emulator, N from 2
    up), reported as status.podIP. All pods share the host's network
    namespace, so a process must listen on its pod IP (status.podIP through
    a fieldRef), not on 0.0.0.0, when two pods use the same port.
  * DNS: pod hostname (spec.hostname or the pod name), <hostname>.<subdomain>
    when a headless Service named <subdomain> exists in the namespace, and
    Services (<svc>, <svc>.<ns>, <svc>.<ns>.svc, <svc>.<ns>.svc.cluster.local)
    resolve through hosts-file entries: a headless Service to the pod IPs of
    its ready endpoints (publishNotReadyAddresses honoured), a ClusterIP
    Service to its clusterIP. In the "namespace" isolation each pod has its own
    hosts file (short names relative to its namespace) kept up to date in
    place; with --host-dns (the default when isolation is "none") the same
    entries (FQDN and <name>.<ns> forms, plus short names of every namespace)
    also go to the machine's /etc/hosts between `# BEGIN kubeps-emulator ID`
    and `# END kubeps-emulator ID` markers, removed on exit.
  * kube-proxy: each ClusterIP Service (clusterIPs come from the API server's
    --service-cidr, 127.1.0.0/16 by default) is served on clusterIP:port by a
    TCP proxy that connects round-robin to the ready endpoints' targetPort
    (numbers or container port names).
  * Lifecycle: phases Pending -> Running -> Succeeded/Failed, conditions
    PodScheduled, Initialized, ContainersReady, Ready; containerStatuses with
    state waiting/running/terminated (exitCode, signal, reason Completed,
    Error or StartError), lastState, restartCount, ready, started; init
    containers run in order first. restartPolicy Always/OnFailure/Never is
    honoured with a crash-loop back-off (--backoff seconds, doubling, capped at
    --max-backoff; reason CrashLoopBackOff while waiting). readinessProbe and
    livenessProbe (exec, tcpSocket, httpGet; initialDelaySeconds,
    periodSeconds, failureThreshold, successThreshold) are run; without a
    readinessProbe a running container is ready. activeDeadlineSeconds fails
    the pod with reason DeadlineExceeded.
  * Deletion: when the API server marks the pod with a deletionTimestamp, every
    process group gets SIGTERM, then SIGKILL after the grace period, the final
    status is written and the pod is deleted with gracePeriodSeconds=0 (and a
    uid precondition), as a kubelet does.
On exit (SIGTERM/SIGINT) the kubelet stops every process group it started and
removes its /etc/hosts entries and mount-path links.
"""
import argparse
import atexit
import base64
import copy
import fcntl
import http.client
import itertools
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from . import client, clock, lifetime
from .client import ApiError
from .clock import now_iso
from .selector import labels_match, selector_from_match_labels

HOSTS_FILE = "/etc/hosts"


def log(msg):
    sys.stderr.write("kubelet: %s\n" % msg)
    sys.stderr.flush()


def unshare_works():
    if not shutil.which("unshare") or not shutil.which("mount"):
        return False
    try:
        r = subprocess.run(["unshare", "--mount", "--uts", "--propagation", "private", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def remove_created(path):
    """Removes a link, an empty folder or an empty file the kubelet made."""
    try:
        if os.path.islink(path):
            os.unlink(path)
        elif os.path.isdir(path):
            os.rmdir(path)   # only when empty (nothing is mounted on it any more)
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass


def exit_code(rc):
    return 128 - rc if rc < 0 else rc


def expand(text, env):
    """Kubernetes $(VAR) expansion: $$ escapes, unknown references stay."""
    if not isinstance(text, str):
        return text
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            j = text.find(")", i + 2)
            if j < 0:
                out.append(text[i:])
                break
            name = text[i + 2:j]
            out.append(env[name] if name in env else text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class ConfigError(Exception):
    """The container cannot be configured yet (a missing secret...)."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class Container:
    def __init__(self, spec, init=False):
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.proc = None
        self.restarts = 0
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state = {}
        self.ready = False
        self.started_at = None
        self.backoff_until = 0
        self.backoff = 0
        self.done = False          # terminated and will not restart
        self.probe_next = {}
        self.probe_counts = {}
        self.log_file = None
        self.started_once = False

    def status(self, image_id=""):
        st = {"name": self.name, "image": self.spec.get("image", ""),
              "imageID": image_id, "ready": self.ready, "restartCount": self.restarts,
              "state": self.state, "lastState": self.last_state,
              "started": "running" in self.state}
        if self.proc is not None:
            st["containerID"] = "emulated://%d" % self.proc.pid
        return st


class PodWorker(threading.Thread):
    def __init__(self, kubelet, pod):
        super().__init__(daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        md = pod["metadata"]
        self.uid = md["uid"]
        self.ns, self.name = md["namespace"], md["name"]
        self.key = "%s/%s" % (self.ns, self.name)
        self.ip = kubelet.allocate_ip(self.uid)
        self.dir = os.path.join(kubelet.state_dir, "pods", "%s_%s_%s" % (self.ns, self.name,
                                                                          self.uid))
        self.log_dir = os.path.join(kubelet.log_dir, "%s_%s_%s" % (self.ns, self.name, self.uid))
        self.hosts_path = os.path.join(self.dir, "etc-hosts")
        self.lock = threading.Lock()
        self.wake = threading.Event()
        spec = pod["spec"]
        self.inits = [Container(c, init=True) for c in spec.get("initContainers", [])]
        self.containers = [Container(c) for c in spec.get("containers", [])]
        self.phase = "Pending"
        self.reason = None
        self.message = None
        self.start_time = now_iso()
        self.conditions = {}
        self.deleting = False
        self.gone = False
        self.links = []
        self.volumes_ready = False
        self.initialized = not self.inits
        self.last_status = None
        self.hostname = (spec.get("hostname") or self.name)[:63]

    # -- status

    def set_condition(self, ctype, value, reason=None):
        cur = self.conditions.get(ctype)
        value = "True" if value else "False"
        if cur and cur["status"] == value:
            return
        c = {"type": ctype, "status": value, "lastProbeTime": None,
             "lastTransitionTime": now_iso()}
        if reason:
            c["reason"] = reason
        self.conditions[ctype] = c

    def build_status(self):
        running = [c for c in self.containers if "running" in c.state]
        all_ready = bool(self.containers) and all(c.ready for c in self.containers)
        self.set_condition("PodScheduled", True)
        self.set_condition("Initialized", self.initialized,
                           None if self.initialized else "ContainersNotInitialized")
        self.set_condition("ContainersReady", all_ready,
                           None if all_ready else "ContainersNotReady")
        self.set_condition("Ready", all_ready, None if all_ready else "ContainersNotReady")
        status = {
            "phase": self.phase,
            "conditions": [self.conditions[t] for t in
                           ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "startTime": self.start_time,
            "qosClass": self.pod.get("status", {}).get("qosClass", "BestEffort"),
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.inits:
            status["initContainerStatuses"] = [c.status() for c in self.inits]
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        del running
        return status

    def push_status(self):
        status = self.build_status()
        if status == self.last_status or self.gone:
            return
        try:
            self.kubelet.client.patch(self.kubelet.pod_path(self.ns, self.name) + "/status",
                                      [{"op": "test", "path": "/metadata/uid", "value": self.uid},
                                       {"op": "replace", "path": "/status", "value": status}],
                                      kind="json")
            self.last_status = copy.deepcopy(status)
        except ApiError as e:
            if e.code in (404, 422):
                self.gone = True
            else:
                log("%s: status update failed: %s" % (self.key, e))
        except OSError as e:
            log("%s: status update failed: %s" % (self.key, e))

    # -- configuration

    def field_ref(self, path):
        md = self.pod["metadata"]
        m = re.match(r"^metadata\.(labels|annotations)\['(.*)'\]$", path)
        if m:
            return (md.get(m.group(1)) or {}).get(m.group(2), "")
        return {
            "metadata.name": md["name"], "metadata.namespace": md["namespace"],
            "metadata.uid": md["uid"], "spec.nodeName": self.kubelet.node_name,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
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

    def volume_dir(self, name):
        return os.path.join(self.dir, "volumes", name)

    def prepare_volumes(self):
        for v in self.pod["spec"].get("volumes", []):
            name = v["name"]
            path = self.volume_dir(name)
            if "hostPath" in v:
                continue
            os.makedirs(path, exist_ok=True)
            files = {}
            if "secret" in v or "configMap" in v:
                kind = "secrets" if "secret" in v else "configmaps"
                src = v.get("secret") or v.get("configMap")
                ref = src.get("secretName") if kind == "secrets" else src.get("name")
                obj = self.get_object(kind, ref or "", src.get("optional"))
                if obj is None:
                    continue
                data = dict(obj.get("data") or {})
                if kind == "secrets":
                    data = {k: base64.b64decode(x) for k, x in data.items()}
                else:
                    data = {k: x.encode() for k, x in data.items()}
                    for k, x in (obj.get("binaryData") or {}).items():
                        data[k] = base64.b64decode(x)
                items = src.get("items")
                if items:
                    for it in items:
                        if it["key"] not in data:
                            if src.get("optional"):
                                continue
                            raise ConfigError("CreateContainerConfigError",
                                              "couldn't find key %s" % it["key"])
                        files[it["path"]] = (data[it["key"]], it.get("mode"))
                else:
                    files = {k: (x, None) for k, x in data.items()}
                default_mode = src.get("defaultMode", 0o644)
            elif "downwardAPI" in v:
                default_mode = v["downwardAPI"].get("defaultMode", 0o644)
                for it in v["downwardAPI"].get("items", []):
                    fp = (it.get("fieldRef") or {}).get("fieldPath", "")
                    md = self.pod["metadata"]
                    if fp in ("metadata.labels", "metadata.annotations"):
                        d = md.get(fp.split(".")[1]) or {}
                        text = "".join('%s="%s"\n' % kv for kv in sorted(d.items()))
                    else:
                        text = self.field_ref(fp)
                    files[it["path"]] = (text.encode(), it.get("mode"))
            else:
                default_mode = None
            for rel, (content, mode) in files.items():
                target = os.path.join(path, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(content)
                os.chmod(target, mode or default_mode or 0o644)

    def mounts(self, c):
        """[(source, mountPath, readOnly)] of the container."""
        out = []
        vols = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for m in c.spec.get("volumeMounts", []):
            v = vols.get(m["name"])
            if v is None:
                raise ConfigError("CreateContainerConfigError",
                                  "volume %s not found in the pod spec" % m["name"])
            src = v["hostPath"]["path"] if "hostPath" in v else self.volume_dir(m["name"])
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
            out.append((src, m["mountPath"], bool(m.get("readOnly"))))
        return out

    # -- processes

    def start_container(self, c):
        try:
            env = self.container_env(c)
            mounts = self.mounts(c)
        except ConfigError as e:
            c.state = {"waiting": {"reason": e.reason, "message": str(e)}}
            c.backoff_until = time.time() + 1
            return False
        except (ApiError, OSError) as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            c.backoff_until = time.time() + 1
            return False
        if c.started_once:
            c.restarts += 1
        c.started_once = True
        program, argv = self.resolve_program(c, env)
        now = now_iso()
        if program is None:
            msg = "exec: %r: executable file not found in $PATH" % (argv[0] if argv else "")
            self.terminated(c, 128, "StartError", now, now, msg)
            return False
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, "%s.%d.log" % (c.name, c.restarts))
        logf = open(log_path, "ab")
        cwd = c.spec.get("workingDir") or self.dir
        os.makedirs(cwd, exist_ok=True)
        iso = self.kubelet.isolation
        if iso == "namespace":
            script = ["set -e", 'mount --bind "$KUBEPS_EMU_HOSTS" /etc/hosts',
                      'hostname "$KUBEPS_EMU_HOSTNAME"']
            margs = []
            for i, (src, dst, ro) in enumerate(mounts):
                margs += [src, dst]
                n = 2 * i
                script.append('s="$KUBEPS_EMU_M%d"; d="$KUBEPS_EMU_M%d"' % (n, n + 1))
                self.make_target(src, dst)
                script.append('mount --bind "$s" "$d"')
                if ro:
                    script.append('mount -o remount,bind,ro "$d" || true')
            script.append("unset KUBEPS_EMU_HOSTS KUBEPS_EMU_HOSTNAME " + " ".join(
                "KUBEPS_EMU_M%d" % i for i in range(len(margs))))
            script.append('cd "$KUBEPS_EMU_CWD" 2>/dev/null || true; unset KUBEPS_EMU_CWD')
            script.append('exec "$@"')
            full_env = dict(env)
            full_env["KUBEPS_EMU_HOSTS"] = self.hosts_path
            full_env["KUBEPS_EMU_HOSTNAME"] = self.hostname
            full_env["KUBEPS_EMU_CWD"] = cwd
            for i, m in enumerate(margs):
                full_env["KUBEPS_EMU_M%d" % i] = m
            cmd = ["unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh",
                   "-c", "\n".join(script), "sh", program] + argv
            env = full_env
        else:
            for src, dst, _ in mounts:
                if os.path.lexists(dst):
                    if os.path.islink(dst) and dst in self.kubelet.links:
                        # another pod's link: pods of one job mount the same
                        # secret at the same path; the first pod's copy is seen
                        if os.readlink(dst) != src:
                            log("%s: %s is shared with another pod (isolation none)" % (
                                self.key, dst))
                        self.links.append(dst)
                        continue
                    if os.path.realpath(dst) == os.path.realpath(src):
                        continue
                    self.terminated(c, 128, "StartError", now, now,
                                    "mountPath %s exists on this machine; the emulator cannot "
                                    "mount over it without --isolation=namespace" % dst)
                    logf.close()
                    return False
                self.make_parents(dst)
                os.symlink(src, dst)
                self.links.append(dst)
                self.kubelet.links.add(dst)
            cmd = [program] + argv
        try:
            c.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            logf.close()
            self.terminated(c, 128, "StartError", now, now, str(e))
            return False
        logf.close()
        c.log_path = log_path
        c.started_at = now
        c.state = {"running": {"startedAt": now}}
        c.ready = not c.spec.get("readinessProbe") and not c.init
        c.probe_next = {}
        c.probe_counts = {}
        self.kubelet.track(c.proc)
        if self.kubelet.stream_logs:
            threading.Thread(target=self.kubelet.tail, args=(log_path, "%s/%s" % (
                self.name, c.name), c.proc), daemon=True).start()
        return True

    def make_parents(self, path):
        """Creates the missing parents of `path`, remembering them so that
        cleanup() removes them again."""
        missing = []
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            os.mkdir(d)
            self.links.append(d)
            self.kubelet.links.add(d)

    def make_target(self, src, dst):
        """A mount point on the host for a bind mount (an empty folder or
        file), removed again when the pod goes."""
        if os.path.lexists(dst):
            return
        self.make_parents(dst)
        if os.path.isdir(src):
            os.mkdir(dst)
        else:
            open(dst, "a").close()
        self.links.append(dst)
        self.kubelet.links.add(dst)

    def terminated(self, c, code, reason, started, finished, message=None, signal_no=None):
        t = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished,
             "containerID": "emulated://%d" % c.proc.pid if c.proc else ""}
        if message:
            t["message"] = message
        if signal_no:
            t["signal"] = signal_no
        c.state = {"terminated": t}
        c.ready = False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if c.init:
            restart = code != 0 and policy != "Never"
        else:
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if self.deleting:
            restart = False
        if restart:
            c.backoff = min(self.kubelet.max_backoff, c.backoff * 2 if c.backoff else
                            self.kubelet.backoff)
            c.backoff_until = time.time() + c.backoff
            c.last_state = c.state
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                "back-off %gs restarting failed container=%s pod=%s_%s(%s)" % (
                    c.backoff, c.name, self.name, self.ns, self.uid))}}
        else:
            c.done = True

    def reap(self, c):
        if c.proc is None or "running" not in c.state:
            return False
        rc = c.proc.poll()
        if rc is None:
            return False
        self.kubelet.untrack(c.proc)
        code = exit_code(rc)
        self.terminated(c, code, "Completed" if code == 0 else "Error",
                        c.started_at, now_iso(), signal_no=-rc if rc < 0 else None)
        return True

    def restart_due(self, c):
        if c.done or "running" in c.state or self.deleting:
            return False
        return time.time() >= c.backoff_until

    def probe(self, c, kind):
        spec = c.spec.get(kind)
        if not spec or "running" not in c.state:
            return None
        now = time.time()
        started = clock.parse_time(c.started_at) or now
        nxt = c.probe_next.get(kind, started + spec.get("initialDelaySeconds", 0))
        if now < nxt:
            return None
        c.probe_next[kind] = now + spec.get("periodSeconds", 10)
        timeout = spec.get("timeoutSeconds", 1)
        ok = False
        try:
            if "exec" in spec:
                env = self.container_env(c)
                r = subprocess.run(spec["exec"].get("command", []), env=env, timeout=timeout,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                ok = r.returncode == 0
            elif "tcpSocket" in spec:
                port = self.port_number(c, spec["tcpSocket"].get("port"))
                host = spec["tcpSocket"].get("host") or self.ip
                with socket.create_connection((host, port), timeout=timeout):
                    ok = True
            elif "httpGet" in spec:
                g = spec["httpGet"]
                port = self.port_number(c, g.get("port"))
                conn = http.client.HTTPConnection(g.get("host") or self.ip, port, timeout=timeout)
                conn.request("GET", g.get("path", "/"), headers={
                    h["name"]: h["value"] for h in g.get("httpHeaders", [])})
                ok = 200 <= conn.getresponse().status < 400
                conn.close()
            elif "grpc" in spec:
                port = self.port_number(c, spec["grpc"].get("port"))
                with socket.create_connection((self.ip, port), timeout=timeout):
                    ok = True
        except (OSError, subprocess.TimeoutExpired, http.client.HTTPException, ConfigError,
                ApiError):
            ok = False
        counts = c.probe_counts.setdefault(kind, [0, 0])
        if ok:
            counts[0] += 1
            counts[1] = 0
        else:
            counts[1] += 1
            counts[0] = 0
        if ok and counts[0] >= spec.get("successThreshold", 1):
            return True
        if not ok and counts[1] >= spec.get("failureThreshold", 3):
            return False
        return None

    def port_number(self, c, port):
        if isinstance(port, int):
            return port
        if isinstance(port, str) and port.isdigit():
            return int(port)
        for p in c.spec.get("ports", []):
            if p.get("name") == port:
                return p["containerPort"]
        raise OSError("no port named %s" % port)

    def stop_all(self, grace):
        procs = [c for c in self.inits + self.containers if c.proc and "running" in c.state]
        for c in procs:
            self.kubelet.signal(c.proc, signal.SIGTERM)
        deadline = time.time() + max(0, grace)
        while time.time() < deadline and any(c.proc.poll() is None for c in procs):
            time.sleep(0.05)
        for c in procs:
            if c.proc.poll() is None:
                self.kubelet.signal(c.proc, signal.SIGKILL)
        for c in procs:
            try:
                c.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.reap(c)

    # -- the loop

    def update_pod(self, pod):
        with self.lock:
            self.pod = pod
            if pod["metadata"].get("deletionTimestamp"):
                self.deleting = True
        self.wake.set()

    def run(self):
        try:
            self.loop()
        except Exception as e:  # keep the node alive
            import traceback
            traceback.print_exc()
            log("%s: worker failed: %r" % (self.key, e))
        finally:
            self.cleanup()

    def loop(self):
        os.makedirs(self.dir, exist_ok=True)
        self.kubelet.write_pod_hosts(self)
        self.push_status()
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        started = time.time()
        while not self.gone:
            if self.deleting:
                grace = self.pod["metadata"].get("deletionGracePeriodSeconds", 30)
                self.stop_all(grace)
                if self.phase not in ("Succeeded", "Failed"):
                    codes = [c.state.get("terminated", {}).get("exitCode", 0)
                             for c in self.containers]
                    self.phase = "Failed" if any(codes) else "Succeeded"
                self.push_status()
                try:
                    self.kubelet.client.delete(self.kubelet.pod_path(self.ns, self.name), {
                        "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                        "preconditions": {"uid": self.uid}})
                except (ApiError, OSError):
                    pass
                self.gone = True
                break
            if deadline and time.time() - started > deadline and \
                    self.phase not in ("Succeeded", "Failed"):
                self.stop_all(0)
                self.phase, self.reason = "Failed", "DeadlineExceeded"
                self.message = "Pod was active on the node longer than the specified deadline"
                self.push_status()
            if not self.volumes_ready and self.phase == "Pending":
                try:
                    self.prepare_volumes()
                    self.volumes_ready = True
                except ConfigError as e:
                    for c in self.inits + self.containers:
                        c.state = {"waiting": {"reason": "ContainerCreating"}}
                    self.message = str(e)
                except (ApiError, OSError) as e:
                    self.message = str(e)
            if self.volumes_ready and self.phase not in ("Succeeded", "Failed"):
                self.step()
            self.push_status()
            self.wake.wait(0.1)
            self.wake.clear()

    def step(self):
        if not self.initialized:
            for c in self.inits:
                self.reap(c)
                if c.done and c.state["terminated"]["exitCode"] == 0:
                    continue
                if c.done:
                    self.phase = "Failed"
                    return
                if "running" in c.state:
                    return
                if self.restart_due(c):
                    self.start_container(c)
                return
            self.initialized = True
            for c in self.containers:
                c.state = {"waiting": {"reason": "PodInitializing"}}
        for c in self.containers:
            self.reap(c)
            if self.restart_due(c):
                self.start_container(c)
            r = self.probe(c, "readinessProbe")
            if r is not None:
                c.ready = r
            if self.probe(c, "livenessProbe") is False and c.proc:
                self.kubelet.signal(c.proc, signal.SIGKILL)
        states = [c.state for c in self.containers]
        if all(c.done for c in self.containers):
            codes = [s["terminated"]["exitCode"] for s in states]
            self.phase = "Succeeded" if not any(codes) else "Failed"
        elif any("running" in s for s in states) or any(c.started_once for c in self.containers):
            self.phase = "Running"

    def cleanup(self):
        for c in self.inits + self.containers:
            if c.proc and c.proc.poll() is None:
                self.kubelet.signal(c.proc, signal.SIGKILL)
        with self.kubelet.lock:
            mine = set(self.links)
            others = set()
            for w in self.kubelet.workers.values():
                if w is not self:
                    others.update(w.links)
        for link in reversed(self.links):
            if link in others:
                continue
            remove_created(link)
            self.kubelet.links.discard(link)
        del mine
        self.kubelet.forget(self)


class ServiceProxy:
    """kube-proxy for one ClusterIP service port."""

    def __init__(self, kubelet, ip, port, key, port_spec):
        self.kubelet, self.ip, self.port, self.key = kubelet, ip, port, key
        self.port_spec = port_spec
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(64)
        self.closed = False
        self.rr = itertools.count()
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def accept_loop(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.forward, args=(conn,), daemon=True).start()

    def forward(self, conn):
        targets = self.kubelet.endpoints(self.key, self.port_spec)
        if not targets:
            conn.close()
            return
        host, port = targets[next(self.rr) % len(targets)]
        try:
            up = socket.create_connection((host, port), timeout=5)
            up.settimeout(None)
        except OSError:
            conn.close()
            return
        pair = [conn, up]
        try:
            while True:
                r, _, _ = select.select(pair, [], [])
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    (up if s is conn else conn).sendall(data)
        except OSError:
            pass
        finally:
            conn.close()
            up.close()


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.client = client.Client.from_kubeconfig(args.kubeconfig)
        self.node_name = args.node_name
        self.state_dir = os.path.abspath(args.state_dir)
        self.log_dir = os.path.abspath(args.log_dir or os.path.join(self.state_dir, "logs"))
        os.makedirs(self.log_dir, exist_ok=True)
        self.bin_dirs = [os.path.abspath(d) for d in args.bin_dir]
        self.image_map = {}
        for m in args.image:
            image, _, program = m.partition("=")
            self.image_map[image] = program.split()
        self.pass_env = args.pass_env
        self.backoff = args.backoff
        self.max_backoff = args.max_backoff
        self.stream_logs = args.stream_logs
        if args.isolation == "auto":
            self.isolation = "namespace" if unshare_works() else "none"
        else:
            self.isolation = args.isolation
        self.host_dns = args.host_dns if args.host_dns is not None else self.isolation == "none"
        self.marker = "kubeps-emulator %s" % (args.marker or os.getpid())
        self.lock = threading.RLock()
        self.workers = {}          # uid -> PodWorker
        self.pods = {}             # uid -> pod object (bound to this node)
        self.services = {}         # (ns, name) -> service
        self.ips = {}              # uid -> ip
        self.free_ips = []
        self.next_ip = 2
        # Each node emulator takes its own 127.X.0.0/16 for pod IPs, so two
        # emulated clusters on one machine (parallel tests) never collide.
        self.pod_octet = int(os.environ.get("KUBEPS_EMULATOR_POD_OCTET", "0")) or (2 + os.getpid() % 240)
        self.procs = set()
        self.links = set()
        self.proxies = {}          # (ip, port) -> ServiceProxy
        self.dns_dirty = threading.Event()
        self.stopping = False

    def pod_path(self, ns, name):
        return "/api/v1/namespaces/%s/pods/%s" % (ns, name)

    def apiserver_hostport(self):
        u = urllib.parse.urlsplit(self.client.server)
        return u.hostname, str(u.port or 443)

    # -- processes

    def track(self, proc):
        with self.lock:
            self.procs.add(proc)

    def untrack(self, proc):
        with self.lock:
            self.procs.discard(proc)

    @staticmethod
    def signal(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                proc.send_signal(sig)
            except OSError:
                pass

    def tail(self, path, prefix, proc):
        with open(path, "rb") as f:
            while True:
                line = f.readline()
                if line:
                    sys.stderr.write("[%s] %s" % (prefix, line.decode(errors="replace")))
                    if not line.endswith(b"\n"):
                        sys.stderr.write("\n")
                    continue
                if proc.poll() is not None:
                    rest = f.read()
                    if rest:
                        sys.stderr.write("[%s] %s\n" % (prefix, rest.decode(errors="replace")))
                    return
                time.sleep(0.1)

    # -- addresses

    def allocate_ip(self, uid):
        with self.lock:
            if uid in self.ips:
                return self.ips[uid]
            if self.free_ips:
                ip = self.free_ips.pop(0)
            else:
                n = self.next_ip
                self.next_ip += 1
                ip = "127.%d.%d.%d" % (self.pod_octet, n // 254, n % 254 + 1)
            self.ips[uid] = ip
            return ip

    def forget(self, worker):
        with self.lock:
            self.workers.pop(worker.uid, None)
            self.pods.pop(worker.uid, None)
            ip = self.ips.pop(worker.uid, None)
            if ip:
                self.free_ips.append(ip)
        self.dns_dirty.set()

    # -- node

    def register_node(self):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": self.node_name, "labels": {
                "kubernetes.io/hostname": self.node_name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/worker": ""}},
            "spec": {}}
        try:
            self.client.post("/api/v1/nodes", node)
        except ApiError as e:
            if e.code != 409:
                raise
        t = now_iso()
        cpus = str(os.cpu_count() or 1)
        mem = "%dKi" % (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 1024)
        status = {
            "capacity": {"cpu": cpus, "memory": mem, "pods": "110"},
            "allocatable": {"cpu": cpus, "memory": mem, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": self.node_name}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-kubeps-emulator",
                         "containerRuntimeVersion": "emulated://1", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "kubeps node emulator",
                         "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "",
                         "bootID": "", "kubeProxyVersion": "", "containerRuntime": "emulated"},
        }
        self.client.patch("/api/v1/nodes/%s/status" % self.node_name, {"status": status})

    # -- informers

    def informer(self, path, on_event, on_sync):
        """list + watch with relist on 410 and on stream end."""
        rv = None
        while not self.stopping:
            try:
                if rv is None:
                    lst = self.client.get(path)
                    rv = lst["metadata"]["resourceVersion"]
                    on_sync(lst["items"])
                sep = "&" if "?" in path else "?"
                for ev in self.client.watch("%s%swatch=1&allowWatchBookmarks=true&"
                                            "resourceVersion=%s" % (path, sep, rv)):
                    if ev["type"] == "ERROR":
                        if ev["object"].get("code") == 410:
                            rv = None
                        break
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK":
                        try:
                            on_event(ev["type"], ev["object"])
                        except Exception:  # keep watching
                            import traceback
                            traceback.print_exc()
            except (ApiError, OSError, ValueError, http.client.HTTPException) as e:
                if not self.stopping:
                    log("watch %s: %s" % (path, e))
                    if isinstance(e, ApiError) and e.code == 410:
                        rv = None
                    time.sleep(0.5)

    def sync_pods(self, items):
        seen = set()
        for pod in items:
            seen.add(pod["metadata"]["uid"])
            self.pod_event("ADDED", pod)
        with self.lock:
            for uid in list(self.workers):
                if uid not in seen:
                    self.pod_event("DELETED", self.workers[uid].pod)

    def pod_event(self, etype, pod):
        md = pod["metadata"]
        uid = md["uid"]
        spec = pod.get("spec", {})
        if etype == "DELETED":
            with self.lock:
                w = self.workers.get(uid)
                self.pods.pop(uid, None)
            if w:
                w.gone = True
                w.deleting = True
                w.wake.set()
                threading.Thread(target=w.stop_all, args=(0,), daemon=True).start()
            self.dns_dirty.set()
            return
        node = spec.get("nodeName")
        if not node:
            if spec.get("schedulerName", "default-scheduler") in ("default-scheduler", "") and \
                    not md.get("deletionTimestamp"):
                try:
                    self.client.post(self.pod_path(md["namespace"], md["name"]) + "/binding", {
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": md["name"], "namespace": md["namespace"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": self.node_name}})
                except ApiError as e:
                    if e.code not in (404, 409):
                        log("bind %s: %s" % (md["name"], e))
            return
        if node != self.node_name:
            return
        with self.lock:
            self.pods[uid] = pod
            w = self.workers.get(uid)
            if w is None:
                phase = pod.get("status", {}).get("phase")
                if phase in ("Succeeded", "Failed"):
                    return  # finished before this kubelet started
                w = PodWorker(self, pod)
                self.workers[uid] = w
                w.start()
            else:
                w.update_pod(pod)
        self.dns_dirty.set()

    def service_event(self, etype, svc):
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        with self.lock:
            if etype == "DELETED":
                self.services.pop(key, None)
            else:
                self.services[key] = svc
        self.dns_dirty.set()

    def sync_services(self, items):
        with self.lock:
            self.services = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in items}
        self.dns_dirty.set()

    # -- endpoints, DNS and proxies

    def ready_pods(self, ns, selector, not_ready_too=False):
        out = []
        with self.lock:
            for uid, pod in self.pods.items():
                w = self.workers.get(uid)
                if w is None or pod["metadata"]["namespace"] != ns:
                    continue
                if not labels_match(selector_from_match_labels(selector),
                                    pod["metadata"].get("labels")):
                    continue
                ready = w.phase == "Running" and w.containers and all(c.ready for c in w.containers)
                if (ready or not_ready_too) and not w.deleting and \
                        w.phase not in ("Succeeded", "Failed"):
                    out.append((pod, w))
        return out

    def endpoints(self, key, port_spec):
        svc = self.services.get(key)
        if not svc or not svc["spec"].get("selector"):
            return []
        target = port_spec.get("targetPort", port_spec.get("port"))
        out = []
        for pod, w in self.ready_pods(key[0], svc["spec"]["selector"]):
            if isinstance(target, int):
                out.append((w.ip, target))
            else:
                for c in pod["spec"].get("containers", []):
                    for p in c.get("ports", []):
                        if p.get("name") == target:
                            out.append((w.ip, p["containerPort"]))
        return out

    def dns_records(self):
        """[(ip, [names], namespace)]"""
        records = []
        with self.lock:
            services = list(self.services.values())
        headless = {}
        for svc in services:
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            spec = svc.get("spec", {})
            names = lambda n: [n + ".%s.svc.cluster.local" % ns, n + ".%s.svc" % ns,  # noqa
                               n + "." + ns, n]
            if spec.get("clusterIP") == "None":
                headless[(ns, name)] = svc
                if spec.get("selector"):
                    for pod, w in self.ready_pods(ns, spec["selector"],
                                                  spec.get("publishNotReadyAddresses")):
                        records.append((w.ip, names(name), ns))
            elif spec.get("clusterIP"):
                records.append((spec["clusterIP"], names(name), ns))
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            sub = w.pod["spec"].get("subdomain")
            svc = headless.get((w.ns, sub)) if sub else None
            if svc is None:
                continue
            publish = svc["spec"].get("publishNotReadyAddresses")
            if not publish and not (w.phase == "Running" and all(c.ready for c in w.containers)):
                continue
            base = "%s.%s" % (w.hostname, sub)
            records.append((w.ip, [base + ".%s.svc.cluster.local" % w.ns, base + ".%s.svc" % w.ns,
                                   base + "." + w.ns, base], w.ns))
        return records

    def hosts_text(self, records, namespace=None, worker=None):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        if worker is not None:
            sub = worker.pod["spec"].get("subdomain")
            if sub:
                lines.append("%s\t%s.%s.%s.svc.cluster.local\t%s" % (
                    worker.ip, worker.hostname, sub, worker.ns, worker.hostname))
            else:
                lines.append("%s\t%s" % (worker.ip, worker.hostname))
        for ip, names, ns in records:
            if namespace is None or ns == namespace:
                lines.append("%s\t%s" % (ip, " ".join(names)))
            else:
                # other namespaces: only the qualified forms
                lines.append("%s\t%s" % (ip, " ".join(names[:3])))
        return "\n".join(lines) + "\n"

    def write_pod_hosts(self, worker, records=None):
        if self.isolation != "namespace":
            return
        if records is None:
            records = self.dns_records()
        text = self.hosts_text(records, worker.ns, worker)
        os.makedirs(os.path.dirname(worker.hosts_path), exist_ok=True)
        # in place: the file is bind-mounted, a rename would not be seen
        with open(worker.hosts_path, "a+") as f:
            f.seek(0)
            if f.read() == text:
                return
            f.seek(0)
            f.truncate()
            f.write(text)

    def write_host_hosts(self, records):
        begin, end = "# BEGIN %s\n" % self.marker, "# END %s\n" % self.marker
        block = ""
        if records is not None:
            block = begin + "".join("%s\t%s\n" % (ip, " ".join(names)) for ip, names, _ in
                                    records) + end
        try:
            with open(HOSTS_FILE, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                text = f.read()
                i = text.find(begin)
                if i >= 0:
                    j = text.find(end, i)
                    text = text[:i] + text[j + len(end):] if j >= 0 else text[:i]
                if text and not text.endswith("\n"):
                    text += "\n"
                f.seek(0)
                f.truncate()
                f.write(text + block)
                fcntl.flock(f, fcntl.LOCK_UN)
        except OSError as e:
            log("cannot update %s: %s" % (HOSTS_FILE, e))

    def sync_proxies(self):
        wanted = {}
        with self.lock:
            for key, svc in self.services.items():
                ip = svc.get("spec", {}).get("clusterIP")
                if not ip or ip == "None" or not ip.startswith("127."):
                    continue
                for p in svc["spec"].get("ports", []):
                    if p.get("protocol", "TCP") == "TCP":
                        wanted[(ip, p["port"])] = (key, p)
        for k in list(self.proxies):
            if k not in wanted:
                self.proxies.pop(k).close()
        for k, (key, p) in wanted.items():
            if k in self.proxies:
                self.proxies[k].port_spec = p
                self.proxies[k].key = key
                continue
            try:
                self.proxies[k] = ServiceProxy(self, k[0], k[1], key, p)
            except OSError as e:
                log("proxy %s:%d: %s" % (k[0], k[1], e))

    def dns_loop(self):
        last = None
        while not self.stopping:
            self.dns_dirty.wait(0.5)
            self.dns_dirty.clear()
            records = self.dns_records()
            with self.lock:
                workers = list(self.workers.values())
            for w in workers:
                try:
                    self.write_pod_hosts(w, records)
                except OSError as e:
                    log("hosts for %s: %s" % (w.key, e))
            if self.host_dns and records != last:
                self.write_host_hosts(records)
            last = records
            self.sync_proxies()

    # -- main

    def run(self):
        log("node %s, isolation %s, host /etc/hosts entries %s" % (
            self.node_name, self.isolation, "on" if self.host_dns else "off"))
        self.register_node()
        threading.Thread(target=self.informer, args=("/api/v1/services", self.service_event,
                                                     self.sync_services), daemon=True).start()
        threading.Thread(target=self.dns_loop, daemon=True).start()
        threading.Thread(target=self.informer, args=("/api/v1/pods", self.pod_event,
                                                     self.sync_pods), daemon=True).start()
        print("READY", flush=True)
        # refresh node heartbeat now and then
        while not self.stopping:
            time.sleep(1)

    def shutdown(self):
        if self.stopping:
            return
        self.stopping = True
        with self.lock:
            procs = list(self.procs)
            workers = list(self.workers.values())
        for w in workers:
            for c in w.inits + w.containers:
                if c.proc and c.proc.poll() is None:
                    procs.append(c.proc)
        for p in procs:
            self.signal(p, signal.SIGTERM)
        deadline = time.time() + 3
        while time.time() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                self.signal(p, signal.SIGKILL)
        for link in sorted(self.links, key=len, reverse=True):
            remove_created(link)
        if self.host_dns:
            self.write_host_hosts(None)
        for p in list(self.proxies.values()):
            p.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--log-dir", default=None, help="container logs (default STATE/logs)")
    p.add_argument("--node-name", default="kubeps-node")
    p.add_argument("--bin-dir", action="append", default=[],
                   help="where container programs are looked up by basename (repeatable)")
    p.add_argument("--image", action="append", default=[],
                   help="IMAGE=PROGRAM [ARGS]: the entrypoint of an image (repeatable)")
    p.add_argument("--pass-env", action="append", default=[],
                   help="a variable of the kubelet's environment every container gets")
    p.add_argument("--isolation", choices=["auto", "namespace", "none"], default="auto")
    p.add_argument("--host-dns", dest="host_dns", action="store_true", default=None,
                   help="also write DNS entries to the machine's /etc/hosts")
    p.add_argument("--no-host-dns", dest="host_dns", action="store_false")
    p.add_argument("--marker", default=None, help="id of this node's /etc/hosts block")
    p.add_argument("--backoff", type=float, default=1.0, help="first restart back-off, seconds")
    p.add_argument("--max-backoff", type=float, default=10.0)
    p.add_argument("--stream-logs", action="store_true",
                   help="copy every container's output to stderr, prefixed")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop (and clean up) when the process that started this one ends")
    args = p.parse_args(argv)
    kubelet = Kubelet(args)
    if args.exit_with_parent:
        lifetime.exit_with_parent(lambda: (kubelet.shutdown(), os._exit(0)))

    def stop(signum, frame):
        kubelet.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    atexit.register(kubelet.shutdown)
    kubelet.run()


if __name__ == "__main__":
    main()
