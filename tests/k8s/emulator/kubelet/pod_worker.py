"""The life of one pod on the node, in a thread of its own: volumes first,
then the init containers in order, then the containers, restarted by the
pod's restartPolicy with a crash-loop back-off; probes; the phase,
conditions and container statuses written to pods/NAME/status;
activeDeadlineSeconds; and, once the pod is marked for deletion, stopping
every process within the grace period and deleting the pod for good.

How containers are configured, started and probed is in the mixins:
environment.py, volumes.py, runtime.py, probes.py.
"""
import copy
import os
import signal
import threading
import time

from ..client import ApiError
from ..clock import now_iso
from .containers import ConfigError, Container
from .environment import ContainerEnvironment
from .images import ImagePuller
from .log import log
from .probes import Probes
from .runtime import ProcessRunner
from .volumes import MountError, PodVolumes


# FallbackToLogsOnError: the kubelet's share of the log (kubelet's
# kMaxMessageLength and its tail of 80 lines).
LOG_TAIL_BYTES = 2048
LOG_TAIL_LINES = 80


def log_tail(path):
    """The last lines of a container's log, at most LOG_TAIL_LINES lines and
    LOG_TAIL_BYTES bytes, as FallbackToLogsOnError makes them its message."""
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            data = f.read(LOG_TAIL_BYTES)
    except OSError:
        return None
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines = lines[:-1]
    return b"\n".join(lines[-LOG_TAIL_LINES:]).decode(errors="replace") or None


class PodWorker(ContainerEnvironment, ImagePuller, PodVolumes, ProcessRunner, Probes,
                threading.Thread):
    """The worker of one pod (uid) bound to this node."""

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
        # A pod marked for deletion before this kubelet first saw it (it was
        # down, or relisted after a lost watch) is stopped and deleted, never
        # started: no later event would tell the worker, and the pod would
        # stay Pending or Running with its deletionTimestamp for good.
        self.deleting = bool(md.get("deletionTimestamp"))
        self.gone = False
        self.links = []
        self.volumes_ready = False
        self.mount_retry_at = 0       # when to try a volume that failed to mount again
        self.mount_backoff = 0
        self.initialized = not self.inits
        self.containers_done = False   # every container ended: sidecars stop
        self.last_status = None
        self.hostname = (spec.get("hostname") or self.name)[:63]
        # (grace, message) once the node shuts down (node.py): the pod is
        # stopped and ends Failed, its containers are not restarted.
        self.node_shutdown = None

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
        own = ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        # DisruptionTarget, when this kubelet ended the pod itself
        mine = [c for t, c in self.conditions.items() if t not in own]
        # Conditions others set (DisruptionTarget of an eviction) are kept.
        others = [c for c in (self.pod.get("status") or {}).get("conditions") or []
                  if c.get("type") not in own and c.get("type") not in self.conditions]
        status = {
            "phase": self.phase,
            "conditions": [self.conditions[t] for t in own] + mine + others,
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

    # -- restarts

    def terminated(self, c, code, reason, started, finished, message=None, signal_no=None):
        t = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished,
             "containerID": "emulated://%d" % c.proc.pid if c.proc else ""}
        if message is None and c.termination_file:
            # what the container wrote to its terminationMessagePath, at most
            # 4096 bytes, as the kubelet reads it
            try:
                with open(c.termination_file, errors="replace") as f:
                    message = f.read(4096)
            except OSError:
                pass
        if not message and code != 0 and \
                c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            message = log_tail(c.log_path)
        if message:
            t["message"] = message
        if signal_no:
            t["signal"] = signal_no
        c.state = {"terminated": t}
        c.ready = False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if c.sidecar:
            # whatever the pod's policy, until the containers have ended
            restart = not self.containers_done
        elif c.init:
            restart = code != 0 and policy != "Never"
        else:
            restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if self.deleting or self.node_shutdown:
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

    def restart_due(self, c):
        if c.done or "running" in c.state or self.deleting or self.node_shutdown:
            return False
        return time.time() >= c.backoff_until

    # -- the loop

    def shut_down_for_node(self, grace, message):
        """The node shuts down (node.py): the loop stops the pod within
        `grace` seconds."""
        with self.lock:
            self.node_shutdown = (grace, message)
        self.wake.set()

    def end_for_node_shutdown(self):
        """Stops the pod as the kubelet's graceful node shutdown does: it
        ends Failed, reason Terminated, with the condition DisruptionTarget
        (TerminationByKubelet), whatever its containers' exit codes."""
        grace, message = self.node_shutdown
        self.stop_all(min(grace, self.pod["spec"].get("terminationGracePeriodSeconds", 30)))
        self.phase, self.reason, self.message = "Failed", "Terminated", message
        self.conditions["DisruptionTarget"] = {
            "type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
            "message": message, "lastProbeTime": None, "lastTransitionTime": now_iso()}
        self.push_status()

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
            if self.node_shutdown and self.phase not in ("Succeeded", "Failed"):
                self.end_for_node_shutdown()
            if deadline and time.time() - started > deadline and \
                    self.phase not in ("Succeeded", "Failed"):
                self.stop_all(0)
                self.phase, self.reason = "Failed", "DeadlineExceeded"
                self.message = "Pod was active on the node longer than the specified deadline"
                self.push_status()
            if not self.volumes_ready and self.phase == "Pending" and \
                    time.time() >= self.mount_retry_at:
                self.set_up_volumes()
            if self.volumes_ready and self.phase not in ("Succeeded", "Failed"):
                self.sync_volumes()
                self.step()
            self.push_status()
            self.wake.wait(0.1)
            self.wake.clear()

    def set_up_volumes(self):
        """Mounts the pod's volumes; one that cannot be mounted keeps the
        containers waiting (ContainerCreating, or PodInitializing with init
        containers; no message: the kubelet says
        why only in a FailedMount Event) and is tried again after a back-off."""
        try:
            self.prepare_volumes()
            self.volumes_ready = True
            return
        except MountError as e:
            self.kubelet.record_event(self.pod, "Warning", "FailedMount", str(e))
        except ConfigError as e:
            self.message = str(e)
        except (ApiError, OSError) as e:
            self.message = str(e)
        # the kubelet's default waiting state: PodInitializing in a pod with
        # init containers (a native sidecar too), ContainerCreating otherwise
        reason = "PodInitializing" if self.inits else "ContainerCreating"
        for c in self.inits + self.containers:
            c.state = {"waiting": {"reason": reason}}
        self.mount_backoff = min(self.kubelet.max_backoff, self.mount_backoff * 2 if
                                 self.mount_backoff else self.kubelet.backoff)
        self.mount_retry_at = time.time() + self.mount_backoff

    def step(self):
        for c in self.inits + self.containers:
            self.show_pull_backoff(c)
        if not self.initialized:
            for c in self.inits:
                self.reap(c)
                if c.sidecar:
                    # started (and its startupProbe passed) before the next
                    if not self.run_container(c) or not c.startup_ok:
                        return
                    continue
                if c.done and c.state["terminated"]["exitCode"] == 0:
                    continue
                if c.done:
                    self.phase = "Failed"
                    self.stop_sidecars()
                    return
                if "running" in c.state:
                    return
                if self.restart_due(c):
                    self.start_container(c)
                return
            self.initialized = True
            for c in self.containers:
                c.state = {"waiting": {"reason": "PodInitializing"}}
        for c in self.inits:
            if c.sidecar:
                self.reap(c)
                self.run_container(c)
        for c in self.containers:
            self.reap(c)
            self.run_container(c)
        states = [c.state for c in self.containers]
        if all(c.done for c in self.containers):
            # the pod's phase is its containers', whatever the sidecars did
            codes = [s["terminated"]["exitCode"] for s in states]
            self.stop_sidecars()
            self.phase = "Succeeded" if not any(codes) else "Failed"
        elif any("running" in s for s in states) or any(c.started_once for c in self.containers):
            self.phase = "Running"

    def run_container(self, c):
        """Starts `c` when due and probes it; whether it is running."""
        if self.restart_due(c):
            self.start_container(c)
        if "running" not in c.state:
            return False
        if not c.startup_ok:
            r = self.probe(c, "startupProbe")
            if r is True:
                c.startup_ok = True
                c.ready = not c.spec.get("readinessProbe")
            elif r is False and c.proc:
                self.kubelet.signal(c.proc, signal.SIGKILL)
            return True
        r = self.probe(c, "readinessProbe")
        if r is not None:
            c.ready = r
        if self.probe(c, "livenessProbe") is False and c.proc:
            self.kubelet.signal(c.proc, signal.SIGKILL)
        return True

    def stop_sidecars(self):
        """Once the containers have ended (or an init container failed): the
        sidecars get SIGTERM in reverse order, SIGKILL after the pod's
        grace period, and are not restarted."""
        self.containers_done = True
        for c in self.inits:
            if c.sidecar and "running" not in c.state:
                c.done = True
                if "terminated" not in c.state:
                    c.state = c.last_state or c.state
        grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        self.stop_all(grace)

    def cleanup(self):
        for c in self.inits + self.containers:
            if c.proc and c.proc.poll() is None:
                self.kubelet.signal(c.proc, signal.SIGKILL)
        self.release_mount_points()
        self.kubelet.forget_events(self.uid)
        self.kubelet.forget(self)
