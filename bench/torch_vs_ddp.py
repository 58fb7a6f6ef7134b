#!/usr/bin/python3
"""Steps/sec of the PyTorch CNN job through kubeps beside PyTorch's own DistributedDataParallel.

Two ways to train examples/pytorch/cnn/train.py's model (the seed CNN) on this
machine, with the same global batch (64 examples per process, 2 processes),
the same data order, the same Adam 1e-3 and one torch thread per process:

  kubeps  `kubeps run` of a copy of examples/pytorch/cnn/trainingjob.yaml:
          2 servers (Adam there), 2 workers, sync, each worker's train.py
          beside its `kubeps-agent --serve` sidecar;
  DDP     2 processes of this script with init_process_group("gloo") on
          loopback, DistributedDataParallel around the model, the all-reduced
          gradients stepped by each process's own Adam.

The two alternate (kubeps, DDP, DDP, kubeps, ...) --rounds times, so that
the machine's drift falls on both. Each run does --warmup + --steps steps and
prints a progress line (the built-in trainer's format) every --window steps;
a run's figures are worker 0's steps/sec over the windows that start after
the warm-up (start-up, the first steps' allocations and the evaluation are
excluded). Prints the exact command lines, every window, the median of each
side over all its windows and the ratio kubeps / DDP (above 1: kubeps faster).

Usage (run it with a Python that has torch, holding the machine for the whole run):

    flock /tmp/cpu.lock /usr/bin/python3 bench/torch_vs_ddp.py \
        [--steps 300] [--warmup 30] [--window 30] [--rounds 1] [--bin-dir DIR]

Standard library and torch only; not a test.

Measured on the 2-core development machine (2026-11-23, --rounds 3, the other
settings the defaults): kubeps 5.38 steps/sec, DDP 6.06, kubeps/DDP 0.889
(0.797 the same day before Push and Pull went around protobuf's copies). The
issue's goal (kubeps at least as fast as DDP) is not met there. Every core is
busy (a profile shows under 3% idle), so only CPU spent matters: per step each
worker sends its 13 MB of gradients to the servers and pulls 13 MB of
parameters back through its agent, twice DDP's bytes through loopback TCP
(each crossing the kernel twice), and the servers run on the two cores the
workers compute on.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import benchlib

EXAMPLE_DIR = os.path.join(benchlib.SOURCE_DIR, "examples", "pytorch", "cnn")
TRAIN_PY = os.path.join(EXAMPLE_DIR, "train.py")
sys.path.insert(0, EXAMPLE_DIR)

BATCH = 64
WORKERS = 2


def window_speeds(lines, side, warmup):
    """Worker 0's steps/sec of each window that starts at or after the warm-up:
    "[worker-0/trainer] epoch ..." from kubeps run, "[ddp-0] epoch ..." from DDP."""
    return benchlib.window_speeds(lines, "worker-0/trainer" if side == "kubeps" else "ddp-0",
                                  warmup)


def program_args(args):
    return ["--epochs", "3", "--batch-size", str(BATCH), "--max-steps",
            str(args.warmup + args.steps), "--progress-every-steps", str(args.window), "--no-test"]


def kubeps_manifest(folder, args):
    """examples/pytorch/cnn/trainingjob.yaml with the benchmark's step count and
    windows, its program run by this Python from the example's folder."""
    container = {
        "name": "trainer", "image": "kubeps/example-pytorch-cnn:0.1.0",
        "command": [sys.executable, TRAIN_PY], "args": program_args(args),
        "env": [{"name": "DATA_DIR", "value": benchlib.DATA_DIR},
                {"name": "KUBEPS_TORCH_THREADS", "value": "1"}],
    }
    return benchlib.write_job(folder, "bench-torch-vs-ddp", {
        "mode": "sync", "optimizer": {"name": "adam", "learningRate": 0.001},
        "replicaSpecs": {"ps": {"replicas": 2},
                         "worker": {"replicas": WORKERS, "template": {"spec": {
                             "containers": [container]}}}}})


def run_kubeps(manifest, args):
    with open(manifest) as f:
        container = json.load(f)["spec"]["replicaSpecs"]["worker"]["template"]["spec"][
            "containers"][0]
    command = [os.path.join(args.bin_dir, "kubeps"), "run", manifest]
    settings = {"PYTHONPATH": os.path.join(benchlib.SOURCE_DIR, "python")}
    print("    each worker's program: %s" % benchlib.shell_line(
        container["command"] + container["args"],
        {e["name"]: e["value"] for e in container["env"]}), flush=True)
    return benchlib.run(command, settings)


def run_ddp(args):
    """Two processes of this script's --ddp-rank mode; their lines, tagged "[ddp-R] "."""
    port = benchlib.free_port()
    settings = {"GLOO_SOCKET_IFNAME": "lo", "KUBEPS_TORCH_THREADS": "1",
                "DATA_DIR": benchlib.DATA_DIR}
    commands = [[sys.executable, os.path.abspath(__file__), "--ddp-rank", str(rank),
                 "--ddp-port", str(port)] + program_args(args) for rank in range(WORKERS)]
    return benchlib.run_ranks(commands, settings, "ddp")


def ddp_worker(rank, port, argv):
    """One DDP process: train.py's loop with DistributedDataParallel in place of kubeps."""
    import torch
    import torch.distributed as dist
    import train  # examples/pytorch/cnn/train.py: the model, threads, progress lines
    from fashion_mnist import StepSampler, load

    args = train.parse_args(argv)
    train.limit_threads()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=WORKERS)
    torch.manual_seed(args.seed)  # DDP broadcasts rank 0's parameters at construction
    images, labels = load(args.data_dir, "train", shape=(1, 28, 28))
    model = torch.nn.parallel.DistributedDataParallel(train.make_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    sampler = StepSampler(len(images), args.batch_size, rank, WORKERS, args.seed)
    total = min(sampler.steps_per_epoch * args.epochs, args.max_steps or 1 << 62)
    progress = train.ProgressPrinter(args.epochs, sampler.steps_per_epoch, total, args.batch_size,
                                     args.progress_interval_ms / 1000.0, args.progress_every_steps)
    benchlib.torch_train(model, optimizer, images, labels, sampler, progress, total)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="timed steps of each run")
    parser.add_argument("--warmup", type=int, default=30, help="steps before the timing")
    parser.add_argument("--window", type=int, default=30, help="steps of each timing window")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side, alternated")
    parser.add_argument("--bin-dir", default=benchlib.DEFAULT_BIN_DIR, help="where kubeps is")
    parser.add_argument("--ddp-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--ddp-port", type=int, default=0, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.ddp_rank >= 0:
        ddp_worker(args.ddp_rank, args.ddp_port, rest)
        return
    if args.steps % args.window or args.warmup % args.window:
        sys.exit("--steps and --warmup must be multiples of --window")
    args.bin_dir = os.path.abspath(args.bin_dir)
    manifest = kubeps_manifest(tempfile.mkdtemp(prefix="kubeps-torch-vs-ddp-"), args)

    print("seed CNN, 2 processes x %d examples, 1 torch thread each, %d steps after %d warm-up, "
          "windows of %d steps, %d round(s); %s" % (BATCH, args.steps, args.warmup, args.window,
                                                   args.rounds, sys.executable), flush=True)
    speeds = {"kubeps": [], "DDP": []}
    for round_ in range(args.rounds):
        order = ("kubeps", "DDP") if round_ % 2 == 0 else ("DDP", "kubeps")
        for side in order:
            print("round %d, %s:" % (round_ + 1, side), flush=True)
            start = time.time()
            lines = run_kubeps(manifest, args) if side == "kubeps" else run_ddp(args)
            found = window_speeds(lines, side, args.warmup)
            if len(found) != args.steps // args.window:
                sys.exit("%s: %d timing windows, expected %d:\n%s" % (
                    side, len(found), args.steps // args.window, "\n".join(lines)))
            speeds[side] += found
            print("  steps/sec of each window: %s (run %.1f s)"
                  % (" ".join("%.2f" % s for s in found), time.time() - start), flush=True)

    kubeps_median = benchlib.median(speeds["kubeps"])
    ddp_median = benchlib.median(speeds["DDP"])
    print("median steps/sec over %d windows each: kubeps %.2f, DDP %.2f; kubeps/DDP %.3f"
          % (len(speeds["kubeps"]), kubeps_median, ddp_median, kubeps_median / ddp_median))


if __name__ == "__main__":
    main()
