"""The C++ SDK as a user meets it: `cmake --install` of this build into a
fresh prefix; what lands there (headers that compile alone and name no gRPC
or protobuf, a library that exports the SDK and nothing else, a CMake
package); examples/cpp configured and built against that prefix only, with
its own build folder; and the built example training softmax regression on
Fashion-MNIST with a job's parameter servers through each worker's
`kubeps-agent --serve`; a trainer killed midway and restarted ends the job
with the same parameters, bit for bit, as a run without the crash.

    python3 -m unittest -v test_cpp_sdk        (from tests/integration)

The job is started by hand (scheduler, servers, one serving agent and one
trainer per worker), as tests/python/real_agent.py does, until `kubeps run`
starts a worker's own command beside its agent. Then only `train` changes:
a TrainingJob without spec.model whose worker container's command is the
trainer with --epochs=2, runPolicy OnFailure, run with jobtools.RunningJob;
worker 1's trainer SIGKILLed by the test as test_user_code.py does, instead
of --crash-after-step (the bit-for-bit comparison holds wherever it dies).
The patterns below already allow the "[worker-N/trainer] " tag that
`kubeps run` puts on a program's lines.
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from jobtools import BIN_DIR, DATASET, SOURCE_DIR

BUILD_DIR = os.path.dirname(BIN_DIR)
EXAMPLE_DIR = os.path.join(SOURCE_DIR, "examples", "cpp")
TAG = r"^(?:\[worker-\d+/\w+\] )?"  # kubeps run's, on a worker program's lines
ACCURACY = re.compile(TAG + r"rank (\d+): test accuracy ([\d.]+)$", re.M)
PARAMETERS = re.compile(TAG + r"rank (\d+): parameters fnv1a ([0-9a-f]+)$", re.M)
STARTING = re.compile(TAG + r"rank (\d+) of \d+: steps (\d+) to (\d+)", re.M)

# What the prefix holds, relative to it (libdir as GNUInstallDirs chose it).
HEADERS = ["include/kubeps/common/resend_policy.h", "include/kubeps/common/status.h",
           "include/kubeps/worker-agent/kv/kv_worker.h",
           "include/kubeps/worker-agent/kv/placement.h",
           "include/kubeps/worker-agent/kv/sdk_export.h"]
# The symbols libkubeps.so exports, demangled, as patterns.
EXPORTED = [r"kubeps::KVWorker::Start\(", r"kubeps::KVWorker::Connect\(", r"kubeps::PlaceTensors\("]


def run(args, **kwargs):
    """Runs a command; fails the test with its output when it fails."""
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(args), result.returncode,
                                                        result.stdout, result.stderr))
    return result.stdout


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HandStartedJob:
    """A sync job on loopback: a scheduler, `servers` parameter servers and,
    per worker, `kubeps-agent --serve` in its own socket folder. Trainers are
    started beside the agents with start_trainer. Every process's output goes
    to a log file in `folder`; stop() ends the processes still running."""

    def __init__(self, folder, servers=2, workers=2, optimizer=None):
        self.folder = folder
        self.processes = []  # (name, Popen, log path)
        job = {
            "apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "cpp-sdk"},
            "spec": {
                "mode": "sync", "model": "mlp", "dataset": {"path": DATASET},
                "optimizer": optimizer or {"name": "sgd", "learningRate": 0.1},
                "replicaSpecs": {"ps": {"replicas": servers}, "worker": {"replicas": workers}},
            },
        }
        port = free_port()
        self.env = dict(os.environ, KUBEPS_JOB=json.dumps(job), KUBEPS_JOB_NAME="cpp-sdk",
                        KUBEPS_NUM_SERVERS=str(servers), KUBEPS_NUM_WORKERS=str(workers),
                        KUBEPS_SCHEDULER_ADDR="127.0.0.1:%d" % port)
        server = os.path.join(BIN_DIR, "kubeps-server")
        self.start("scheduler", [server, "--role=scheduler", "--node-id=scheduler",
                                 "--port=%d" % port])
        for i in range(servers):
            self.start("ps-%d" % i, [server, "--role=server", "--node-id=ps-%d" % i])
        self.agents = []
        for i in range(workers):
            self.agents.append(self.start("agent-%d" % i, [
                os.path.join(BIN_DIR, "kubeps-agent"), "--role=worker", "--node-id=worker-%d" % i,
                "--serve", "--socket-dir=" + self.socket_dir(i)]))

    def socket_dir(self, worker):
        return os.path.join(self.folder, "worker-%d" % worker)

    def start(self, name, args, env=None):
        log = os.path.join(self.folder, name + ".log")
        with open(log, "ab") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                       env=env or self.env, start_new_session=True)
        self.processes.append((name, process, log))
        return process

    def start_trainer(self, worker, command, name=None):
        """The worker's own command, as the pod's user container runs it."""
        env = dict(self.env, KUBEPS_SOCKET_DIR=self.socket_dir(worker))
        return self.start(name or "trainer-%d" % worker, command, env=env)

    def log(self, name):
        with open(os.path.join(self.folder, name + ".log"), errors="replace") as f:
            return f.read()

    def logs(self):
        return "\n".join("--- %s (exit %s)\n%s" % (name, process.poll(), self.log(name)[-3000:])
                         for name, process, _ in self.processes)

    def wait(self, process, timeout):
        try:
            return process.wait(timeout=max(1, timeout))
        except subprocess.TimeoutExpired:
            raise AssertionError("a process did not end in time; logs:\n" + self.logs())

    def stop(self):
        for _, process, _ in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for _, process, _ in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class CppSdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
            raise unittest.SkipTest("no CMake build at " + BUILD_DIR)
        cls.work = tempfile.mkdtemp(prefix="kubeps-cpp-sdk-")
        cls.prefix = os.path.join(cls.work, "prefix")
        run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix])
        cls.example_build = os.path.join(cls.work, "example-build")
        configure = ["cmake", "-S", EXAMPLE_DIR, "-B", cls.example_build,
                     "-DCMAKE_PREFIX_PATH=" + cls.prefix, "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        # Nothing of this tree's build may leak in through the environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "CPATH"))}
        run(configure, env=env)
        run(["cmake", "--build", cls.example_build], env=env)
        cls.trainer = os.path.join(cls.example_build, "softmax_trainer")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def library(self):
        found = glob.glob(os.path.join(self.prefix, "lib*", "**", "libkubeps.so.*.*.*"),
                          recursive=True)
        self.assertEqual(len(found), 1, "libkubeps.so.X.Y.Z under " + self.prefix)
        return found[0]

    def test_the_prefix_holds_the_library_headers_and_package(self):
        installed = sorted(os.path.relpath(os.path.join(root, f), self.prefix)
                           for root, _, files in os.walk(self.prefix) for f in files)
        self.assertEqual(sorted(p for p in installed if p.startswith("include/")), HEADERS)
        libdir = os.path.dirname(os.path.relpath(self.library(), self.prefix))
        for name in ("libkubeps.so", "libkubeps.so.0.1", "libkubeps.so.0.1.0",
                     "cmake/kubeps/kubepsConfig.cmake", "cmake/kubeps/kubepsConfigVersion.cmake",
                     "cmake/kubeps/kubepsTargets.cmake"):
            self.assertIn(os.path.join(libdir, name), installed)
        self.assertEqual(len(installed), len(HEADERS) + 7,
                         "unexpected files installed:\n" + "\n".join(installed))

    def test_headers_compile_alone_and_name_neither_grpc_nor_protobuf(self):
        include = os.path.join(self.prefix, "include", "kubeps")
        for header in HEADERS:
            path = os.path.join(self.prefix, header)
            # -nostdinc++ is not wanted: the C++ library is fine, the source
            # tree and the system's gRPC headers are what must not be needed.
            run(["c++", "-std=c++17", "-fsyntax-only", "-I", include, "-x", "c++", path])
            preprocessed = run(["c++", "-std=c++17", "-E", "-I", include, "-x", "c++", path])
            included = set(re.findall(r'^# \d+ "([^"]+)"', preprocessed, re.M))
            leaks = sorted(f for f in included if re.search(r"grpc|protobuf|absl", f))
            self.assertEqual(leaks, [], header)
            ours = sorted(f for f in included if "kubeps" in f and not f.startswith(include))
            self.assertEqual(ours, [], header + " reaches headers outside the prefix")

    def test_the_library_exports_the_sdk_and_nothing_else(self):
        library = self.library()
        dynamic = run(["readelf", "-d", library])
        self.assertIn("Library soname: [libkubeps.so.0.1]", dynamic)
        symbols = run(["nm", "-D", "--defined-only", "-C", library]).splitlines()
        names = [line.split(" ", 2)[2] for line in symbols if line.count(" ") >= 2]
        for pattern in EXPORTED:
            self.assertTrue(any(re.match(pattern, n) for n in names), pattern + " not exported")
        # KVWorker's own symbols and its vtable and typeinfo: nothing of the
        # implementation, gRPC, protobuf, abseil or the C++ library.
        foreign = [n for n in names
                   if not re.match(r"((typeinfo|typeinfo name|vtable) for )?kubeps::"
                                   r"(KVWorker|PlaceTensors)\b", n)]
        self.assertEqual(foreign, [], "libkubeps.so exports more than the SDK")

    def test_the_example_builds_against_the_prefix_alone(self):
        with open(os.path.join(self.example_build, "CMakeCache.txt")) as f:
            cache = f.read()
        self.assertIn("kubeps_DIR:PATH=" + self.prefix, cache)
        with open(os.path.join(self.example_build, "compile_commands.json")) as f:
            commands = json.load(f)
        for entry in commands:
            outside = [a for a in entry["command"].split()
                       if SOURCE_DIR in a and EXAMPLE_DIR not in a]
            self.assertEqual(outside, [], "the example's compile sees the source tree")
            self.assertNotIn(BUILD_DIR, entry["command"])
        self.assertTrue(os.access(self.trainer, os.X_OK))

    def train(self, crash_after_step=None):
        """Two epochs with two workers, two servers; worker 0 works in the
        shared regions, worker 1 through its own buffers. With
        crash_after_step, worker 1's trainer dies after that step, as if
        killed, and is started again. Returns the trainers' logs joined."""
        job = HandStartedJob(tempfile.mkdtemp(prefix="job-", dir=self.work))
        deadline = time.time() + 120
        try:
            trainers = [job.start_trainer(0, [self.trainer, "--zero-copy", "--epochs=2"])]
            if crash_after_step is None:
                trainers.append(job.start_trainer(1, [self.trainer, "--epochs=2"]))
            else:
                crashing = job.start_trainer(
                    1, [self.trainer, "--epochs=2", "--crash-after-step=%d" % crash_after_step],
                    name="trainer-1-crashed")
                self.assertEqual(job.wait(crashing, deadline - time.time()), 3, job.logs())
                trainers.append(job.start_trainer(1, [self.trainer, "--epochs=2"]))
            for trainer in trainers:
                self.assertEqual(job.wait(trainer, deadline - time.time()), 0, job.logs())
            for agent in job.agents:  # each agent exits once its trainer said finish
                self.assertEqual(job.wait(agent, deadline - time.time()), 0, job.logs())
            return {name: job.log(name) for name in ("trainer-0", "trainer-1")}, job.logs()
        finally:
            job.stop()

    def results(self, logs):
        """{rank: (accuracy, parameter hash)} from the trainers' logs."""
        text = "\n".join(logs.values())
        hashes = dict(PARAMETERS.findall(text))
        return {rank: (accuracy, hashes.get(rank)) for rank, accuracy in ACCURACY.findall(text)}

    def clean_run(self):
        if not hasattr(CppSdkTest, "_clean"):
            CppSdkTest._clean = self.train()
        return CppSdkTest._clean

    def test_trains_with_the_jobs_servers(self):
        logs, everything = self.clean_run()
        results = self.results(logs)
        self.assertEqual(sorted(results), ["0", "1"], everything)
        # Sync: both workers end with the same parameters.
        self.assertEqual(results["0"], results["1"])
        # Softmax regression reaches about 0.83 in two epochs.
        self.assertGreaterEqual(float(results["0"][0]), 0.78, everything)
        print("test accuracy %s after two epochs" % results["0"][0])

    def test_a_killed_trainer_resumes_exactly_where_it_was(self):
        logs, everything = self.train(crash_after_step=150)
        # Restarted, it keeps its rank and goes on from the servers' step...
        restarted = STARTING.search(logs["trainer-1"])
        self.assertIsNotNone(restarted, everything)
        self.assertEqual(restarted.group(2), "151", "the restarted trainer's first step")
        # ...with the data it would have had: the parameters are those of
        # the run without a crash, bit for bit.
        clean_logs, _ = self.clean_run()
        self.assertEqual(self.results(logs), self.results(clean_logs), everything)

if __name__ == "__main__":
    unittest.main()
