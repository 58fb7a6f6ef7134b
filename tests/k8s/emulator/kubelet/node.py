"""The node: the Kubelet object that registers the Node, runs the informers,
owns the pod workers, the processes they started and the pod IPs, and
stops and cleans up all of it on exit, with the host's mount points that its
pods claimed (mount_points.py).

Pod lifecycle is in pod_worker.py; what the node learns from the API server
in informers.py; networking and DNS in networking.py and dns.py;
NetworkPolicy in policy_enforcer.py.
"""
import os
import signal
import sys
import threading
import time
import urllib.parse

from ..client import ApiError, Client
from ..clock import now_iso
from . import mount_points
from .dns import ClusterDns
from .events import EventRecorder
from .informers import Informers
from .log import log
from .networking import Networking
from .policy_enforcer import PolicyEnforcer
from .runtime import unshare_works
from .scheduling import Scheduler

NOT_READY = "node.kubernetes.io/not-ready"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."


class Kubelet(Informers, Scheduler, Networking, ClusterDns, EventRecorder, PolicyEnforcer):
    """One emulated node (--node-name) of the cluster."""

    def __init__(self, args):
        self.args = args
        self.client = Client.from_kubeconfig(args.kubeconfig)
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
        self.missing_images = list(args.missing_image)
        self.backoff = args.backoff
        self.max_backoff = args.max_backoff
        self.volume_sync = args.volume_sync
        self.stream_logs = args.stream_logs
        if args.isolation == "auto":
            self.isolation = "namespace" if unshare_works() else "none"
        else:
            self.isolation = args.isolation
        self.host_dns = args.host_dns if args.host_dns is not None else self.isolation == "none"
        self.marker = "kubeps-emulator %s" % (args.marker or os.getpid())
        self.lock = threading.RLock()
        self.shutting_down = False  # reboot(): pods bound meanwhile are refused (NodeShutdown)
        self.workers = {}          # uid -> PodWorker
        self.unscheduled = {}      # uid -> pod no node can take (scheduling.py)
        self.events = {}           # (pod uid, reason, message) -> (Event name, count)
        self.pods = {}             # uid -> pod object (bound to this node)
        self.services = {}         # (ns, name) -> service
        self.ips = {}              # uid -> ip
        self.free_ips = []
        self.next_ip = 2
        # Each node emulator takes its own 127.X.0.0/16 for pod IPs, so two
        # emulated clusters on one machine (parallel tests) never collide.
        self.pod_octet = int(os.environ.get("KUBEPS_EMULATOR_POD_OCTET", "0")) or \
            (2 + os.getpid() % 240)
        self.procs = set()
        self.proxies = {}          # (ip, port) -> ServiceProxy
        self.dns_dirty = threading.Event()
        self.stopping = False
        self.init_network_policy()

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

    def forget(self, worker):
        """Drops a worker whose pod is gone; its IP goes back to the pool."""
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

    def set_ready(self, ready, message):
        """The node's Ready condition, and the node lifecycle controller's
        not-ready NoSchedule taint while it is not ready."""
        path = "/api/v1/nodes/%s" % self.node_name
        node = self.client.get(path)
        t = now_iso()
        conditions = [c for c in node.get("status", {}).get("conditions") or []
                      if c.get("type") != "Ready"]
        conditions.append({"type": "Ready", "status": "True" if ready else "False",
                           "reason": "KubeletReady" if ready else "KubeletNotReady",
                           "message": message, "lastHeartbeatTime": t, "lastTransitionTime": t})
        self.client.patch(path + "/status", {"status": {"conditions": conditions}})
        taints = [x for x in node.get("spec", {}).get("taints") or [] if x.get("key") != NOT_READY]
        if not ready:
            taints.append({"key": NOT_READY, "effect": "NoSchedule", "timeAdded": t})
        self.client.patch(path, {"spec": {"taints": taints}})

    def reboot(self):
        """The machine shuts down and boots again (SIGUSR1), with the
        kubelet's graceful node shutdown on: the node turns NotReady and
        takes no pod; every pod is stopped within min(its grace period,
        --shutdown-grace-period) and ends Failed, reason Terminated, with the
        condition DisruptionTarget (TerminationByKubelet); then the node is
        Ready again. The ended pods stay Failed: no kubelet starts a pod of
        restartPolicy Never again after a boot. A pod bound to the node
        meanwhile (by its nodeName; the scheduler keeps off the taint) is
        refused, reason NodeShutdown."""
        log("node %s shutting down" % self.node_name)
        self.shutting_down = True
        self.set_ready(False, "node is shutting down")
        grace = self.args.shutdown_grace_period
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.shut_down_for_node(grace, SHUTDOWN_MESSAGE)
        deadline = time.time() + grace + 10
        while time.time() < deadline and any(
                not w.gone and w.phase not in ("Succeeded", "Failed") for w in workers):
            time.sleep(0.1)
        time.sleep(1)   # the machine is down
        self.shutting_down = False
        self.set_ready(True, "kubelet is posting ready status")
        log("node %s booted" % self.node_name)

    # -- main

    def run(self):
        log("node %s, isolation %s, host /etc/hosts entries %s" % (
            self.node_name, self.isolation, "on" if self.host_dns else "off"))
        self.register_node()
        self.start_network_policy()
        threading.Thread(target=self.informer, args=("/api/v1/services", self.service_event,
                                                     self.sync_services), daemon=True).start()
        threading.Thread(target=self.dns_loop, daemon=True).start()
        self.start_scheduler()
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
        # The pods still here: those gone released theirs as they went.
        with mount_points.held():
            for w in workers:
                mount_points.release(w.uid)
            for link in sorted({link for w in workers for link in w.links}, key=len,
                               reverse=True):
                mount_points.remove_if_unused(link)
        if self.host_dns:
            self.write_host_hosts(None)
        for p in list(self.proxies.values()):
            p.close()
        self.stop_network_policy()
