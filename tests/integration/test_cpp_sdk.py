"""The C++ SDK as a user meets it: `cmake --install` of this build into a
fresh prefix; what lands there (headers that compile alone and name no gRPC
or protobuf, a library that exports the SDK and nothing else, a CMake
package); examples/cpp configured and built against that prefix only, with
its own build folder; and the built example training softmax regression on
Fashion-MNIST as a TrainingJob's own program under `kubeps run`:
examples/cpp/trainingjob.yaml, a job without spec.model whose worker
container's command is the trainer, each worker's trainer beside its
`kubeps-agent --serve`. A trainer SIGKILLed
midway is restarted by the run policy, keeps its rank and ends the job with
the same parameters, bit for bit, as a run without the kill; the clean run
trains in the agent's shared regions (--zero-copy) and the killed one
through its own buffers, so the two paths are compared too. With its own
optimizer (examples/cpp/trainingjob-own-optimizer.yaml: the servers only
average, the trainer keeps the parameters and their momentum) a killed
server rolls the job back and each trainer its state, from RollbackCopies,
and a killed trainer starts again from its own files: the job ends on the
bits of the run without the kills.

    python3 -m unittest -v test_cpp_sdk        (from tests/integration)
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from jobtools import BIN_DIR, SOURCE_DIR, RunningJob, replica_pids, write_manifest

BUILD_DIR = os.path.dirname(BIN_DIR)
EXAMPLE_DIR = os.path.join(SOURCE_DIR, "examples", "cpp")
TAG = r"^\[worker-(\d+)/trainer\] "  # kubeps run's, on a worker program's lines
ACCURACY = re.compile(TAG + r"rank (\d+): test accuracy ([\d.]+)$", re.M)
PARAMETERS = re.compile(TAG + r"rank (\d+): parameters fnv1a ([0-9a-f]+)$", re.M)
STARTING = re.compile(TAG + r"rank (\d+) of \d+: steps (\d+) to (\d+)", re.M)
KILL_AFTER_STEP = 100
ROLLED_BACK = re.compile(TAG + r"rank (\d+): rolled back to step (\d+)$", re.M)

# What the prefix holds, relative to it (libdir as GNUInstallDirs chose it).
HEADERS = ["include/kubeps/common/resend_policy.h", "include/kubeps/common/status.h",
           "include/kubeps/common/step_membership.h",
           "include/kubeps/worker-agent/kv/kv_worker.h",
           "include/kubeps/worker-agent/kv/placement.h",
           "include/kubeps/worker-agent/kv/rollback_copies.h",
           "include/kubeps/worker-agent/kv/sdk_export.h"]
# The symbols libkubeps.so exports, demangled, as patterns.
EXPORTED = [r"kubeps::KVWorker::Start\(", r"kubeps::KVWorker::Connect\(", r"kubeps::PlaceTensors\(",
            r"kubeps::RollbackCopies::RollBack\("]


def run(args, **kwargs):
    """Runs a command; fails the test with its output when it fails."""
    result = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(args), result.returncode,
                                                        result.stdout, result.stderr))
    return result.stdout


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
        # The SDK's classes' own symbols and their vtables and typeinfo: nothing of the
        # implementation, gRPC, protobuf, abseil or the C++ library.
        foreign = [n for n in names
                   if not re.match(r"((typeinfo|typeinfo name|vtable) for )?kubeps::"
                                   r"(KVWorker|PlaceTensors|RollbackCopies)\b", n)]
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

    def manifest(self, zero_copy, name="trainingjob.yaml", epochs=None):
        """examples/cpp/<name> in a folder of its own whose build/ is the
        example's build, as after the example's README; without
        `zero_copy`, its trainers copy through their own buffers."""
        with open(os.path.join(EXAMPLE_DIR, name)) as f:
            text = f.read()
        if epochs:
            self.assertIn('"--epochs=1"', text)
            text = text.replace('"--epochs=1"', '"--epochs=%d"' % epochs)
        if not zero_copy:
            self.assertIn('"--zero-copy", ', text)
            text = text.replace('"--zero-copy", ', "")
        folder = tempfile.mkdtemp(prefix="job-", dir=self.work)
        os.symlink(self.example_build, os.path.join(folder, "build"))
        return folder, write_manifest(folder, text, name)

    def run_job(self, folder, path, name, kills=()):
        """Runs the job `name` at `path`, which must succeed; `kills`: (step,
        replica) in order, the replica's process (a worker's trainer) is
        SIGKILLed after worker-0's progress line of that step. Returns the
        job's output."""
        job = RunningJob(path, run_dir=os.path.join(folder, "run"))
        try:
            for step, replica in kills:
                job.wait_for_line(r"^\[worker-0/trainer\] rank \d+: step %d/" % step)
                victims = [pid for pid in replica_pids(job.run_dir, replica)
                           if not replica.startswith("worker") or
                           os.path.basename(os.readlink("/proc/%d/exe" % pid)) ==
                           "softmax_trainer"]
                self.assertEqual(len(victims), 1, job.output())
                os.kill(victims[0], signal.SIGKILL)
            code = job.wait(240)
        finally:
            job.close()
        output = job.output()
        self.assertEqual(code, 0, output)
        self.assertRegex(output, r"\[kubeps\] job %s succeeded in [\d.]+ s" % name)
        return output

    def train(self, zero_copy, kill=False):
        """Two epochs of the example as a job of two workers and two servers;
        with `kill`, worker 1's trainer is SIGKILLed after step
        KILL_AFTER_STEP. Returns the job's output."""
        return self.run_job(*self.manifest(zero_copy), "cpp-softmax",
                            [(KILL_AFTER_STEP, "worker-1")] if kill else [])

    def own_optimizer_run(self, kills=()):
        """Two epochs of trainingjob-own-optimizer.yaml (the last kill then
        leaves the trainers seconds to run, not one), with `kills` as run_job's."""
        folder, path = self.manifest(True, "trainingjob-own-optimizer.yaml", epochs=2)
        return self.run_job(folder, path, "cpp-softmax-own-optimizer", kills)

    def test_its_own_optimizer_rolls_back_and_restarts_from_its_own_state(self):
        clean = self.own_optimizer_run()
        results = self.results(clean)
        self.assertEqual(sorted(results), ["0", "1"], clean)
        self.assertEqual(results["0"], results["1"], clean)
        self.assertGreaterEqual(float(results["0"][0]), 0.78, clean)
        self.assertNotRegex(clean, ROLLED_BACK)

        output = self.own_optimizer_run(kills=[(100, "server-1"), (300, "worker-1")])
        self.assertIn("server-1 exited with code 137; restarting it", output)
        self.assertIn("worker-1's program (container trainer) exited with code 137", output)
        # The killed server sent the job back to its checkpoint; each
        # trainer's state went back from its copies in memory...
        rollbacks = ROLLED_BACK.findall(output)
        self.assertTrue(rollbacks, output)
        for _, _, step in rollbacks:
            self.assertEqual(int(step) % 20, 0, output)
        # ...and the killed trainer started again from its own file of a
        # checkpoint step (the job going back to it).
        starts = [int(first) for worker, _, first, _ in STARTING.findall(output)
                  if worker == "1"]
        self.assertEqual(len(starts), 2, output)
        self.assertGreaterEqual(starts[1], 200, output)
        self.assertEqual(starts[1] % 20, 0, output)
        # The same parameters as the run without the kills, bit for bit.
        self.assertEqual(self.results(output), results, output)
        print("\nown optimizer: %s; worker-1's trainer restarted at step %d; accuracy %s"
              % (", ".join("rank %s rolled back to %s" % (r, s) for _, r, s in rollbacks),
                 starts[1], results["0"][0]))

    def results(self, output):
        """{rank: (accuracy, parameter hash)} from the trainers' lines."""
        hashes = {rank: value for _, rank, value in PARAMETERS.findall(output)}
        return {rank: (accuracy, hashes.get(rank))
                for _, rank, accuracy in ACCURACY.findall(output)}

    def clean_run(self):
        if not hasattr(CppSdkTest, "_clean"):
            CppSdkTest._clean = self.train(zero_copy=True)
        return CppSdkTest._clean

    def test_trains_as_the_jobs_own_program(self):
        output = self.clean_run()
        results = self.results(output)
        self.assertEqual(sorted(results), ["0", "1"], output)
        # Sync: both workers end with the same parameters.
        self.assertEqual(results["0"], results["1"])
        # Softmax regression reaches about 0.83 in two epochs.
        self.assertGreaterEqual(float(results["0"][0]), 0.78, output)
        print("test accuracy %s after two epochs" % results["0"][0])

    def test_a_killed_trainer_resumes_exactly_where_it_was(self):
        output = self.train(zero_copy=False, kill=True)
        self.assertIn("worker-1's program (container trainer) exited with code 137", output)
        starts = [(int(worker), rank, int(first)) for worker, rank, first, _ in
                  STARTING.findall(output) if worker == "1"]
        self.assertEqual(len(starts), 2, "worker-1's trainer ran twice; output:\n" + output)
        # Restarted, it keeps its rank and goes on from the servers' step...
        self.assertEqual(starts[1][1], starts[0][1], output)
        self.assertEqual(starts[0][2], 0)
        self.assertGreaterEqual(starts[1][2], KILL_AFTER_STEP, output)
        # ...with the data it would have had: the parameters are those of
        # the run without a kill (and in shared regions), bit for bit.
        self.assertEqual(self.results(output), self.results(self.clean_run()), output)


if __name__ == "__main__":
    unittest.main()
