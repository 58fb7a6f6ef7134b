"""Fashion-MNIST for the PyTorch examples: the four IDX files, a sampler that
makes each step's batch a pure function of (seed, step, rank), and the test
accuracy.

The files are those of Debian's dataset-fashion-mnist, in
/usr/share/datasets/fashion-mnist; $DATA_DIR or a program's --data-dir names
another folder. They are read with gzip and struct, so the examples need
nothing beyond torch.

Why the batch depends only on the global step: a worker that is killed and
restarted, or rolled back, must compute exactly the batches it would have
computed anyway, so that the job ends where a run without the fault ends.
"""
import gzip
import os
import struct

import torch
import torch.nn.functional as F

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


def load(data_dir, prefix, shape=(784,)):
    """(images as float32 in [0, 1] of `shape` each, labels as int64) of train or t10k.

    shape (784,) gives the rows an MLP takes; (1, 28, 28) the images a CNN takes.
    """
    images = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    return images.reshape((len(images),) + tuple(shape)).float().div_(255), labels.long()


class StepSampler:
    """The examples worker `rank` of `size` trains on at global step `step`.

    Each epoch's order comes from a generator seeded with (seed, epoch), and
    worker r takes the r-th slice of the step's global batch (indices), or
    the run of it that kubeps gives it (run, with kubeps.torch.examples(),
    whose cut follows an elastic job's workers); the examples left over at an
    epoch's end (fewer than a global batch) are not used.
    """

    @classmethod
    def of_global_batch(cls, num_examples, global_batch, seed):
        """A sampler whose steps are cut into runs by the job (run)."""
        return cls(num_examples, global_batch, 0, 1, seed)

    def __init__(self, num_examples, batch_size, rank, size, seed):
        self.num_examples, self.batch_size = num_examples, batch_size
        self.rank, self.size, self.seed = rank, size, seed
        self.steps_per_epoch = num_examples // (batch_size * size)
        if self.steps_per_epoch == 0:
            raise ValueError("global batch %d is larger than the data set (%d examples)"
                             % (batch_size * size, num_examples))
        self._epoch, self._order = None, None

    def indices(self, step):
        return self.run(step, self.rank * self.batch_size, (self.rank + 1) * self.batch_size)

    def run(self, step, first, end):
        """The examples [first, end) of the global batch of `step`."""
        epoch, within = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed * 1000003 + epoch)
            self._epoch, self._order = epoch, torch.randperm(self.num_examples, generator=generator)
        start = within * self.size * self.batch_size
        return self._order[start + first:start + end]


def evaluate(model, images, labels, batch_size=64):
    """(accuracy, mean loss) of `model` on the test set, in batches of a
    worker's training batch: the CNN's convolutions on one thread (Debian's
    torch 1.13) took 26 s over the 10,000 images in batches of 1000, 10 s in
    batches of 128 and 3.4 s in batches of 64, whose activations stay in
    the cache."""
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(images[start:start + batch_size])
            batch_labels = labels[start:start + batch_size]
            loss_sum += F.cross_entropy(logits, batch_labels, reduction="sum").item()
            correct += (logits.argmax(dim=1) == batch_labels).sum().item()
    model.train()
    return correct / len(images), loss_sum / len(images)
