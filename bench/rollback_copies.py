#!/usr/bin/python3
"""What kubeps.torch's copies of a program's own state for rollbacks cost.

With the servers' optimizer `none` a PyTorch program's parameters and its torch
optimizer's state live in the program, so kubeps.torch.steps() copies them
into host memory at each multiple of spec.checkpoint.intervalSteps (the steps a
rollback can go back to) and keeps the copies a rollback can still reach
(python/kubeps/_torch_rollback.py). Two measurements:

  copy  in this process: the seed CNN (examples/pytorch/cnn/train.py's model,
        3.3M parameters) with torch's Adam at a batch of 64 on one torch
        thread: the bytes of one copy, the time to take it (into the memory
        of a copy no longer kept, as a process does once it has dropped one,
        and into fresh memory) and to put it back (medians of --repeats),
        against one training step's time, and
        what a copy at every 100th step (the default interval) and at every
        10th costs a step on average;
  job   `kubeps run` of the MLP example (examples/pytorch/mlp/train.py, 2
        servers that only average, 2 workers, its own Adam) with checkpoints
        every --interval steps: the copies kept (the default) against none
        kept (KUBEPS_ROLLBACK_COPIES=0), in turns, --rounds times; worker 0's
        steps/sec over its training loop ("... s in this process"), the
        medians and their ratio.

Usage (a Python with torch; nothing else running meanwhile):

    /usr/bin/python3 bench/rollback_copies.py [--rounds 3] [--interval 10] [--steps 600]

Standard library and torch only; not a test.

Measured on the 2-core development machine (2026-12-05, --rounds 4 --steps
600, the other settings the defaults): a copy of the CNN holds 39.3 MB, takes
2.25 ms into the memory of the copy it replaces against 95 ms into fresh
memory (a page fault a page), 0.011 of a 209 ms training step, and 1.89 ms to
put back; so a copy every 100 steps costs a step 0.01% on average, every 10
0.11%. The MLP job: copies kept 87.0, none kept 83.9 steps/sec (ratio 1.036:
within this machine's noise; the rounds went from 78.9 to 103.4), and its
workers spent 47 to 56 ms of a 2.9 s run of 300 steps before yielding each
step (the copies, and asking the agent for the newest checkpoint, 0.4 ms a
time), about 1.7%.
"""
import argparse
import os
import re
import sys
import tempfile
import time

import benchlib

sys.path.insert(0, os.path.join(benchlib.SOURCE_DIR, "python"))
sys.path.insert(0, os.path.join(benchlib.SOURCE_DIR, "examples", "pytorch", "cnn"))
MLP_TRAIN_PY = os.path.join(benchlib.SOURCE_DIR, "examples", "pytorch", "mlp", "train.py")
BATCH = 64


def timed(function, repeats):
    """The median seconds of `repeats` calls of function()."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return benchlib.median(seconds)


def measure_copy(repeats):
    import torch
    import train  # examples/pytorch/cnn/train.py: the model
    from kubeps._torch_rollback import Snapshot

    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = train.make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.kubeps_skipped_steps = 0  # what kubeps.torch's optimizer counts
    images = torch.randn(BATCH, 1, 28, 28)
    labels = torch.randint(0, 10, (BATCH,))

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    step()  # Adam's state exists from the first step on
    step_s = timed(step, repeats)
    copies = []  # each in fresh memory, as the first copies of a process
    fresh_s = timed(lambda: copies.append(Snapshot(optimizer, True, model, [])), repeats)
    copies = [copies[-1]]  # then each into the memory of one no longer kept, as from then on
    take_s = timed(lambda: copies.append(Snapshot(optimizer, True, model, [],
                                                  spare=copies.pop())), repeats)
    restore_s = timed(lambda: copies[-1].restore(optimizer, model, []), repeats)
    params = sum(p.numel() for p in model.parameters())
    state = sum(t.numel() for s in optimizer.state.values() for t in s.values()
                if torch.is_tensor(t))
    megabytes = (params + state) * 4 / 1e6
    print("copy: seed CNN, %d parameters, Adam, batch %d, 1 torch thread, medians of %d"
          % (params, BATCH, repeats))
    print("  one copy holds %.1f MB (parameters and Adam's two moments)" % megabytes)
    print("  a training step %.2f ms; taking a copy %.2f ms (%.3f of a step; %.2f ms into fresh "
          "memory, as a process's first copies), putting it back %.2f ms"
          % (step_s * 1e3, take_s * 1e3, take_s / step_s, fresh_s * 1e3, restore_s * 1e3))
    for interval in (100, 10):
        print("  a copy every %d steps costs a step %.2f%% on average"
              % (interval, 100 * take_s / interval / step_s))


def job_manifest(folder, args, name):
    container = {
        "name": "trainer", "image": "kubeps/example-pytorch-mlp:0.1.0",
        "command": [sys.executable, MLP_TRAIN_PY],
        "args": ["--steps", str(args.steps), "--log-every", str(args.steps)],
        "env": [{"name": "DATA_DIR", "value": benchlib.DATA_DIR},
                {"name": "KUBEPS_TORCH_THREADS", "value": "1"}],
    }
    return benchlib.write_job(folder, name, {
        "mode": "sync", "batchSize": 64, "optimizer": {"name": "none"},
        "checkpoint": {"path": os.path.join(folder, name + "-checkpoints"),
                       "intervalSteps": args.interval},
        "replicaSpecs": {"ps": {"replicas": 2},
                         "worker": {"replicas": 2, "template": {"spec": {
                             "containers": [container]}}}}})


def run_job(manifest, args, copies):
    settings = {"PYTHONPATH": os.path.join(benchlib.SOURCE_DIR, "python")}
    if copies is not None:
        settings["KUBEPS_ROLLBACK_COPIES"] = str(copies)
    lines = benchlib.run([os.path.join(args.bin_dir, "kubeps"), "run", manifest], settings)
    for line in lines:
        found = re.search(r"after (\d+) steps, ([\d.]+) s in this process", line)
        if found:
            return int(found.group(1)) / float(found.group(2))
    sys.exit("no line of worker 0's loop time:\n" + "\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternated")
    parser.add_argument("--interval", type=int, default=10, help="spec.checkpoint.intervalSteps")
    parser.add_argument("--steps", type=int, default=600, help="steps of each job")
    parser.add_argument("--repeats", type=int, default=20, help="timings of each copy figure")
    parser.add_argument("--bin-dir", default=benchlib.DEFAULT_BIN_DIR, help="where kubeps is")
    args = parser.parse_args()
    args.bin_dir = os.path.abspath(args.bin_dir)
    measure_copy(args.repeats)

    folder = tempfile.mkdtemp(prefix="kubeps-rollback-copies-")
    print("job: the MLP example, optimizer none, 2 servers x 2 workers, %d steps, checkpoints "
          "every %d, %d round(s); %s" % (args.steps, args.interval, args.rounds, sys.executable),
          flush=True)
    speeds = {"copies": [], "none kept": []}
    for round_, side in benchlib.in_turns(speeds, args.rounds):
        manifest = job_manifest(folder, args, "rollback-copies-%d-%s" % (
            round_, "kept" if side == "copies" else "none"))
        speed = run_job(manifest, args, None if side == "copies" else 0)
        speeds[side].append(speed)
        print("  round %d, %s: %.1f steps/sec" % (round_ + 1, side, speed), flush=True)
    kept, none = benchlib.median(speeds["copies"]), benchlib.median(speeds["none kept"])
    print("median steps/sec: copies kept %.1f, none kept %.1f; ratio %.3f" % (kept, none,
                                                                             kept / none))


if __name__ == "__main__":
    main()
