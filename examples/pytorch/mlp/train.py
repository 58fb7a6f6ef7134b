"""A plain PyTorch MLP on Fashion-MNIST, trained on kubeps' parameter servers.

Each worker of the TrainingJob in trainingjob.yaml runs this script beside its
kubeps agent; three lines (after the comment "kubeps:") make an ordinary training loop
distributed, in the manner of Horovod and BytePS:

    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=..., model=model)
    kps.broadcast_parameters(model.state_dict(), root_rank=0)

and `for step in kps.steps(total)` walks the global steps this worker
computes: from 0 on a new job, from the servers' step when this process was
restarted, from the resume step after a rollback; in an elastic job
(elasticPolicy: trainingjob-elastic.yaml) from the step it is taken in at, up
to the step it is scaled away at.

The data set is Fashion-MNIST's four IDX files (Debian's dataset-fashion-mnist
puts them in /usr/share/datasets/fashion-mnist; $DATA_DIR or --data-dir names
another folder), read by ../fashion_mnist.py with gzip and struct. A step's
global batch is the manifest's spec.batchSize x its workers, and its examples
a pure function of (seed, step): each epoch's order comes from a generator
seeded with (seed, epoch), and each worker takes its run kps.examples() of the
step's global batch. So a worker that is killed and restarted, or rolled back,
computes exactly the batches it would have computed anyway, and an elastic
job's steps use the same examples whoever computes them.

With `spec.optimizer: {name: none}` the servers only average and this
program's Adam steps; the parameters and Adam's moments are then this
process's alone, and a job resumed over its checkpoints needs them back:
`--state-dir DIR` keeps them in DIR at each checkpoint step, and
kps.resume_with loads those of the step the job resumes at (without it, such
a start is refused). It also says which steps DIR holds: a worker killed after
the servers' checkpoint of a step and before its own save of it takes the job
back to the step before.

Rank 0 reports the test accuracy at the end: "test accuracy 0.8455 ...".
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

import kubeps.torch as kps

# The data reading is shared with the other examples: fashion_mnist.py, one folder up.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fashion_mnist import DEFAULT_DATA_DIR, StepSampler, evaluate, load  # noqa: E402


class OwnState:
    """This worker's parameters and optimizer state, kept in a folder of its own at each step
    the servers checkpoint (the steps a job resumes at), the newest KEEP of them."""
    KEEP = 3
    STATE = re.compile(r"step-\d{8}\.pt")

    def __init__(self, directory, rank, model, optimizer):
        self.directory = os.path.join(directory, "worker-%d" % rank)
        self.model, self.optimizer = model, optimizer
        os.makedirs(self.directory, exist_ok=True)

    def path(self, step):
        return os.path.join(self.directory, "step-%08d.pt" % step)

    def save_at_checkpoint(self, step):
        interval = kps.checkpoint_interval()
        if interval and step % interval == 0:
            self.save(step)

    def save(self, step):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(state, self.path(step) + ".tmp")
        os.replace(self.path(step) + ".tmp", self.path(step))  # whole or not there
        # Later steps are of a timeline left (a rollback, or another job's run); a .tmp, of
        # a save cut short.
        names = os.listdir(self.directory)
        kept = [s for s in self.steps(names) if s <= step][-self.KEEP:]
        for name in names:
            if not (self.STATE.fullmatch(name) and int(name[5:13]) in kept):
                os.remove(os.path.join(self.directory, name))

    def steps(self, names=None):
        return sorted(int(name[5:13]) for name in names or os.listdir(self.directory)
                      if self.STATE.fullmatch(name))

    def load(self, step):
        if not os.path.exists(self.path(step)):
            raise FileNotFoundError(
                "the job resumes at step %d, and %s holds no state of that step (it holds "
                "steps %s)" % (step, self.directory, self.steps() or "none"))
        state = torch.load(self.path(step))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        print("resumed at step %d from %s" % (step, self.path(step)), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="global steps of the job")
    parser.add_argument("--seed", type=int, default=1, help="initial parameters and data order")
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR", DEFAULT_DATA_DIR))
    parser.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    parser.add_argument("--save", metavar="PATH", help="rank 0 saves the final state_dict there")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="with the servers' optimizer none: keep this worker's parameters "
                             "and Adam's state there at each checkpoint step, and resume from it")
    args = parser.parse_args()

    # The same seed gives the same parameters, bit for bit, however the
    # network behaved or whoever was restarted: the servers sum the workers'
    # gradients in rank order, and torch computes each one the same way.
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)  # rank 0's initial values are the job's
    train_images, train_labels = load(args.data_dir, "train")
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    # With the job's servers running an optimizer (spec.optimizer: adam here),
    # the servers update the parameters and this optimizer is not stepped; with
    # spec.optimizer.name: none it is, on the averaged gradients.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    # kubeps: connect to this pod's agent, push the gradients through it, and
    # start every worker from the same parameters. With model=, each layer
    # waits for its new values just before its next forward, not step().
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         model=model)
    rank, size = kps.rank(), kps.size()
    own_state = OwnState(args.state_dir, rank, model, optimizer) if args.state_dir else None
    if own_state:  # before the broadcast, which learns the step the job starts at
        kps.resume_with(own_state.load, held=own_state.steps)
    kps.broadcast_parameters(model.state_dict(), root_rank=0)

    global_batch = kps.global_batch()  # spec.batchSize x the workers
    sampler = StepSampler.of_global_batch(len(train_images), global_batch, args.seed)
    print("rank %d of %d, %d steps of %d examples" % (rank, size, args.steps, global_batch),
          flush=True)
    start = time.time()
    for step in kps.steps(args.steps):
        if own_state:
            own_state.save_at_checkpoint(step)
        batch = sampler.run(step, *kps.examples())  # this worker's examples of the step
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_images[batch]), train_labels[batch])
        loss.backward()
        optimizer.step()
        if (step + 1) % args.log_every == 0:
            print("step %d/%d loss %.4f" % (step + 1, args.steps, loss.item()), flush=True)
    seconds = time.time() - start
    if own_state and not kps.scaled_away():
        own_state.save(args.steps)  # the servers' last checkpoint is of this step

    if rank == 0 and not kps.scaled_away():  # an elastic job's last step's parameters
        test_images, test_labels = load(args.data_dir, "t10k")
        accuracy, test_loss = evaluate(model, test_images, test_labels)
        print("test accuracy %.4f (test loss %.4f) after %d steps, %.1f s in this process"
              % (accuracy, test_loss, args.steps, seconds), flush=True)
        if args.save:
            torch.save(model.state_dict(), args.save)
    kps.finish()


if __name__ == "__main__":
    main()
