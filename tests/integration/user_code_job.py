"""What the tests of a TrainingJob that brings its own PyTorch program share
(test_user_code, test_user_code_faults): examples/pytorch/mlp through
`kubeps run`, each worker's program beside its kubeps-agent.

The program needs a Python with torch: $KUBEPS_TORCH_PYTHON (ctest sets it to
Debian's /usr/bin/python3, which has python3-torch), found as `python3` on the
PATH the job gets, and the kubeps package from python/ on PYTHONPATH, as the
example's comments tell a user to do.
"""
import json
import os
import re
import subprocess
import tempfile
import time
import unittest

from jobtools import SOURCE_DIR, RunningJob, processes_with_env, write_manifest

EXAMPLE_DIR = os.path.join(SOURCE_DIR, "examples", "pytorch", "mlp")
EXAMPLE = os.path.join(EXAMPLE_DIR, "trainingjob.yaml")
EXAMPLE_ARGS = '["--steps", "500"]'
TORCH_PYTHON = os.environ.get("KUBEPS_TORCH_PYTHON", "/usr/bin/python3")
STEPS = 500
KILL_AFTER_STEP = 100
# Measured: 0.8455 on every run here (500 steps of Adam 1e-3, global batch
# 128, torch 1.13); the margin is for another machine's rounding and torch.
MIN_ACCURACY = 0.83
ACCURACY = re.compile(r"^\[worker-\d/trainer\] test accuracy ([\d.]+)")
RANK = re.compile(r"^\[worker-0/trainer\] rank (\d) of 2")


def why_torch_is_missing():
    try:
        result = subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True,
                                text=True, timeout=120)
    except OSError as error:
        return "%s cannot run (%s)" % (TORCH_PYTHON, error)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return "%s has no torch (apt-get install python3-torch, or set KUBEPS_TORCH_PYTHON): %s" % (
            TORCH_PYTHON, last)
    return None


MISSING = why_torch_is_missing()


def program_env(directory):
    """The environment of `kubeps run`: `python3` is TORCH_PYTHON, kubeps comes from python/."""
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    wrapper = os.path.join(bin_dir, "python3")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec %s "$@"\n' % TORCH_PYTHON)
    os.chmod(wrapper, 0o755)
    return {"PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "PYTHONPATH": os.path.join(SOURCE_DIR, "python")}


def example_manifest(directory, name, steps=STEPS, save=None, spec=None, args=()):
    """The example's manifest, written to `directory`, with `steps` steps,
    rank 0 saving its final parameters to `save`, the top-level spec fields
    in `spec` and the program's arguments `args` added, and its folder as the
    container's workingDir."""
    with open(EXAMPLE) as f:
        text = f.read()
    program_args = json.loads(EXAMPLE_ARGS)
    program_args[1] = str(steps)
    if save:
        program_args += ["--save", save]
    for old, new in [
            (EXAMPLE_ARGS, json.dumps(program_args + list(args))),
            ("command: [python3, train.py]\n",
             "command: [python3, train.py]\n              workingDir: %s\n" % EXAMPLE_DIR),
            ("  mode: sync\n", "  mode: sync\n" + "".join(
                "  %s: %s\n" % (key, json.dumps(value)) for key, value in (spec or {}).items()))]:
        assert old in text, old
        text = text.replace(old, new)
    return write_manifest(directory, text, name + ".yaml")


def program_manifest(name, program, working_dir, spec="", args=()):
    """A 2 ps x 2 workers job whose workers run `python3 program args...` in `working_dir`,
    the YAML lines in `spec` added to its spec (indented by two spaces)."""
    return """apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: %s
spec:
%s  replicaSpecs:
    ps: {replicas: 2}
    worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: trainer
              image: kubeps/tests:0
              command: %s
              workingDir: %s
""" % (name, spec, json.dumps(["python3", program] + list(args)), working_dir)


def differing_parameters(first, second):
    """The names of the tensors whose bytes differ between two saved state_dicts."""
    script = ("import sys, torch\n"
              "a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
              "assert a.keys() == b.keys(), (list(a), list(b))\n"
              "print(' '.join(k for k in a if a[k].numpy().tobytes() != b[k].numpy().tobytes()))\n")
    result = subprocess.run([TORCH_PYTHON, "-c", script, first, second], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError("comparing %s and %s: %s" % (first, second, result.stderr))
    return result.stdout.split()


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def worker_process(job, which, timeout=60):
    """The pid of worker-0's program ("program") or agent ("agent")."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = (set(processes_with_env("KUBEPS_RUN_DIR", job.run_dir)) &
                set(processes_with_env("KUBEPS_NODE_ID", "worker-0")))
        for pid in sorted(pids):
            words = cmdline(pid)
            is_agent = bool(words) and os.path.basename(words[0]) == b"kubeps-agent"
            is_program = b"train.py" in words
            if (which == "agent" and is_agent) or (which == "program" and is_program):
                return pid
        time.sleep(0.02)
    raise AssertionError("no %s of worker-0 found; output:\n%s" % (which, job.output()))


def accuracy_of(job):
    found = [float(m.group(1)) for m in (ACCURACY.match(line) for _, line in job.lines) if m]
    if not found:
        raise AssertionError("no test accuracy line; output:\n" + job.output())
    return found[-1]


@unittest.skipIf(MISSING, MISSING)
class UserCodeJobCase(unittest.TestCase):
    """A test that runs the example: its own folder, the program's environment."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-user-code-")
        self.env = program_env(self.dir)

    def start(self, name, manifest=EXAMPLE, env=None):
        job = RunningJob(manifest, run_dir=os.path.join(self.dir, "run-" + name),
                         env=dict(self.env, **(env or {})))
        self.addCleanup(job.close)
        return job

    def assert_succeeded(self, job, code):
        self.assertEqual(code, 0, job.output())
        last = [line for _, line in job.lines if line.startswith("[kubeps] job ")][-1]
        self.assertRegex(last, r"^\[kubeps\] job pytorch-mlp succeeded in [\d.]+ s$", job.output())
        # Nothing of the job outlives `kubeps run` for long: not the agents, not the programs.
        deadline = time.time() + 10
        left = processes_with_env("KUBEPS_RUN_DIR", job.run_dir)
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = processes_with_env("KUBEPS_RUN_DIR", job.run_dir)
        self.assertEqual(left, [], "processes of the job still alive after it ended")

    def saved_run(self, name, steps=STEPS, spec=None, env=None):
        """A run of the example whose rank 0 saves its parameters: (job, saved file)."""
        saved = os.path.join(self.dir, name + ".pt")
        job = self.start(name, example_manifest(self.dir, name, steps, saved, spec), env)
        return job, saved
