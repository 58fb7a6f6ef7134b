#!/usr/bin/python3
"""Steps/sec of the PyTorch CNN job through kubeps beside PyTorch's own DistributedDataParallel.

Three ways to train examples/pytorch/cnn/train.py's model (the seed CNN) on
this machine, with the same global batch (64 examples per process, 2
processes), the same data order, the same Adam 1e-3 and one torch thread per
process:

  kubeps  `kubeps run` of a copy of examples/pytorch/cnn/trainingjob.yaml:
          2 servers (Adam there), 2 workers, sync, each worker's train.py
          beside its `kubeps-agent --serve` sidecar; each layer waits for its
          new values just before its next forward (DistributedOptimizer's
          model=);
  waits   the same with train.py --wait-in-step: optimizer.step() waits for
          every new value (no model=);
  DDP     2 processes of this script with init_process_group("gloo") on
          loopback, DistributedDataParallel around the model, the all-reduced
          gradients stepped by each process's own Adam.

They alternate (kubeps, waits, DDP, DDP, waits, kubeps, ...) --rounds times,
so that the machine's drift falls on all. Each run does --warmup + --steps steps and
prints a progress line (the built-in trainer's format) every --window steps;
a run's figures are worker 0's steps/sec over the windows that start after
the warm-up (start-up, the first steps' allocations and the evaluation are
excluded). Prints the exact command lines, every window, the median of each
side over all its windows and the ratios kubeps / DDP (above 1: kubeps
faster) and kubeps / waits (what overlapping the forward pass gains).

Usage (run it with a Python that has torch, nothing else running meanwhile):

    /usr/bin/python3 bench/torch_vs_ddp.py \
        [--steps 300] [--warmup 30] [--window 30] [--rounds 1] [--bin-dir DIR]

Standard library and torch only; not a test.

Measured on the 2-core development machine (2026-11-26, --rounds 2, the other
settings the defaults, tensors through shared memory between each agent and
the servers): kubeps 9.30 steps/sec, waits 8.88, DDP 9.77; kubeps/DDP 0.952,
waits/DDP 0.909, kubeps/waits 1.048. On another 2-core machine (2026-11-27,
--rounds 2), with the hooks' gradients sent in buckets: kubeps 11.78, waits
14.39, DDP 10.52; kubeps/DDP 1.120, waits/DDP 1.369. With
KUBEPS_BUCKET_BYTES=0 in the environment (one request per parameter, as
before), the next run: kubeps/DDP 1.118, waits/DDP 0.893. Every core is busy, so only CPU spent
matters: per step each worker hands its 13 MB of gradients to the servers
and takes 13 MB of parameters back through its agent, and the servers run on
the two cores the workers compute on.
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
    return benchlib.window_speeds(lines, "ddp-0" if side == "DDP" else "worker-0/trainer", warmup)


def program_args(args):
    return ["--epochs", "3", "--batch-size", str(BATCH), "--max-steps",
            str(args.warmup + args.steps), "--progress-every-steps", str(args.window), "--no-test"]


def kubeps_manifest(folder, args, extra_args=()):
    """examples/pytorch/cnn/trainingjob.yaml with the benchmark's step count and
    windows, its program run by this Python from the example's folder."""
    container = {
        "name": "trainer", "image": "kubeps/example-pytorch-cnn:0.1.0",
        "command": [sys.executable, TRAIN_PY], "args": program_args(args) + list(extra_args),
        "env": [{"name": "DATA_DIR", "value": benchlib.DATA_DIR},
                {"name": "KUBEPS_TORCH_THREADS", "value": "1"}],
    }
    return benchlib.write_job(folder, "bench-torch-vs-ddp" + "".join(extra_args), {
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
    folder = tempfile.mkdtemp(prefix="kubeps-torch-vs-ddp-")
    manifests = {"kubeps": kubeps_manifest(folder, args),
                 "waits": kubeps_manifest(folder, args, ["--wait-in-step"])}

    print("seed CNN, 2 processes x %d examples, 1 torch thread each, %d steps after %d warm-up, "
          "windows of %d steps, %d round(s); %s" % (BATCH, args.steps, args.warmup, args.window,
                                                   args.rounds, sys.executable), flush=True)
    speeds = {"kubeps": [], "waits": [], "DDP": []}
    for round_, side in benchlib.in_turns(speeds, args.rounds):
        print("round %d, %s:" % (round_ + 1, side), flush=True)
        start = time.time()
        lines = run_ddp(args) if side == "DDP" else run_kubeps(manifests[side], args)
        found = window_speeds(lines, side, args.warmup)
        if len(found) != args.steps // args.window:
            sys.exit("%s: %d timing windows, expected %d:\n%s" % (
                side, len(found), args.steps // args.window, "\n".join(lines)))
        speeds[side] += found
        print("  steps/sec of each window: %s (run %.1f s)"
              % (" ".join("%.2f" % s for s in found), time.time() - start), flush=True)

    median = {side: benchlib.median(found) for side, found in speeds.items()}
    print("median steps/sec over %d windows each: kubeps %.2f, waits %.2f, DDP %.2f; "
          "kubeps/DDP %.3f, waits/DDP %.3f, kubeps/waits %.3f"
          % (len(speeds["kubeps"]), median["kubeps"], median["waits"], median["DDP"],
             median["kubeps"] / median["DDP"], median["waits"] / median["DDP"],
             median["kubeps"] / median["waits"]))


if __name__ == "__main__":
    main()
