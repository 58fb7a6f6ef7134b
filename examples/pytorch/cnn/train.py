"""The seed CNN on Fashion-MNIST in plain PyTorch, trained on kubeps' parameter servers.

The model is the one of the built-in trainer's CNN: conv 5x5x32 'same', ReLU,
max-pool 2, conv 5x5x64 'same', ReLU, max-pool 2, dense 1024, ReLU, dense 10.
Each worker of the TrainingJob in trainingjob.yaml (2 servers, 2 workers,
sync, Adam 1e-3 on the servers, 64 examples per worker and step, so a global
batch of 128) runs this script beside its kubeps agent; the three lines after
"kubeps:" below make the ordinary training loop distributed.

The batch of a step is a pure function of (seed, step, rank) (see
../fashion_mnist.py), so a worker that is restarted or rolled back computes
the batches it would have computed anyway.

Progress lines have the built-in trainer's format (worker-agent/training_loop.cc),
so the tools that read a job's output read this one's too:

    epoch 1/3 step 120/468 total_steps 120 steps/sec 3.10 samples/sec 198.4 loss 0.5123

The model trains on the GPU where torch sees one (--device, default auto): on
an H200 the 1-server, 1-worker job ran at 58-61 steps/sec, 29-31 on 16 CPU
threads; the servers never see the difference.

Rank 0 reports the test accuracy at the end: "test accuracy 0.9057 ...", as
measured after the 3 epochs (1404 steps) of trainingjob.yaml on a 2-core
machine, at a median of 10.6 steps/sec (the job took 140 s, 26 s of it the
test accuracy, computed in batches of 1000 then: 3 s now).

bench/torch_vs_ddp.py imports make_model() and ProgressPrinter from here so
that it measures PyTorch's DistributedDataParallel on the same model;
bench/scaling.py imports ProgressPrinter.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

# The data reading is shared with the other examples: fashion_mnist.py, one folder up.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fashion_mnist import DEFAULT_DATA_DIR, StepSampler, evaluate, load  # noqa: E402


def make_model():
    """The seed CNN; its input is (N, 1, 28, 28)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),   # 32x14x14
        nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),  # 64x7x7
        nn.Flatten(), nn.Linear(64 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 10))


def limit_threads():
    """One intra-op thread per worker process.

    This machine has 2 cores and a job puts 2 workers on it, beside 2 servers,
    a scheduler and 2 agents. With torch's default (a thread per core) the
    2 workers run 4 compute threads on 2 cores; OpenMP's threads then wait at
    each operator's barrier for a sibling that was descheduled, and a step is
    slower than with one thread, while the agents and servers starve.
    $KUBEPS_TORCH_THREADS sets another count (on a machine with more cores).
    """
    torch.set_num_threads(int(os.environ.get("KUBEPS_TORCH_THREADS", "1")))


class ProgressPrinter:
    """Prints the built-in trainer's progress line every `interval_s` seconds,
    or every `every_steps` steps when that is set (the benchmark's fixed
    windows), and at the last step."""

    def __init__(self, epochs, steps_per_epoch, total_steps, local_batch,
                 interval_s=2.0, every_steps=0):
        self.epochs, self.steps_per_epoch = epochs, steps_per_epoch
        self.total_steps, self.local_batch = total_steps, local_batch
        self.interval_s, self.every_steps = interval_s, every_steps
        self._reset()

    def _reset(self):
        self.start, self.steps, self.loss_sum = time.time(), 0, 0.0

    def step_done(self, step, loss):
        self.steps += 1
        self.loss_sum += loss
        last = step + 1 == self.total_steps
        now = time.time()
        due = (self.steps >= self.every_steps if self.every_steps > 0
               else now - self.start >= self.interval_s)
        if not (last or due):
            return
        seconds = now - self.start
        rate = self.steps / seconds if seconds > 0 else 0.0
        epoch, within = divmod(step, self.steps_per_epoch)
        print("epoch %d/%d step %d/%d total_steps %d steps/sec %.2f samples/sec %.1f loss %.4f"
              % (epoch + 1, self.epochs, within + 1, self.steps_per_epoch, step + 1, rate,
                 rate * self.local_batch, self.loss_sum / self.steps), flush=True)
        self._reset()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop after this many global steps (0: all the epochs')")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per worker and step")
    parser.add_argument("--wait-in-step", action="store_true",
                        help="optimizer.step() waits for every new value (no model=): for the "
                             "benchmark's comparison")
    parser.add_argument("--seed", type=int, default=1, help="initial parameters and data order")
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR", DEFAULT_DATA_DIR))
    parser.add_argument("--progress-interval-ms", type=int, default=2000,
                        help="time between progress lines (the built-in trainer's default)")
    parser.add_argument("--progress-every-steps", type=int, default=0,
                        help="a progress line every this many steps instead (fixed windows)")
    parser.add_argument("--no-test", action="store_true", help="skip the test accuracy")
    parser.add_argument("--device", default="auto",
                        help="where the model trains: cpu, cuda, cuda:N, or auto (cuda when "
                             "torch sees a GPU, as in a pod given nvidia.com/gpu)")
    return parser.parse_args(argv)


def pick_device(name):
    """The torch device of --device. The parameter servers see no difference:
    kubeps.torch copies each gradient out of the GPU into the agent's shared
    memory, and the new values back in, one copy_ each way."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device %s: torch sees no CUDA device" % name)
    return device


def main():
    import kubeps.torch as kps  # here, so that the benchmark's DDP side needs no kubeps

    args = parse_args()
    limit_threads()
    device = pick_device(args.device)
    torch.manual_seed(args.seed)  # rank 0's initial values are the job's
    # The whole training set (188 MB) goes to the device once, not a batch a step.
    train_images, train_labels = (t.to(device) for t in load(args.data_dir, "train",
                                                             shape=(1, 28, 28)))
    model = make_model().to(device)
    # With the job's servers running an optimizer (spec.optimizer: adam here),
    # the servers update the parameters and this optimizer is not stepped; with
    # spec.optimizer.name: none it is, on the averaged gradients.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    # kubeps: connect to this pod's agent, push the gradients through it, and
    # start every worker from the same parameters. With model=, each layer
    # waits for its new values just before its next forward, not step().
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         model=None if args.wait_in_step else model)
    kps.broadcast_parameters(model.state_dict(), root_rank=0)

    rank, size = kps.rank(), kps.size()
    sampler = StepSampler(len(train_images), args.batch_size, rank, size, args.seed)
    total = sampler.steps_per_epoch * args.epochs
    if args.max_steps > 0:
        total = min(total, args.max_steps)
    print("rank %d of %d, %d steps (%d epochs of %d) of %d x %d examples, %d torch thread(s)%s"
          % (rank, size, total, args.epochs, sampler.steps_per_epoch, size, args.batch_size,
             torch.get_num_threads(), "" if device.type == "cpu" else ", on " + str(device)),
          flush=True)
    progress = ProgressPrinter(args.epochs, sampler.steps_per_epoch, total, args.batch_size,
                               args.progress_interval_ms / 1000.0, args.progress_every_steps)
    start = time.time()
    for step in kps.steps(total):
        batch = sampler.indices(step).to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_images[batch]), train_labels[batch])
        loss.backward()
        optimizer.step()
        progress.step_done(step, loss.item())
    seconds = time.time() - start

    if rank == 0 and not args.no_test:
        test_images, test_labels = (t.to(device) for t in load(args.data_dir, "t10k",
                                                               shape=(1, 28, 28)))
        accuracy, test_loss = evaluate(model, test_images, test_labels)
        print("test accuracy %.4f (test loss %.4f) after %d steps, %.1f s in this process"
              % (accuracy, test_loss, total, seconds), flush=True)
    kps.finish()


if __name__ == "__main__":
    main()
