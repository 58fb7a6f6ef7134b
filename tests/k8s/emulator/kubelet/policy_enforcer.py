"""NetworkPolicy enforcement, the part of a CNI plugin's agent (calico-node,
cilium-agent) that a node runs: it watches NetworkPolicies, Namespaces,
Pods and Services and keeps one nftables table in step with them
(network_policy.py says what the table holds).

Why cgroups: every pod shares the host's network namespace, so a packet's
source address cannot tell which pod sent it (a loopback connection comes
from 127.0.0.1). Each pod's processes are put in a net_cls cgroup of their
own instead, with a classid unique to the pod, before the container's
program is exec'd (runtime.py); nftables' `meta cgroup` matches that classid
in the output hook, which a loopback connection's first packet goes through
with the client's socket. Classids are MAJOR:MINOR: MAJOR is claimed per
kubelet (several emulated clusters share a machine), MINOR counts pods.

Layout: /sys/fs/cgroup/net_cls (mounted when it is not) /kubeps-emu-MARKER/
pod-UID; table `inet kubeps_emu_MARKER`, replaced in one `nft -f`
transaction at every change, deleted on exit; a stale one of the same name
(a killed kubelet) is removed at start, and so is any other kubeps_emu_
table that filters this node's pod addresses.

Where enforcement cannot run (not root, no nft, no net_cls), the kubelet
says why once and runs without it. Either way the Node carries the
annotation kubeps.io/network-policy: "enforced" or "unavailable: REASON",
which tests read to skip.

A mixin of Kubelet (node.py).
"""
import fcntl
import os
import re
import shutil
import subprocess
import threading

from .log import log
from .network_policy import PolicyState, render

ANNOTATION = "kubeps.io/network-policy"
NET_CLS = "/sys/fs/cgroup/net_cls"
PREFIX = "kubeps-emu-"


def net_cls_mount():
    """Where the net_cls hierarchy (cgroup v1) is mounted, mounting it when
    it is not; raises OSError saying why it cannot be."""
    with open("/proc/self/mounts") as f:
        for line in f:
            _, where, fstype, options = line.split()[:4]
            if fstype == "cgroup" and "net_cls" in options.split(","):
                return where.replace("\\040", " ")
    with open("/proc/self/mounts") as f:
        v2 = any(line.split()[1] == "/sys/fs/cgroup" and line.split()[2] == "cgroup2"
                 for line in f)
    # on a cgroup2 /sys/fs/cgroup a mkdir would make a cgroup, not a mount point
    where = "/run/kubeps-emulator/net_cls" if v2 else NET_CLS
    os.makedirs(where, exist_ok=True)
    r = subprocess.run(["mount", "-t", "cgroup", "-o", "net_cls", "net_cls", where],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError("cannot mount the net_cls cgroup on %s: %s" % (where, r.stderr.strip()))
    return where


class PolicyEnforcer:
    def init_network_policy(self):
        self.policy_dirty = threading.Event()
        self.policy_cond = threading.Condition()
        self.policy_enforced = False
        self.namespace_labels = {}     # name -> labels
        self.network_policies = {}     # (ns, name) -> NetworkPolicy
        self.pod_classids = {}         # pod uid -> classid
        self.classid_wanted = 0        # pod classids handed out ...
        self.classid_applied = 0       # ... and how many of them the table knows
        self.next_minor = 1
        marker = re.sub(r"[^A-Za-z0-9_]", "_", str(self.args.marker or os.getpid()))
        self.nft_table = "kubeps_emu_" + marker
        self.cgroup_dir = None

    def start_network_policy(self):
        try:
            reason = self.setup_enforcement()
        except OSError as e:
            reason = str(e)
        self.policy_enforced = reason is None
        value = "enforced" if reason is None else "unavailable: " + reason
        log("NetworkPolicy: " + value)
        self.client.patch("/api/v1/nodes/%s" % self.node_name,
                          {"metadata": {"annotations": {ANNOTATION: value}}})
        if not self.policy_enforced:
            return
        for path, on_event, on_sync in (
                ("/api/v1/namespaces", self.namespace_event, self.sync_namespaces),
                ("/apis/networking.k8s.io/v1/networkpolicies", self.policy_event,
                 self.sync_policies)):
            threading.Thread(target=self.informer, args=(path, on_event, on_sync),
                             daemon=True).start()
        threading.Thread(target=self.policy_loop, daemon=True).start()

    def setup_enforcement(self):
        """None when enforcement runs, else why not."""
        if os.geteuid() != 0:
            return "not root (nftables and cgroups need it)"
        if not shutil.which("nft"):
            return "no nft program (Debian package nftables)"
        root = net_cls_mount()
        fd = os.open(root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)   # claims of several kubelets, one at a time
            self.cgroup_dir = os.path.join(root, PREFIX + self.nft_table[len("kubeps_emu_"):])
            self.remove_cgroups(self.cgroup_dir)
            taken = set()
            for name in os.listdir(root):
                if name.startswith(PREFIX) and os.path.join(root, name) != self.cgroup_dir:
                    taken.add(self.read_classid(os.path.join(root, name)) >> 16)
            major = 0x100 + self.pod_octet
            while major in taken or major > 0xffff:
                major = major + 1 if major < 0xffff else 0x100
            os.makedirs(self.cgroup_dir, exist_ok=True)
            self.write_classid(self.cgroup_dir, major << 16)   # the claim
            self.classid_major = major
        finally:
            os.close(fd)
        self.remove_stale_tables()
        err = self.apply_table(render(self.nft_table, PolicyState([], {}, [], [], [])))
        return err and "nft refused the table: " + err

    # -- cgroups

    @staticmethod
    def read_classid(path):
        try:
            with open(os.path.join(path, "net_cls.classid")) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    @staticmethod
    def write_classid(path, classid):
        with open(os.path.join(path, "net_cls.classid"), "w") as f:
            f.write("0x%08x" % classid)

    @staticmethod
    def remove_cgroups(path):
        """Removes a kubelet's cgroup folder and its pods' (a cgroup with
        processes left cannot go: it stays, and so does its parent)."""
        if not os.path.isdir(path):
            return
        for name in os.listdir(path):
            if os.path.isdir(os.path.join(path, name)):
                try:
                    os.rmdir(os.path.join(path, name))
                except OSError as e:
                    log("cgroup %s/%s: %s" % (path, name, e))
        try:
            os.rmdir(path)
        except OSError:
            pass

    def pod_cgroup(self, pod):
        """The cgroup.procs file a container of `pod` joins before its
        program runs, once the table knows the pod; None where nothing is
        enforced, and for hostNetwork pods (node traffic, as on a CNI)."""
        if not self.policy_enforced or (pod.get("spec") or {}).get("hostNetwork"):
            return None
        uid = pod["metadata"]["uid"]
        with self.lock:
            classid = self.pod_classids.get(uid)
            if classid is None:
                classid = (self.classid_major << 16) | self.next_minor
                self.next_minor = self.next_minor % 0xffff + 1
                self.pod_classids[uid] = classid
        path = os.path.join(self.cgroup_dir, "pod-" + uid)
        os.makedirs(path, exist_ok=True)
        if self.read_classid(path) != classid:
            self.write_classid(path, classid)
        # A CNI sets up the pod's network before its containers start: wait
        # (a little) until the table knows this pod as a source.
        with self.policy_cond:
            self.classid_wanted += 1
            wanted = self.classid_wanted
            self.policy_dirty.set()
            self.policy_cond.wait_for(lambda: self.classid_applied >= wanted or self.stopping,
                                      timeout=5)
        return os.path.join(path, "cgroup.procs")

    def collect_cgroups(self):
        """Removes the cgroups of pods that are gone from the node."""
        with self.lock:
            gone = [uid for uid in self.pod_classids if uid not in self.workers]
        for uid in gone:
            try:
                os.rmdir(os.path.join(self.cgroup_dir, "pod-" + uid))
            except FileNotFoundError:
                pass
            except OSError:
                continue   # processes still in it: next time
            with self.lock:
                self.pod_classids.pop(uid, None)

    # -- what is watched

    def namespace_event(self, etype, ns):
        with self.lock:
            if etype == "DELETED":
                self.namespace_labels.pop(ns["metadata"]["name"], None)
            else:
                self.namespace_labels[ns["metadata"]["name"]] = ns["metadata"].get("labels") or {}
        self.policy_dirty.set()

    def sync_namespaces(self, items):
        with self.lock:
            self.namespace_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {}
                                     for n in items}
        self.policy_dirty.set()

    def policy_event(self, etype, pol):
        key = (pol["metadata"]["namespace"], pol["metadata"]["name"])
        with self.lock:
            if etype == "DELETED":
                self.network_policies.pop(key, None)
            else:
                self.network_policies[key] = pol
        self.policy_dirty.set()

    def sync_policies(self, items):
        with self.lock:
            self.network_policies = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                                     for p in items}
        self.policy_dirty.set()

    # -- the table

    def policy_state(self):
        with self.lock:
            ready = {}
            pods = []
            for uid, pod in self.pods.items():
                w = self.workers.get(uid)
                if w is None:
                    continue
                pods.append((pod, self.ips.get(uid), self.pod_classids.get(uid)))
                ready[uid] = w.phase == "Running" and bool(w.containers) and \
                    all(c.ready for c in w.containers) and not w.deleting
            return PolicyState(pods, dict(self.namespace_labels),
                               list(self.network_policies.values()),
                               list(self.services.values()), self.pod_classids.values(),
                               ready=lambda pod: ready.get(pod["metadata"]["uid"], False))

    def policy_loop(self):
        last = None
        while not self.stopping:
            self.policy_dirty.wait(0.5)
            self.policy_dirty.clear()
            with self.policy_cond:
                wanted = self.classid_wanted
            try:
                self.collect_cgroups()
                text = render(self.nft_table, self.policy_state())
                err = self.apply_table(text) if text != last else None
            except Exception as e:  # keep enforcing
                err = repr(e)
            if err:
                log("NetworkPolicy table: %s" % err)
                continue
            last = text
            with self.policy_cond:
                self.classid_applied = max(self.classid_applied, wanted)
                self.policy_cond.notify_all()

    def apply_table(self, text):
        """Replaces the table in one transaction; the error, or None."""
        with self.policy_cond:
            if self.stopping and text is not None:
                return None
            t = self.nft_table
            script = "table inet %s {}\ndelete table inet %s\n%s" % (t, t, text or "")
            r = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True)
            return r.stderr.strip() or "nft exit %d" % r.returncode if r.returncode else None

    def remove_stale_tables(self):
        r = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True)
        mine = "127.%d." % self.pod_octet
        for line in r.stdout.splitlines():
            name = line.split()[-1] if line.startswith("table inet ") else ""
            if not name.startswith("kubeps_emu_") or name == self.nft_table:
                continue
            body = subprocess.run(["nft", "list", "table", "inet", name],
                                  capture_output=True, text=True).stdout
            if ("ip daddr " + mine) in body:
                log("removing table inet %s: it filters this node's pod addresses" % name)
                subprocess.run(["nft", "delete", "table", "inet", name], capture_output=True)

    def stop_network_policy(self):
        """On exit, after the pods' processes are gone: the table and cgroups go."""
        if not self.policy_enforced:
            return
        with self.policy_cond:
            self.policy_cond.notify_all()
        self.apply_table(None)
        self.remove_cgroups(self.cgroup_dir)
