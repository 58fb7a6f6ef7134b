"""A plain PyTorch MLP on Fashion-MNIST, trained on kubeps' parameter servers.

Each worker of the TrainingJob in trainingjob.yaml runs this script beside its
kubeps agent; three lines (after the comment "kubeps:") make an ordinary training loop
distributed, in the manner of Horovod and BytePS:

    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=...)
    kps.broadcast_parameters(model.state_dict(), root_rank=0)

and `for step in kps.steps(total)` walks the global steps: from 0 on a new job,
from the servers' step when this process was restarted, from the resume step
after a rollback.

The data set is Fashion-MNIST's four IDX files (Debian's dataset-fashion-mnist
puts them in /usr/share/datasets/fashion-mnist; $DATA_DIR or --data-dir names
another folder), read with gzip and struct. The batch of a step is a pure
function of (seed, step, rank): each epoch's order comes from a generator
seeded with (seed, epoch), and worker r takes the r-th slice of the step's
global batch. So a worker that is killed and restarted, or rolled back,
computes exactly the batches it would have computed anyway.

Rank 0 reports the test accuracy at the end: "test accuracy 0.8412 ...".
"""
import argparse
import gzip
import os
import struct
import time

import torch
import torch.nn.functional as F

import kubeps.torch as kps

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip) as a uint8 tensor of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load(data_dir, prefix):
    """(images as float32 rows of 784 in [0, 1], labels as int64) of train or t10k."""
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    return images.reshape(len(images), -1).float().div_(255), labels.long()


class StepSampler:
    """The examples worker `rank` of `size` trains on at global step `step`."""

    def __init__(self, num_examples, batch_size, rank, size, seed):
        self.num_examples, self.batch_size = num_examples, batch_size
        self.rank, self.size, self.seed = rank, size, seed
        self.steps_per_epoch = num_examples // (batch_size * size)
        self._epoch, self._order = None, None

    def indices(self, step):
        epoch, within = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 1000003 + epoch)
            self._epoch, self._order = epoch, torch.randperm(self.num_examples, generator=generator)
        start = (within * self.size + self.rank) * self.batch_size
        return self._order[start:start + self.batch_size]


def evaluate(model, images, labels):
    model.eval()
    with torch.no_grad():
        logits = model(images)
        loss = F.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    model.train()
    return accuracy, loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="global steps of the job")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per worker and step")
    parser.add_argument("--seed", type=int, default=1, help="initial parameters and data order")
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR", DEFAULT_DATA_DIR))
    parser.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    args = parser.parse_args()

    torch.manual_seed(args.seed)  # rank 0's initial values are the job's
    train_images, train_labels = load(args.data_dir, "train")
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    # With the job's servers running an optimizer (spec.optimizer: adam here),
    # the servers update the parameters and this optimizer is not stepped; with
    # spec.optimizer.name: none it is, on the averaged gradients.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    # kubeps: connect to this pod's agent, push the gradients through it, and
    # start every worker from the same parameters.
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)

    rank, size = kps.rank(), kps.size()
    sampler = StepSampler(len(train_images), args.batch_size, rank, size, args.seed)
    print("rank %d of %d, %d steps of %d x %d examples" % (rank, size, args.steps, size,
                                                           args.batch_size), flush=True)
    start = time.time()
    for step in kps.steps(args.steps):
        batch = sampler.indices(step)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_images[batch]), train_labels[batch])
        loss.backward()
        optimizer.step()
        if (step + 1) % args.log_every == 0:
            print("step %d/%d loss %.4f" % (step + 1, args.steps, loss.item()), flush=True)
    seconds = time.time() - start

    if rank == 0:
        test_images, test_labels = load(args.data_dir, "t10k")
        accuracy, test_loss = evaluate(model, test_images, test_labels)
        print("test accuracy %.4f (test loss %.4f) after %d steps, %.1f s in this process"
              % (accuracy, test_loss, args.steps, seconds), flush=True)
    kps.finish()


if __name__ == "__main__":
    main()
