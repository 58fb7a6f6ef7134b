#!/usr/bin/python3
"""Scaling: the built-in models' steps/sec on 2 servers x 2 workers, in one process, and under PyTorch.

For each of kubeps' built-in models (spec.model mlp and cnn, on Fashion-MNIST,
global batch 128, Adam with learning rate 1e-3, the optimizer of the
manifest this script writes), four ways to train on this machine:

  2x2      `kubeps run` of the manifest: 1 scheduler, 2 servers (Adam there,
           each on its shard), 2 workers, sync, batchSize 64 per worker;
  local    `kubeps train-local` of the same manifest: the same model and
           optimizer code in one process without servers, batch 64 x 2;
  DDP      2 processes of this script with init_process_group("gloo") on
           loopback, 64 examples each, DistributedDataParallel around
           PyTorch's copy of the model, each process stepping its own
           torch.optim.Adam(lr=1e-3) on the all-reduced gradients;
  torch    PyTorch's copy of the model in one process, batch 128, a torch
           thread per core: what `local` is to be measured against.

The PyTorch models are worker-agent/trainer/models.cc's layers: MLP
784-256-10 with ReLU; CNN conv 5x5x32 'same', max-pool 2, ReLU, conv 5x5x64
'same', max-pool 2, ReLU, dense 3136-1024, ReLU, dense 1024-10; softmax
cross-entropy, mean over the batch. (The built-in CNN runs each ReLU after
its pool, which gives the same values as before it on a quarter of the
elements; the PyTorch copy does the same.) The data are Debian's
Fashion-MNIST files, read by examples/pytorch/fashion_mnist.py.

One torch thread per DDP process: the machine has 2 cores and DDP runs 2
processes, as the 2x2 job runs 2 workers, to which `kubeps run` gives
cores / workers OpenBLAS threads each (1 here). With torch's default of a
thread per core, 4 compute threads would share 2 cores, and OpenMP's
threads would wait at each operator's barrier for a sibling that was
descheduled (examples/pytorch/cnn/train.py's limit_threads()). The local
and torch runs, alone on the machine, get a thread per core (train-local's
default).

The runs alternate (2x2, local, DDP, torch, torch, DDP, ...) --rounds times,
so that the machine's drift falls on every side. Each run trains --warmup +
--steps steps (KUBEPS_MAX_STEPS for kubeps) and prints a progress line every
--window-ms; a run's figure is the median steps/sec of worker 0's (or the
local process's, DDP rank 0's or the torch process's) windows that start
after the warm-up. A
side's figure is the median of its runs'. Prints the exact commands, every
run's figure (and, for kubeps' jobs, the share of worker 0's training it
waited for its pushes and pulls, as its last line says), the medians and
the ratios with issue 12's goals (and
beside each, the median of the rounds' own ratios: a round's runs are
adjacent, so they share the machine's speed of the minute): 2x2 / DDP
at least 1.0 for both models, 2x2 / local at least 0.9 for the CNN, local /
torch at least 1.0 for the MLP, each PASS or BELOW. --env KEY=VALUE (repeatable) is set for the kubeps runs,
e.g. KUBEPS_OVERLAP=1 to push layer by layer during backward where kubeps
run would push after it (workers of one thread filling every core), or 0 the
other way round. --baseline-bin-dir DIR adds two sides, "2x2-base" and
"local-base": the same jobs with the kubeps of DIR (a build of an earlier
commit), taking their turns with the others, and the ratios 2x2 / 2x2-base
and local / local-base, so that a change is measured against the code
before it in one sitting. --sides picks which sides run (e.g.
2x2,2x2-base,local,local-base).

Usage (nothing else running meanwhile; /usr/bin/python3 has torch):

    /usr/bin/python3 bench/scaling.py --rounds 3 \\
        [--models mlp,cnn] [--steps N] [--warmup N] [--window-ms 1000] \\
        [--env KUBEPS_OVERLAP=1] [--bin-dir DIR] [--baseline-bin-dir DIR] \\
        [--sides 2x2,2x2-base,local,local-base,DDP,torch]

Standard library and torch only; not a test: the exit code is 0 whatever
the ratios.
"""
import argparse
import math
import os
import re
import sys
import tempfile
import time

import benchlib

PYTORCH_EXAMPLES = os.path.join(benchlib.SOURCE_DIR, "examples", "pytorch")
WORKERS = 2
BATCH = 64  # per worker; global batch 128
LEARNING_RATE = 0.001
# Steps timed and warm-up steps when --steps / --warmup are not given: about
# 10 to 30 s per run for either model on 2 cores.
DEFAULT_STEPS = {"mlp": 3000, "cnn": 120}
DEFAULT_WARMUP = {"mlp": 200, "cnn": 20}
SIDES = ("2x2", "local", "DDP", "torch")
BASELINES = ("2x2-base", "local-base")  # with --baseline-bin-dir
# Goals of issue 12: (numerator, denominator) -> {model: least ratio}.
GOALS = {("2x2", "DDP"): {"mlp": 1.0, "cnn": 1.0}, ("2x2", "local"): {"cnn": 0.9},
         ("local", "torch"): {"mlp": 1.0}}


def make_torch_model(model):
    """PyTorch's copy of kubeps' built-in `model` (worker-agent/trainer/models.cc)."""
    import torch
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2), nn.MaxPool2d(2), nn.ReLU(),   # 32x14x14
        nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.MaxPool2d(2), nn.ReLU(),  # 64x7x7
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 10))


def epochs_for(total_steps):
    return max(1, math.ceil(total_steps / benchlib.STEPS_PER_EPOCH))


def kubeps_manifest(folder, model, total_steps, window_ms):
    return benchlib.write_job(folder, "scaling-" + model, {
        "mode": "sync", "model": model, "dataset": {"path": benchlib.DATA_DIR},
        "optimizer": {"name": "adam", "learningRate": LEARNING_RATE},
        "batchSize": BATCH, "epochs": epochs_for(total_steps), "progressIntervalMs": window_ms,
        "replicaSpecs": {"ps": {"replicas": 2}, "worker": {"replicas": WORKERS}}})


def run_side(side, model, manifest, args):
    """One run of `side`; (its lines, the tag of the process whose windows count)."""
    total = args.warmup + args.steps
    if side == "DDP":
        port = benchlib.free_port()
        commands = [[sys.executable, os.path.abspath(__file__), "--ddp-rank", str(rank),
                     "--ddp-port", str(port), "--models", model, "--warmup", "0",
                     "--steps", str(total), "--window-ms", str(args.window_ms)]
                    for rank in range(WORKERS)]
        return benchlib.run_ranks(commands, {"GLOO_SOCKET_IFNAME": "lo"}, "ddp"), "ddp-0"
    if side == "torch":
        command = [sys.executable, os.path.abspath(__file__), "--torch-local", "--models", model,
                   "--warmup", "0", "--steps", str(total), "--window-ms", str(args.window_ms)]
        return benchlib.run_ranks([command], {}, "torch"), "torch-0"
    settings = dict(args.env, KUBEPS_MAX_STEPS=str(total))
    bin_dir = args.baseline_bin_dir if side in BASELINES else args.bin_dir
    local = side.startswith("local")
    command = [os.path.join(bin_dir, "kubeps"), "train-local" if local else "run", manifest]
    return benchlib.run(command, settings), "local" if local else "worker 0"


def torch_process(model_name, total_steps, window_ms, rank=-1, port=0):
    """PyTorch's step of the built-in model: one DDP process (rank >= 0), its
    gradients all-reduced by DDP, or the whole global batch in one process
    with a torch thread per core (as train-local runs)."""
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(PYTORCH_EXAMPLES, "cnn"))
    import train  # examples/pytorch/cnn/train.py: the progress line's printer
    from fashion_mnist import StepSampler, load

    shape = (784,) if model_name == "mlp" else (1, 28, 28)
    images, labels = load(benchlib.DATA_DIR, "train", shape=shape)
    torch.manual_seed(1)  # DDP broadcasts rank 0's parameters at construction
    model = make_torch_model(model_name)
    if rank >= 0:
        torch.set_num_threads(1)  # the module's docstring says why
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=WORKERS)
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = StepSampler(len(images), BATCH, rank, WORKERS, seed=1)
    else:
        torch.set_num_threads(os.cpu_count() or 1)
        sampler = StepSampler(len(images), BATCH * WORKERS, 0, 1, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    progress = train.ProgressPrinter(epochs_for(total_steps), sampler.steps_per_epoch,
                                     total_steps, sampler.batch_size, window_ms / 1000.0)
    benchlib.torch_train(model, optimizer, images, labels, sampler, progress, total_steps)
    if rank >= 0:
        dist.destroy_process_group()


# Worker 0's last line: the share of its training it waited for its pushes and pulls.
WAITED = re.compile(r"\[worker 0\] test accuracy .*, ([\d.]+)% of it waiting for the exchange")


def measure(model, args, folder):
    """Every side's run figures for `model`, runs interleaved."""
    manifest = kubeps_manifest(folder, model, args.warmup + args.steps, args.window_ms)
    print("\n%s: %d steps after %d warm-up, windows of %d ms, %d round(s); manifest %s"
          % (model, args.steps, args.warmup, args.window_ms, args.rounds, manifest), flush=True)
    figures = {side: [] for side in args.sides}
    for round_, side in benchlib.in_turns(args.sides, args.rounds):
        print("%s round %d, %s:" % (model, round_ + 1, side), flush=True)
        start = time.time()
        lines, tag = run_side(side, model, manifest, args)
        windows = benchlib.window_speeds(lines, tag, args.warmup)
        if not windows:
            sys.exit("%s %s: no progress window after the warm-up (raise --steps or lower "
                     "--window-ms):\n%s" % (model, side, "\n".join(lines)))
        figures[side].append(benchlib.median(windows))
        print("    windows: %s\n    run figure %.2f steps/sec (median of %d windows; "
              "run %.1f s)" % (" ".join("%.2f" % w for w in windows), figures[side][-1],
                               len(windows), time.time() - start), flush=True)
        waited = [m.group(1) for m in map(WAITED.search, lines) if m]
        if waited:  # kubeps' worker 0, over its whole run (warm-up included)
            print("    worker 0 waited for the exchange %s%% of its training" % waited[-1])
    return figures


def report(results, sides):
    print("\nsteps/sec (each side: the median of its runs' figures)")
    print("%-5s %-8s %9s   %s" % ("model", "side", "median", "runs"))
    for model, figures in results.items():
        for side in sides:
            print("%-5s %-8s %9.2f   %s" % (model, side, benchlib.median(figures[side]),
                                          " ".join("%.2f" % f for f in figures[side])))
    print("\nratios (goals of issue 12)")
    pairs = dict(GOALS)
    for baseline in BASELINES:
        pairs[(baseline.split("-")[0], baseline)] = {}
    for (top, bottom), goals in pairs.items():
        if top not in sides or bottom not in sides:
            continue
        for model, figures in results.items():
            ratio = benchlib.median(figures[top]) / benchlib.median(figures[bottom])
            print("%-5s %-14s %6.3f   %s" % (model, "%s / %s" % (top, bottom), ratio,
                                            benchlib.verdict(ratio, goals.get(model)) or
                                            "(no goal)"))
            # Each round's two runs ran one after the other, so their ratio
            # shares the machine's speed of that minute, which the medians
            # of whole sides do not: printed beside, not judged.
            rounds = [a / b for a, b in zip(figures[top], figures[bottom])]
            print("%-5s %-14s %6.3f   the median of the rounds' own ratios: %s"
                  % ("", "", benchlib.median(rounds), " ".join("%.3f" % r for r in rounds)))


def parse_env(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError("expected KEY=VALUE, got %r" % text)
    return key, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    parser.add_argument("--steps", type=int, default=0,
                        help="timed steps of each run (default: mlp %d, cnn %d)"
                        % (DEFAULT_STEPS["mlp"], DEFAULT_STEPS["cnn"]))
    parser.add_argument("--warmup", type=int, default=-1,
                        help="steps before the timing (default: mlp %d, cnn %d)"
                        % (DEFAULT_WARMUP["mlp"], DEFAULT_WARMUP["cnn"]))
    parser.add_argument("--window-ms", type=int, default=1000, help="progress interval")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side, alternated")
    parser.add_argument("--env", action="append", type=parse_env, default=[],
                        metavar="KEY=VALUE", help="set for the kubeps runs (repeatable)")
    parser.add_argument("--bin-dir", default=benchlib.DEFAULT_BIN_DIR, help="where kubeps is")
    parser.add_argument("--baseline-bin-dir", default="",
                        help="a build to compare the kubeps sides against (sides %s)"
                        % ", ".join(BASELINES))
    parser.add_argument("--sides", default="",
                        help="comma-separated, of %s and %s (default: all there are)"
                        % (", ".join(SIDES), ", ".join(BASELINES)))
    parser.add_argument("--ddp-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--ddp-port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--torch-local", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_rank >= 0 or args.torch_local:
        torch_process(args.models, args.steps, args.window_ms, args.ddp_rank, args.ddp_port)
        return
    if args.window_ms < 100:
        sys.exit("--window-ms: at least 100 (spec.progressIntervalMs' least value)")
    models = [m for m in args.models.split(",") if m]
    if not models or any(m not in DEFAULT_STEPS for m in models):
        sys.exit("--models: a comma-separated list of mlp and cnn, not %r" % args.models)
    args.bin_dir = os.path.abspath(args.bin_dir)
    if not os.access(os.path.join(args.bin_dir, "kubeps"), os.X_OK):
        sys.exit("no kubeps in %s: build it, or name the folder with --bin-dir" % args.bin_dir)
    all_sides = SIDES + (BASELINES if args.baseline_bin_dir else ())
    args.sides = tuple(s for s in args.sides.split(",") if s) or all_sides
    if any(side not in all_sides for side in args.sides):
        sys.exit("--sides: a comma-separated list of %s, not %r (%s needs --baseline-bin-dir)"
                 % (", ".join(all_sides), ",".join(args.sides), " and ".join(BASELINES)))
    if args.baseline_bin_dir:
        args.baseline_bin_dir = os.path.abspath(args.baseline_bin_dir)
        if not os.access(os.path.join(args.baseline_bin_dir, "kubeps"), os.X_OK):
            sys.exit("no kubeps in --baseline-bin-dir %s" % args.baseline_bin_dir)
    args.env = dict(args.env)
    given_steps, given_warmup = args.steps, args.warmup
    print("2 servers x 2 workers x %d examples vs 1 process x %d vs DDP 2 x %d (1 torch thread "
          "each) vs torch 1 x %d; Adam %g; kubeps runs' extra environment: %s; %s"
          % (BATCH, BATCH * WORKERS, BATCH, BATCH * WORKERS, LEARNING_RATE,
             " ".join("%s=%s" % kv for kv in args.env.items()) or "none", sys.executable),
          flush=True)
    folder = tempfile.mkdtemp(prefix="kubeps-scaling-")
    results = {}
    for model in models:
        args.steps = given_steps or DEFAULT_STEPS[model]
        args.warmup = given_warmup if given_warmup >= 0 else DEFAULT_WARMUP[model]
        results[model] = measure(model, args, folder)
    report(results, args.sides)


if __name__ == "__main__":
    main()
