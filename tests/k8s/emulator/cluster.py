"""An emulated Kubernetes cluster for tests: the API server
(emulator.apiserver) and the kubelet (emulator.kubelet) as child processes,
the real `kubectl` pointed at them.

    from emulator.cluster import Cluster
    with Cluster(bin_dirs=["build/bin"]) as c:
        c.kubectl("apply", "-f", "deploy/crd/")
        c.kubectl("get", "tj", "-o", "json", json_output=True)
        c.client.get("/api/v1/namespaces/default/pods")   # direct REST calls
        env = c.env()   # KUBECONFIG etc. for a controller process

From a shell at the top of the repository (prints the kubeconfig paths,
runs until Ctrl-C):

    PYTHONPATH=tests/k8s python3 -m emulator.cluster --bin-dir build/bin [--dir DIR]

Files in c.dir: kubeconfig (admin), operator.kubeconfig (the service account
kubeps-system/kubeps-operator: RBAC applies to it when Cluster(rbac=True)),
kubelet.kubeconfig, apiserver.log, kubelet.log (with every container's output
when stream_logs=True), node/ (pod folders, container logs).
"""
import argparse
import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import client, kubeconfig, realism

HERE = os.path.dirname(os.path.abspath(__file__))
# the folder that holds this package: on the children's PYTHONPATH
PACKAGE_PARENT = os.path.dirname(HERE)
SOURCE_DIR = os.path.dirname(os.path.dirname(PACKAGE_PARENT))
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


def module_command(name):
    """The command line that runs module `name` of this package as a program."""
    return [sys.executable, "-m", "%s.%s" % (__package__, name)]


def child_env(**extra):
    """os.environ plus `extra`, with this package importable (PYTHONPATH)."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [PACKAGE_PARENT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class KubectlError(Exception):
    def __init__(self, args, result):
        self.result = result
        super().__init__("kubectl %s failed (exit %d):\n%s%s" % (
            " ".join(args), result.returncode, result.stdout, result.stderr))


def claim_octet(first):
    """(octet, lock): an even octet that no other running cluster on this
    machine holds, trying `first` on, and the open lock file that holds it
    until closed (or until this process ends, however it ends)."""
    # Under /tmp, not $TMPDIR: a test suite's run gives itself a $TMPDIR of
    # its own, and clusters of two runs must not share an octet.
    folder = "/tmp/kubeps-emulator-octets"
    os.makedirs(folder, exist_ok=True)
    for i in range(120):
        octet = 2 + 2 * ((first + i) % 120)
        lock = open(os.path.join(folder, "%d.lock" % octet), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return octet, lock
        except OSError:
            lock.close()
    raise RuntimeError("every emulated cluster's address range on this machine is taken")


class Cluster:
    _started = 0
    def __init__(self, bin_dirs=(), images=None, kubelet=True, rbac=False, directory=None,
                 event_window=1000, bookmark_interval=5.0, isolation=None, host_dns=None,
                 stream_logs=False, pass_env=(), backoff=1.0, keep=False, missing_images=(),
                 realism=False, rotate_tokens=True):
        self.bin_dirs = [os.path.abspath(d) for d in bin_dirs]
        self.images = images or {}
        self.with_kubelet = kubelet
        self.rbac = rbac
        self.event_window = event_window
        self.bookmark_interval = bookmark_interval
        # KUBEPS_EMULATOR_ISOLATION=none runs the pods without mount/UTS
        # namespaces, as on a machine where unshare(2) is not allowed
        self.isolation = isolation or os.environ.get("KUBEPS_EMULATOR_ISOLATION", "auto")
        self.host_dns = host_dns
        self.stream_logs = stream_logs
        self.pass_env = list(pass_env)
        # fnmatch patterns of images no registry has: the kubelet's pulls fail
        self.missing_images = list(missing_images)
        self.backoff = backoff
        # every realism setting on from the start (realism.py; the operator
        # suite asks for it under KUBEPS_EMULATOR_REALISM=all); rotate_tokens
        # False: the test rotates the operator's token itself
        self.realism = realism
        self.rotate_tokens = rotate_tokens
        self.token_rotator = None
        self.keep = keep or bool(os.environ.get("KUBEPS_EMULATOR_KEEP"))
        # Service IPs from 127.<octet>.0.0/16 and pod IPs from 127.<octet+1>.x.y,
        # a pair no other running cluster on this machine holds (start()
        # claims it), so clusters of tests running side by side never share
        # an address.
        self.octet = None
        self._octet_lock = None
        self._first_octet = os.getpid() + Cluster._started
        Cluster._started += 1
        self.own_dir = directory is None
        self.dir = directory or tempfile.mkdtemp(prefix="kubeps-k8s-")
        self.apiserver = None
        self.kubelet = None
        self.url = None
        self.client = None

    # -- lifecycle

    def start(self):
        if self._octet_lock is None:
            self.octet, self._octet_lock = claim_octet(self._first_octet)
        os.makedirs(self.dir, exist_ok=True)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.operator_kubeconfig = os.path.join(self.dir, "operator.kubeconfig")
        node_dir = os.path.join(self.dir, "node")
        cmd = module_command("apiserver") + [
            "--dir", self.dir, "--event-window", str(self.event_window),
            "--bookmark-interval", str(self.bookmark_interval),
            "--log-dir", os.path.join(node_dir, "logs"), "--exit-with-parent",
            "--service-cidr", "127.%d.0.0/16" % self.octet]
        if self.rbac:
            cmd.append("--rbac")
        self._apiserver_log = open(os.path.join(self.dir, "apiserver.log"), "ab")
        self.apiserver = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                          stderr=self._apiserver_log, start_new_session=True,
                                          env=child_env())
        line = self.apiserver.stdout.readline().decode()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError("the API server emulator did not start: %r (see %s)" % (
                line, os.path.join(self.dir, "apiserver.log")))
        self.url = line.split()[1]
        self.client = client.Client.from_kubeconfig(self.kubeconfig)
        if self.with_kubelet:
            self.start_kubelet()
        if self.realism:
            self.token_rotator = realism.turn_on(self, rotate_tokens=self.rotate_tokens)
        return self

    def start_kubelet(self):
        """Starts the node (start() does, unless Cluster(kubelet=False): a
        test that needs objects in place before the node first lists them)."""
        node_dir = os.path.join(self.dir, "node")
        cmd = module_command("kubelet") + [
            "--kubeconfig", os.path.join(self.dir, "kubelet.kubeconfig"),
            "--state-dir", node_dir, "--isolation", self.isolation,
            "--marker", os.path.basename(self.dir), "--backoff", str(self.backoff),
            "--exit-with-parent"]
        for d in self.bin_dirs:
            cmd += ["--bin-dir", d]
        for image, program in self.images.items():
            cmd += ["--image", "%s=%s" % (image, program)]
        for name in self.pass_env:
            cmd += ["--pass-env", name]
        for pattern in self.missing_images:
            cmd += ["--missing-image", pattern]
        if self.host_dns is True:
            cmd.append("--host-dns")
        elif self.host_dns is False:
            cmd.append("--no-host-dns")
        if self.stream_logs:
            cmd.append("--stream-logs")
        self._kubelet_log = open(os.path.join(self.dir, "kubelet.log"), "ab")
        kubelet_env = child_env(KUBEPS_EMULATOR_POD_OCTET=str(self.octet + 1))
        self.kubelet = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._kubelet_log,
                                        start_new_session=True, env=kubelet_env)
        line = self.kubelet.stdout.readline().decode()
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError("the kubelet emulator did not start (see %s)" %
                               os.path.join(self.dir, "kubelet.log"))

    def stop(self):
        if self.token_rotator is not None:
            self.token_rotator.stop()
            self.token_rotator = None
        self._procs = (self.kubelet, self.apiserver)
        for proc in self._procs:
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)   # the kubelet stops its pods, cleans /etc/hosts
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in self._procs:
            if proc is not None and proc.stdout:
                proc.stdout.close()
        for name in ("_apiserver_log", "_kubelet_log"):
            f = getattr(self, name, None)
            if f is not None:
                f.close()
        self.kubelet = self.apiserver = None
        if self._octet_lock is not None:
            self._octet_lock.close()   # the addresses are free again
            self._octet_lock = None
        if self.own_dir and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- using it

    def env(self, operator=False):
        """Environment for a process that talks to the cluster."""
        env = dict(os.environ)
        env["KUBECONFIG"] = self.operator_kubeconfig if operator else self.kubeconfig
        home = os.path.join(self.dir, "home")
        os.makedirs(home, exist_ok=True)
        env["HOME"] = home                                   # kubectl's caches stay here
        env["KUBECACHEDIR"] = os.path.join(home, "cache")
        return env

    def kubectl(self, *args, check=True, json_output=False, input=None, timeout=60,
                operator=False):
        """Runs the real kubectl; returns the CompletedProcess (or the parsed
        JSON of stdout when json_output)."""
        result = subprocess.run([KUBECTL, *args], env=self.env(operator), input=input,
                                capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise KubectlError(args, result)
        if json_output:
            return json.loads(result.stdout)
        return result

    def settings(self, watch_delay=None, gc_delay=None, request_log_size=None, throttle=None):
        """Makes the API server less kind, as a real one under load is: watch
        events of each resource in `watch_delay` ({plural: seconds}) arrive
        that long after the write's response; dependents are collected
        `gc_delay` seconds after their owner; `throttle` ({"user", "fraction",
        "burst", "retryAfterSeconds"}, {} for off) answers that user's
        requests 429 Too Many Requests with a Retry-After, as API Priority
        and Fairness does. `request_log_size`: how many requests requests()
        keeps (2000 by default)."""
        body = {}
        if request_log_size is not None:
            body["requestLogSize"] = request_log_size
        if throttle is not None:
            body["throttle"] = throttle
        if watch_delay is not None:
            body["watchDelay"] = watch_delay
        if gc_delay is not None:
            body["gcDelay"] = gc_delay
        return self.client.post("/_emulator/settings", body)

    def rotate_operator_token(self, expire_old=True, write_file=True):
        """Issues the operator's service account a new token, as the kubelet
        does for a projected token: the new one is written over the token
        file (unless write_file is False: a kubelet that stopped refreshing
        it), and the old one is refused from now on when expire_old."""
        path = self.operator_token_path()
        old = self.operator_token()
        new = base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")
        user, groups = kubeconfig.OPERATOR_IDENTITY
        self.client.post("/_emulator/token", {"token": new, "user": user, "groups": groups})
        if write_file:
            kubeconfig.write_token_file(path, new)
        if expire_old:
            self.expire_token(old)
        return new

    def operator_token_path(self):
        return os.path.join(self.dir, "operator-token", "token")

    def operator_token(self):
        with open(self.operator_token_path()) as f:
            return f.read().strip()

    def expire_token(self, token):
        """The API server refuses `token` (401) from now on."""
        self.client.post("/_emulator/expire-token", {"token": token})

    def node_not_ready(self, evict_after=300, node="kubeps-node"):
        """The node stops reporting, as when its machine dies or the network
        cuts it off: Ready goes Unknown, the unreachable taints are added,
        the kubelet can reach the API server no more (its processes run on),
        and `evict_after` seconds later its pods are deleted, and stay
        Terminating (emulator.apiserver.node_lifecycle)."""
        return self.hook("node-not-ready", node=node, evictAfterSeconds=evict_after)

    def node_ready(self, node="kubeps-node"):
        """The node is back: its kubelet reports again and lists its pods."""
        return self.hook("node-ready", node=node)

    def reboot_node(self):
        """The node's machine reboots, with the kubelet's graceful node
        shutdown: its pods end Failed with the condition DisruptionTarget
        (TerminationByKubelet), not deleted, and the node is back a moment
        later (emulator.kubelet's Kubelet.reboot)."""
        self.kubelet.send_signal(signal.SIGUSR1)

    def hook(self, name, **query):
        path = "/_emulator/" + name
        if query:
            path += "?" + "&".join("%s=%s" % kv for kv in query.items())
        return self.client.post(path, {})

    def wait_for(self, predicate, timeout=30, interval=0.1, what="condition"):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = predicate()
            except client.ApiError as e:
                last = e
                if e.code != 404:
                    raise
            except (KeyError, IndexError, TypeError) as e:   # not there yet
                last = e
            if last and not isinstance(last, Exception):
                return last
            time.sleep(interval)
        raise AssertionError("timed out after %gs waiting for %s (last: %r)" % (
            timeout, what, last))

    def pod(self, name, namespace="default"):
        return self.client.get("/api/v1/namespaces/%s/pods/%s" % (namespace, name))

    def requests(self):
        return self.client.get("/_emulator/requests")

    def watches(self):
        return self.client.get("/_emulator/watches")


def main():
    p = argparse.ArgumentParser(prog="python3 -m emulator.cluster",
                                description="runs an emulated cluster until interrupted")
    p.add_argument("--dir", default=None)
    p.add_argument("--bin-dir", action="append", default=[])
    p.add_argument("--rbac", action="store_true")
    p.add_argument("--no-kubelet", action="store_true")
    p.add_argument("--stream-logs", action="store_true")
    p.add_argument("--apply", action="append", default=[],
                   help="kubectl apply -f this once the cluster is up (repeatable)")
    args = p.parse_args()
    c = Cluster(bin_dirs=args.bin_dir, rbac=args.rbac, kubelet=not args.no_kubelet,
                directory=args.dir, stream_logs=args.stream_logs, keep=True)
    c.start()
    for path in args.apply:
        print(c.kubectl("apply", "-f", path).stdout, end="")
    print("export KUBECONFIG=%s   # admin" % c.kubeconfig)
    print("# operator (service account kubeps-system/kubeps-operator): %s" %
          c.operator_kubeconfig)
    print("# files: %s" % c.dir, flush=True)
    try:
        signal.sigwait([signal.SIGINT, signal.SIGTERM])
    finally:
        c.stop()


if __name__ == "__main__":
    main()
