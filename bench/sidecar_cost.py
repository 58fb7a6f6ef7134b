#!/usr/bin/python3
"""What the sidecar costs: the built-in CNN job through the pod's agent beside the in-process KV client.

The same training, two ways, with `kubeps run` on this machine (the seed CNN
on Fashion-MNIST, 2 servers with Adam 1e-3, 2 workers, sync, 64 examples per
worker and step):

  in-process  spec.model: cnn; each worker is `kubeps-agent`, whose trainer
              links the KV client (KVWorker::Start) and talks gRPC to the
              servers itself;
  sidecar     the job brings its own program: each worker's container runs
              `kubeps-agent --connect --model=cnn`, the same trainer on the
              sidecar client (KVWorker::Connect), beside the worker's
              `kubeps-agent --serve`, which holds the registration, the
              resends and the gRPC; tensors cross between the two through
              the pod's shared memory, as a user's PyTorch or C++ program's do.

The two alternate (in-process, sidecar, sidecar, in-process, ...) --rounds
times, so that the machine's drift falls on both. Each run trains
--warmup + --steps steps (KUBEPS_MAX_STEPS) with a progress line every
--window-ms; a run's figures are worker 0's steps/sec over the windows that
start after the warm-up. Prints the exact commands, every window, the median
of each side over all its windows and the ratio sidecar / in-process (1.0:
no cost; 0.95: 5% slower).

Usage (nothing else running meanwhile):

    python3 bench/sidecar_cost.py \
        [--steps 120] [--warmup 20] [--window-ms 2000] [--rounds 2] [--bin-dir DIR]

Standard library only; not a test.

Measured on the 2-core development machine (2026-11-23, --rounds 3, the other
settings the defaults): in-process 5.05 steps/sec, sidecar 4.91, ratio 0.971
(2.9% slower; the issue's bound is 5%). The sidecar adds a copy of each
tensor into the shared memory and one out, a few socket messages per step,
and a process per worker. Since then, on one host, the in-process client
keeps the model in its own shared segment and the program's regions are
that segment too (no copy at all): 2026-11-27, --rounds 3, in-process 23.21,
sidecar 22.36, ratio 0.963 (0.951 for the build before either, the same day).
"""
import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def manifest(folder, name, window_ms, bin_dir, through_sidecar):
    spec = {"mode": "sync", "optimizer": {"name": "adam", "learningRate": 0.001},
            "batchSize": 64, "epochs": 1, "progressIntervalMs": window_ms,
            "replicaSpecs": {"ps": {"replicas": 2}, "worker": {"replicas": 2}}}
    if through_sidecar:
        container = {"name": "trainer", "image": "kubeps/agent:0.1.0",
                     "command": [os.path.join(bin_dir, "kubeps-agent"), "--connect",
                                 "--model=cnn", "--dataset=" + DATA_DIR]}
        spec["replicaSpecs"]["worker"]["template"] = {"spec": {"containers": [container]}}
    else:
        spec.update({"model": "cnn", "dataset": {"path": DATA_DIR}})
    return benchlib.write_job(folder, name, spec)


def run(path, env):
    import jobtools  # reads KUBEPS_BIN_DIR, set by main()
    print("  $ KUBEPS_MAX_STEPS=%s %s run %s" % (env["KUBEPS_MAX_STEPS"], jobtools.KUBEPS, path),
          flush=True)
    with open(path) as f:
        worker = json.load(f)["spec"]["replicaSpecs"]["worker"]
    if "template" in worker:
        command = worker["template"]["spec"]["containers"][0]["command"]
        print("    each worker's program: " + " ".join(shlex.quote(w) for w in command),
              flush=True)
    code, job = jobtools.run_job(path, env=env, timeout=1800)
    if code != 0:
        sys.exit("kubeps run failed:\n" + job.output())
    return [line for _, line in job.lines]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=120, help="timed steps of each run")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timing")
    parser.add_argument("--window-ms", type=int, default=2000, help="progress interval")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternated")
    parser.add_argument("--bin-dir", default=os.path.join(SOURCE_DIR, "build", "bin"))
    args = parser.parse_args()
    os.environ["KUBEPS_BIN_DIR"] = os.path.abspath(args.bin_dir)
    folder = tempfile.mkdtemp(prefix="kubeps-sidecar-cost-")
    sides = {"in-process": manifest(folder, "cnn-in-process", args.window_ms,
                                    os.environ["KUBEPS_BIN_DIR"], through_sidecar=False),
             "sidecar": manifest(folder, "cnn-sidecar", args.window_ms,
                                 os.environ["KUBEPS_BIN_DIR"], through_sidecar=True)}
    env = {"KUBEPS_MAX_STEPS": str(args.warmup + args.steps)}
    speeds = {side: [] for side in sides}
    for _, side in benchlib.in_turns(["in-process", "sidecar"], args.rounds):
        print("%s:" % side, flush=True)
        windows = benchlib.window_speeds(run(sides[side], env), "worker 0", args.warmup)
        if not windows:
            sys.exit("no progress window after the warm-up: raise --steps or lower --window-ms")
        print("    windows: " + " ".join("%.2f" % w for w in windows), flush=True)
        speeds[side] += windows
    medians = {side: statistics.median(values) for side, values in speeds.items()}
    for side in sides:
        print("%-10s median %.2f steps/sec over %d windows" % (side, medians[side],
                                                               len(speeds[side])))
    ratio = medians["sidecar"] / medians["in-process"]
    print("sidecar / in-process: %.3f (%.1f%% %s)" % (
        ratio, abs(1 - ratio) * 100, "slower" if ratio < 1 else "faster"))


if __name__ == "__main__":
    main()
