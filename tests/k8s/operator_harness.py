"""Helpers for the kubeps-operator tests (test_operator.py): the operator as a
child process of the test, TrainingJob manifests, and small queries against
the emulated cluster (emulator/cluster.py).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import SOURCE_DIR  # noqa: E402
from emulator.client import ApiError  # noqa: E402

BIN = os.path.abspath(os.environ.get("KUBEPS_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin")))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
DATASET = "/usr/share/datasets/fashion-mnist"
TJ = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs"
ALL_TJ = "/apis/kubeps.io/v1alpha1/trainingjobs"
DELETED = "(deleted)"   # the phase PhaseHistory records for a job's deletion
PODS = "/api/v1/namespaces/default/pods"
OPERATOR_USER = "system:serviceaccount:kubeps-system:kubeps-operator"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kubeps-system/leases/kubeps-operator"


class Operator:
    """One kubeps-operator process talking to `cluster` as its service account."""

    def __init__(self, cluster, *args, name="operator"):
        self.cluster = cluster
        self.name = name
        self.log_path = os.path.join(cluster.dir, name + ".log")
        self._log = open(self.log_path, "ab")
        cmd = [os.path.join(BIN, "kubeps-operator"), "--kubeconfig=" + cluster.operator_kubeconfig,
               "--metrics-port=0", *args]
        self.proc = subprocess.Popen(cmd, env=cluster.env(operator=True), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            m = re.search(r"/readyz on :(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise AssertionError("%s did not report its metrics port:\n%s" % (name, self.log()))

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def http(self, path):
        """(code, body) of GET http://127.0.0.1:PORT/path on the operator."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self):
        code, text = self.http("/metrics")
        assert code == 200, (code, text)
        return parse_metrics(text)

    def signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout=20):
        return self.proc.wait(timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def metric(metrics, name, **labels):
    """The sum of every series of `name` whose labels include `labels`."""
    want = set(labels.items())
    values = [v for (n, ls), v in metrics.items() if n == name and want <= set(ls)]
    return sum(values) if values else None


def training_job(name, epochs=1, max_steps=None, restart_policy=None, backoff_limit=None,
                 clean_pod_policy=None, active_deadline=None, suspend=None, ttl=None,
                 model="mlp", workers=2, servers=2, batch_size=64):
    """A TrainingJob on the real data set. `max_steps` caps the workers' steps
    through the worker pod template's env (KUBEPS_MAX_STEPS), per job."""
    run_policy = {}
    for key, value in (("restartPolicy", restart_policy), ("backoffLimit", backoff_limit),
                       ("cleanPodPolicy", clean_pod_policy),
                       ("activeDeadlineSeconds", active_deadline), ("suspend", suspend),
                       ("ttlSecondsAfterFinished", ttl)):
        if value is not None:
            run_policy[key] = value
    worker = {"replicas": workers}
    if max_steps is not None:
        worker["template"] = {"spec": {"containers": [{
            "name": "worker", "env": [{"name": "KUBEPS_MAX_STEPS", "value": str(max_steps)}]}]}}
    spec = {"mode": "sync", "model": model, "dataset": {"path": DATASET},
            "optimizer": {"name": "adam", "learningRate": 0.001}, "batchSize": batch_size,
            "epochs": epochs, "replicaSpecs": {"ps": {"replicas": servers}, "worker": worker}}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def slowed_down(job, most_ms=50):
    """Has `job`'s servers hold each request up to `most_ms` ms
    (KUBEPS_FAULTS' delay: a slow network), so that the job trains on a
    small share of a core, at much the same pace on any machine: for a test
    whose job only has to run while the test waits on the cluster."""
    spec = job["spec"]["replicaSpecs"]["ps"].setdefault("template", {}).setdefault("spec", {})
    containers = spec.setdefault("containers", [])
    server = next((c for c in containers if c["name"] == "server"), None)
    if server is None:
        server = {"name": "server"}
        containers.append(server)
    server.setdefault("env", []).append(
        {"name": "KUBEPS_FAULTS", "value": "delay=1,delay_max_ms=%d" % most_ms})
    return job


def checkpoints_on_host(test, job, interval_steps=50):
    """Gives `job` checkpoints in a fresh folder mounted into every server as a
    hostPath: a volume that outlives the pod, as a PersistentVolumeClaim does
    on a real cluster. The folder goes when `test` ends."""
    folder = tempfile.mkdtemp(prefix="kubeps-ckpt-")
    test.addCleanup(shutil.rmtree, folder, True)
    job["spec"]["checkpoint"] = {"path": folder, "intervalSteps": interval_steps}
    job["spec"]["replicaSpecs"]["ps"]["template"] = {"spec": {
        "volumes": [{"name": "checkpoints", "hostPath": {"path": folder}}],
        "containers": [{"name": "server", "volumeMounts": [
            {"name": "checkpoints", "mountPath": folder}]}]}}
    return folder


def apply(cluster, obj):
    return cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def get_job(cluster, name):
    return cluster.client.get(TJ + "/" + name)


def phase_of(cluster, name):
    try:
        return get_job(cluster, name).get("status", {}).get("phase")
    except ApiError as e:
        if e.code == 404:
            return None
        raise


class PhaseHistory:
    """Every phase each TrainingJob of `cluster` has had, seen through a watch
    as a controller sees it: list, watch from the list's resourceVersion, and
    list again when the stream is cut or answers 410 Gone. A test waits on
    this history, not on a poll: a poll can miss a phase the job held only
    briefly (with ttlSecondsAfterFinished=1 a job is Succeeded for about a
    second, less than one poll on a loaded machine)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self._changed = threading.Condition()
        self._seen = {}   # (namespace, name) -> [(uid, phase or DELETED, job)]
        self._ready = threading.Event()
        threading.Thread(target=self._follow, daemon=True).start()
        if not self._ready.wait(timeout=60):
            raise AssertionError("could not list the TrainingJobs to follow their phases")

    def _record(self, job, deleted=False):
        meta = job["metadata"]
        phase = DELETED if deleted else job.get("status", {}).get("phase")
        with self._changed:
            history = self._seen.setdefault((meta.get("namespace"), meta["name"]), [])
            if not history or history[-1][:2] != (meta["uid"], phase) or deleted:
                history.append((meta["uid"], phase, job))
            elif history[-1][2]["metadata"]["resourceVersion"] != meta["resourceVersion"]:
                history[-1] = (meta["uid"], phase, job)   # the same phase, newer counts
            self._changed.notify_all()

    def _follow(self):
        client, version = self.cluster.client, None
        while self.cluster.apiserver is not None:   # until the cluster stops
            try:
                if version is None:
                    listing = client.get(ALL_TJ)
                    for job in listing["items"]:
                        self._record(job)
                    version = listing["metadata"]["resourceVersion"]
                    self._ready.set()
                for event in client.watch(ALL_TJ + "?watch=1&resourceVersion=" + version):
                    if event["type"] == "ERROR":   # 410 Gone: the history was compacted
                        version = None
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self._record(event["object"], deleted=event["type"] == "DELETED")
            except ApiError as e:
                if e.code == 410:
                    version = None
                else:
                    time.sleep(0.2)
            except (OSError, ValueError):   # the stream cut, or the cluster stopping
                time.sleep(0.2)

    def phases(self, name, uid, namespace="default"):
        """The phases the job `name` with `uid` has had so far, in order."""
        with self._changed:
            return [p for (u, p, _) in self._seen.get((namespace, name), []) if u == uid]

    def wait(self, name, phases, timeout, namespace="default"):
        """The job `name` as it was when it first held one of `phases` (as it is
        now if it still holds it): of the job now under that name, or, if it is
        gone already, of the last one by that name."""
        try:
            uid = self.cluster.client.get(
                "/apis/kubeps.io/v1alpha1/namespaces/%s/trainingjobs/%s" % (namespace, name)
            )["metadata"]["uid"]
        except ApiError as e:
            if e.code != 404:
                raise
            uid = None
        deadline = time.time() + timeout
        with self._changed:
            while True:
                history = self._seen.get((namespace, name), [])
                mine = uid or (history[-1][0] if history else None)
                matches = [job for (u, phase, job) in history if u == mine and phase in phases]
                if matches:
                    break
                left = deadline - time.time()
                if left <= 0:
                    seen = [phase for (u, phase, _) in history if u == mine]
                    raise AssertionError("%s did not reach phase %s within %ss (phases seen: %s)" %
                                         (name, "/".join(phases), timeout, seen))
                self._changed.wait(min(left, 1.0))
        try:
            now = get_job(self.cluster, name) if namespace == "default" else None
        except ApiError:
            now = None
        if now and now["metadata"]["uid"] == mine and now.get("status", {}).get("phase") in phases:
            return now
        return matches[0]


def phase_history(cluster):
    """The cluster's PhaseHistory, started on first use."""
    if getattr(cluster, "phase_history", None) is None:
        cluster.phase_history = PhaseHistory(cluster)
    return cluster.phase_history


def wait_phase(cluster, name, phases, timeout=60):
    """Waits until the job has been in one of `phases`; returns the job."""
    if isinstance(phases, str):
        phases = (phases,)
    return phase_history(cluster).wait(name, phases, timeout)


def job_pods(cluster, name):
    return cluster.client.get(PODS + "?labelSelector=kubeps.io%2Fjob-name%3D" + name)["items"]


def live(pod):
    """A pod that runs or may still run: not finished and not being deleted."""
    return (pod.get("status", {}).get("phase") not in ("Succeeded", "Failed") and
            not pod["metadata"].get("deletionTimestamp"))


def replica_key(pod):
    labels = pod["metadata"]["labels"]
    return labels["kubeps.io/replica-type"], labels["kubeps.io/replica-index"]


def live_pod(cluster, job, role, index=0):
    """The live pod of replica `role` `index` of `job`, or None."""
    for pod in job_pods(cluster, job):
        if replica_key(pod) == (role, str(index)) and live(pod):
            return pod
    return None


def replace_pod(cluster, job, role, index=0, timeout=60):
    """Deletes the live pod of replica `role` `index` of `job` as an eviction
    or a drain does (SIGTERM, then its grace period) and waits for the pod
    the operator makes in its place to have an IP. Returns (old, new); new is
    None when none came within `timeout`."""
    old = live_pod(cluster, job, role, index)
    if old is None:
        return None, None
    cluster.kubectl("delete", "pod", old["metadata"]["name"], "--wait=false")

    def replacement():
        pod = live_pod(cluster, job, role, index)
        if pod and pod["metadata"]["uid"] != old["metadata"]["uid"] and \
                pod.get("status", {}).get("podIP"):
            return pod
        return None
    try:
        return old, cluster.wait_for(replacement, timeout=timeout,
                                     what="a new %s pod of %s" % (role, job))
    except AssertionError:
        return old, None


def events_of(cluster, name, uid=None):
    items = cluster.client.get("/api/v1/namespaces/default/events")["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == name and
            e.get("involvedObject", {}).get("kind") == "TrainingJob" and
            (uid is None or e["involvedObject"].get("uid") == uid)]


def condition(job, ctype):
    for c in job.get("status", {}).get("conditions", []):
        if c.get("type") == ctype:
            return c
    return None


def replica_pids(cluster, job_name, node_id):
    """Process ids of the replica `node_id` (e.g. "worker-0") of job `job_name`
    on `cluster`: the processes whose environment has KUBEPS_NODE_ID=node_id,
    the replica's hostname and the cluster's API server port (another test's
    cluster may run a job of the same name beside this one). Not the stand-in
    kubelet's shell that sets a container up before it execs the program, nor
    that shell's mount and hostname: they carry the pod's environment too, with
    the kubelet's KUBEPS_EMU_ variables, which the shell unsets before its exec
    (a real runtime sets a container up outside it)."""
    want = {b"KUBEPS_NODE_ID=" + node_id.encode(),
            b"HOSTNAME=" + ("%s-%s" % (job_name, node_id)).encode(),
            b"KUBERNETES_SERVICE_PORT=" + cluster.url.rsplit(":", 1)[1].strip("/").encode()}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if want <= env and not any(e.startswith(b"KUBEPS_EMU_") for e in env):
            pids.append(int(entry))
    return pids


def kubelet_output(cluster):
    with open(os.path.join(cluster.dir, "kubelet.log"), "rb") as f:
        return f.read().decode(errors="replace")
