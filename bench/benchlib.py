"""What the Python benchmarks share: manifests, running a command and
reading its progress lines, DDP processes on loopback, medians and goals.

Every progress line has the built-in trainer's format
(worker-agent/training_loop.cc), behind a tag: "[worker 0]" from a built-in
job's worker, "[local]" from `kubeps train-local`, "[worker-0/trainer]"
from a job's own program, "[ddp-0]" from a benchmark's DDP process:

    [worker 0] epoch 1/1 step 60/468 total_steps 60 steps/sec 5.10 samples/sec 326.4 loss 0.61

A line's steps/sec is over the window since the tag's previous line (or
the start). Standard library only.
"""
import json
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN_DIR = os.path.join(SOURCE_DIR, "build", "bin")
DATA_DIR = "/usr/share/datasets/fashion-mnist"
STEPS_PER_EPOCH = 60000 // 128  # Fashion-MNIST's training set at a global batch of 128

_PROGRESS = r"\[%s\] epoch \d+/\d+ step \d+/\d+ total_steps (\d+) steps/sec ([\d.]+) "


def write_job(folder, name, spec):
    """A TrainingJob manifest with `spec`, written as JSON (which is YAML); its path."""
    job = {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": name}, "spec": spec}
    path = os.path.join(folder, name + ".yaml")
    with open(path, "w") as f:
        json.dump(job, f, indent=2)
    return path


def shell_line(command, settings=None):
    """The command as one would type it, `settings` (extra environment) in front."""
    prefix = ["%s=%s" % (k, shlex.quote(v)) for k, v in (settings or {}).items()]
    return " ".join(prefix + [shlex.quote(w) for w in command])


def run(command, settings=None, timeout=1800):
    """Runs `command` with `settings` added to this environment, after printing
    it; its output's lines. Exits with that output when the command fails."""
    print("  $ " + shell_line(command, settings), flush=True)
    env = dict(os.environ, **(settings or {}))
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=timeout)
    if done.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" % (command[0], done.returncode, done.stdout))
    return done.stdout.splitlines()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(commands, settings, tag, timeout=1800):
    """Runs the commands at once (one per rank, each printed first) with
    `settings` added to the environment; their lines, each tagged "[TAG-R] "."""
    env = dict(os.environ, **settings)
    for command in commands:
        print("  $ " + shell_line(command, settings), flush=True)
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env) for c in commands]
    lines = []
    for rank, process in enumerate(processes):
        out, _ = process.communicate(timeout=timeout)
        if process.returncode != 0:
            for p in processes:
                p.kill()
            sys.exit("%s-%d failed:\n%s" % (tag, rank, out))
        lines += ["[%s-%d] %s" % (tag, rank, line) for line in out.splitlines()]
    return lines


def window_speeds(lines, tag, warmup):
    """steps/sec of each of `tag`'s progress windows that starts at or after
    step `warmup` (start-up and the first steps' allocations excluded)."""
    progress = re.compile(_PROGRESS % re.escape(tag))
    speeds, window_start = [], 0
    for line in lines:
        m = progress.search(line)  # behind another tag too: "[worker-0/trainer] [worker 0] ..."
        if not m:
            continue
        if window_start >= warmup:
            speeds.append(float(m.group(2)))
        window_start = int(m.group(1))
    return speeds


def torch_train(model, optimizer, images, labels, sampler, progress, total_steps):
    """A PyTorch training loop; `progress` prints the progress lines. In a DDP
    process `model` is wrapped in DistributedDataParallel, which all-reduces
    (averages) the gradients, in buckets, during backward."""
    import torch.nn.functional as F
    for step in range(total_steps):
        batch = sampler.indices(step)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
        progress.step_done(step, loss.item())


def in_turns(sides, rounds):
    """(round, side) for `rounds` rounds of every side, each other round in the reverse
    order, so that the machine's drift falls on every side alike."""
    for round_ in range(rounds):
        for side in (list(sides) if round_ % 2 == 0 else list(reversed(sides))):
            yield round_, side


def median(values):
    return statistics.median(values) if values else float("nan")


def verdict(ratio, goal):
    """'PASS (>= 0.9)' or 'BELOW (>= 0.9)'; '' when there is no goal."""
    if goal is None:
        return ""
    return "%s (>= %.1f)" % ("PASS" if ratio >= goal else "BELOW", goal)
