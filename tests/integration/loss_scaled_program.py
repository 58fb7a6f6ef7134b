"""A mixed-precision training loop as a user writes it, for test_mixed_precision: the loss
scaled, the averaged gradients synchronized before the scaler looks, a step skipped when they
overflowed.  torch 1.13's GradScaler runs on CUDA only, so its algorithm is written out here:
on an overflow the step is skipped and the scale halved, else the gradients are unscaled and
the optimizer steps.  Rank 1's loss overflows at --overflow-at; rank 0's never does.

Prints, per rank: "skipped [steps]", "scale S" and "parameters <sha256 of their bytes>".
"""
import argparse
import hashlib

import torch

import kubeps.torch as kps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--overflow-at", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    rank = kps.rank()
    scale, skipped = 2.0 ** 16, []
    for step in kps.steps(args.steps):
        generator = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(8, 16, generator=generator)
        y = torch.randint(0, 4, (8,), generator=generator)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if rank == 1 and step == args.overflow_at:
            loss = loss * float("inf")
        (loss * scale).backward()
        optimizer.synchronize()
        grads = [p.grad for p in model.parameters()]
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            skipped.append(step)
            scale /= 2
            continue  # as GradScaler.step(): optimizer.step() is not called
        with torch.no_grad():
            for g in grads:
                g.div_(scale)
        optimizer.step()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print("rank %d skipped %s scale %g finite %s parameters %s"
          % (rank, skipped, scale, finite, digest.hexdigest()), flush=True)
    kps.finish()


if __name__ == "__main__":
    main()
