"""Helpers for the integration tests: write TrainingJob manifests, run
`kubeps` as a user would, and read what it prints and exports.

Only the Python standard library is used, so the tests run with Debian's
python3 and nothing else.
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.environ.get("KUBEPS_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
KUBEPS = os.path.join(BIN_DIR, "kubeps")
DATASET = "/usr/share/datasets/fashion-mnist"
# kubeps run pushes after the backward pass where the workers fill every core
# (as here); on a cluster the gradients go during it. Runs that test recovery
# set this, every layer in a request of its own, so that a failure meets as
# many exchanges in flight as can be.
OVERLAPPED = {"KUBEPS_OVERLAP": "1", "KUBEPS_BUCKET_BYTES": "0"}
# Every process holds each request it receives up to 50 ms (KUBEPS_FAULTS'
# delay: a slow network): the 2 x 2 MLP job then trains some 27 steps a
# second on a small share of a core, at much the same pace on any machine.
# For a test whose job only has to run while the test waits for something
# else.
SLOW_NETWORK = {"KUBEPS_FAULTS": "delay=1,delay_max_ms=50"}
# Up to 10 ms: some 100 steps a second. For a test that acts on a job of a
# few hundred steps in its second half (a kill, a scrape), so that a test
# process slow to run on a loaded machine still has seconds to do it.
SLIGHTLY_SLOW_NETWORK = {"KUBEPS_FAULTS": "delay=1,delay_max_ms=10"}
# Up to 4 ms, for a job whose replicas a test kills mid-run. Unslowed, the
# 2 x 2 MLP job of those tests trains some 750 steps a second here, and a kill
# at step 250 of 468 had 0.3 s to land before the job ended; at some 200 steps
# a second it has 1 s, each run costing 1.5 s more (up to 10 ms: 2 s, and
# 3.4 s more a run, which the suite's time cannot afford over all of them).
PACED_FOR_KILLS = {"KUBEPS_FAULTS": "delay=1,delay_max_ms=4"}

PROGRESS = re.compile(
    r"^\[worker (\d+)\] epoch (\d+)/(\d+) step (\d+)/(\d+) total_steps (\d+) "
    r"steps/sec ([\d.]+) samples/sec ([\d.]+) loss ([\d.]+)$")
ACCURACY = re.compile(r"test accuracy ([\d.]+)")


def manifest(name, model="mlp", mode="sync", ps=2, workers=2, batch=64, epochs=1,
             optimizer=None, extra=""):
    """A TrainingJob manifest as YAML text (JSON is valid YAML)."""
    spec = {
        "mode": mode,
        "model": model,
        "dataset": {"path": DATASET},
        "optimizer": optimizer or {"name": "adam", "learningRate": 0.001},
        "batchSize": batch,
        "epochs": epochs,
        "progressIntervalMs": 500,
        "replicaSpecs": {"ps": {"replicas": ps}, "worker": {"replicas": workers}},
    }
    job = {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": name}, "spec": spec}
    return json.dumps(job, indent=2) + extra


def write_manifest(directory, text, filename="job.yaml"):
    path = os.path.join(directory, filename)
    with open(path, "w") as f:
        f.write(text)
    return path


class RunningJob:
    """`kubeps run` in the background; its output is collected line by line
    with the time each line arrived."""

    def __init__(self, manifest_path, run_dir=None, env=None, command="run", kubeps=KUBEPS,
                 args=()):
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="kubeps-test-run-")
        args = [kubeps, command, manifest_path] + list(args)
        if command == "run":
            args.append("--run-dir=" + self.run_dir)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.lines = []  # (seconds since start, line)
        self.start = time.time()
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        env=full_env, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.append((time.time() - self.start, line.rstrip("\n")))

    def wait(self, timeout=300):
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError("job did not finish in %d s; output:\n%s" % (timeout, self.output()))
        self._reader.join(timeout=10)
        return code

    def wait_for_line(self, pattern, timeout=120):
        regex = re.compile(pattern)
        deadline = time.time() + timeout
        while time.time() < deadline:
            # Whether the output had ended is read before the lines: a line
            # read after the last scan would otherwise be missed.
            ended = self.finished_output()
            for _, line in list(self.lines):
                if regex.search(line):
                    return line
            if ended:
                break
            time.sleep(0.05)
        raise AssertionError("no line matching %r; output:\n%s" % (pattern, self.output()))

    def finished_output(self):
        """True once the job has exited and every line it printed is read."""
        return self.process.poll() is not None and not self._reader.is_alive()

    def close(self):
        """Kills `kubeps run` if it still runs, and closes its output."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=10)
        self.process.stdout.close()

    def interrupt(self):
        self.process.send_signal(signal.SIGINT)

    def output(self):
        return "\n".join(line for _, line in self.lines)

    def progress(self, rank=None):
        """Parsed progress lines: dicts with rank, epoch, step, total_steps..."""
        result = []
        for t, line in list(self.lines):
            m = PROGRESS.match(line)
            if m and (rank is None or int(m.group(1)) == rank):
                result.append({"time": t, "rank": int(m.group(1)), "epoch": int(m.group(2)),
                               "total_steps": int(m.group(6)), "steps_per_sec": float(m.group(7)),
                               "samples_per_sec": float(m.group(8)), "loss": float(m.group(9))})
        return result

    def accuracy(self):
        found = ACCURACY.findall(self.output())
        if not found:
            raise AssertionError("no test accuracy line; output:\n" + self.output())
        return float(found[-1])

    def ports(self, replica):
        """(grpc, metrics) ports a replica published in the run folder."""
        deadline = time.time() + 60
        while time.time() < deadline:
            ports = read_ports(self.run_dir, replica)
            if ports:
                return ports
            time.sleep(0.05)
        raise AssertionError("%s never published its ports" % replica)


def run_job(manifest_path, env=None, timeout=300, command="run", args=()):
    job = RunningJob(manifest_path, env=env, command=command, args=args)
    code = job.wait(timeout)
    return code, job


def scrape(port):
    """Prometheus text exposition of 127.0.0.1:port as {series: value}."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as response:
        text = response.read().decode()
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        series[name] = float(value)
    return series


def metric(series, name, **labels):
    """Sum of every series of metric `name` whose labels include `labels`."""
    total, found = 0.0, False
    for key, value in series.items():
        base = key.split("{", 1)[0]
        if base != name:
            continue
        if all('%s="%s"' % (k, v) in key for k, v in labels.items()):
            total += value
            found = True
    return total if found else None


def read_ports(run_dir, replica):
    """(grpc, metrics) from the replica's ports file, or None if not there yet."""
    try:
        with open(os.path.join(run_dir, replica + ".ports")) as f:
            values = dict(line.split() for line in f if line.strip())
        return int(values["grpc"]), int(values["metrics"])
    except (OSError, KeyError, ValueError):
        return None


def scrape_while_running(job, replicas, interval=0.3):
    """Scrapes every one of `replicas` until the job ends; returns the last
    scrape of each (counters only grow, so the last one is the largest)."""
    latest = {}
    while job.process.poll() is None:
        for replica in replicas:
            ports = read_ports(job.run_dir, replica)
            if ports is None:
                continue
            try:
                latest[replica] = scrape(ports[1])
            except OSError:
                pass  # not serving yet, or already gone
        time.sleep(interval)
    return latest


def total(scrapes, name, **labels):
    """The sum of metric `name` over every replica's scrape."""
    return sum(metric(series, name, **labels) or 0 for series in scrapes.values())


def tensor_bytes(series):
    """(tensor bytes a worker pushed and pulled, of them through shared memory) in its scrape."""
    moved = sum(metric(series, name) or 0 for name in
                ("kubeps_worker_push_bytes_total", "kubeps_worker_pull_bytes_total"))
    return moved, metric(series, "kubeps_worker_shared_memory_bytes_total") or 0


def processes_with_env(key, value):
    """Pids of live processes whose environment holds key=value."""
    pids = []
    needle = ("%s=%s" % (key, value)).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def read_floats(path):
    import array
    values = array.array("f")
    with open(path, "rb") as f:
        values.frombytes(f.read())
    return values


# Helpers for the fault and restart tests ------------------------------------

def manifest_with(name, spec=None, **kwargs):
    """manifest(name, **kwargs) with the top-level spec fields in `spec`
    added or replaced (resendTimeoutMs, maxResends, runPolicy, ...)."""
    job = json.loads(manifest(name, **kwargs))
    job["spec"].update(spec or {})
    return json.dumps(job, indent=2)


def replica_pids(run_dir, replica):
    """Pids of the live processes of one replica ("worker-0") of the job
    whose run folder is `run_dir`."""
    return sorted(set(processes_with_env("KUBEPS_RUN_DIR", run_dir)) &
                  set(processes_with_env("KUBEPS_NODE_ID", replica)))


def wait_for_replica_pid(job, replica, exclude=(), timeout=60):
    """The pid of `replica` once exactly one process of it runs, other than
    the pids in `exclude` (a restarted replica's old pid)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = [p for p in replica_pids(job.run_dir, replica) if p not in exclude]
        if len(pids) == 1:
            return pids[0]
        if job.process.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError("no single live process of %s (excluding %s); output:\n%s"
                         % (replica, list(exclude), job.output()))


def wait_for_steps(job, rank, steps, timeout=120):
    """Waits until worker `rank` has printed a progress line with at least
    `steps` total steps; returns that line's parsed fields."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ended = job.finished_output()   # before the scan, as in wait_for_line
        for p in job.progress(rank=rank):
            if p["total_steps"] >= steps:
                return p
        if ended:
            break
        time.sleep(0.01)
    raise AssertionError("worker %d never reached step %d; output:\n%s" % (rank, steps, job.output()))


def elastic_job(name, workers=2, batch=64, minimum=1, maximum=4, replace_timeout=None, **kwargs):
    """A job of manifest_with's whose workers have an elasticPolicy."""
    policy = {"minReplicas": minimum, "maxReplicas": maximum}
    if replace_timeout:
        policy["replaceTimeoutSeconds"] = replace_timeout
    job = json.loads(manifest_with(name, workers=workers, batch=batch, **kwargs))
    job["spec"]["progressIntervalMs"] = 100
    job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = policy
    return json.dumps(job, indent=2)


def resume(pid):
    """SIGCONT to a stopped process, if it is still there."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # the runner stopped it already
