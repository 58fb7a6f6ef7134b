"""A mixed-precision training loop as a user writes it, for test_mixed_precision: the loss
scaled, the averaged gradients synchronized before the scaler looks, a step skipped when they
overflowed.  With --device cuda it is torch's own GradScaler under autocast; on the CPU, where
torch 1.13's GradScaler does not run, its algorithm is written out: on an overflow the step is
skipped and the scale halved, else the gradients are unscaled and the optimizer steps.  Rank
1's loss overflows at --overflow-at; rank 0's never does.

Prints, per rank: "skipped [steps]", "scale S" and "parameters <sha256 of their bytes>".
"""
import argparse
import hashlib

import torch

import kubeps.torch as kps


def cuda_grad_scaler(**options):
    """torch.amp.GradScaler("cuda") where torch has it (2.3 on), torch.cuda.amp's before."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", **options)
    return torch.cuda.amp.GradScaler(**options)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--overflow-at", type=int, default=5)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model.to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    rank = kps.rank()
    scale, skipped = 2.0 ** 16, []
    scaler = cuda_grad_scaler(init_scale=scale) if args.device == "cuda" else None
    for step in kps.steps(args.steps):
        generator = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(8, 16, generator=generator).to(args.device)
        y = torch.randint(0, 4, (8,), generator=generator).to(args.device)
        optimizer.zero_grad()
        with torch.autocast(args.device, enabled=scaler is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        if rank == 1 and step == args.overflow_at:
            loss = loss * float("inf")
        if scaler is not None:
            scaler.scale(loss).backward()
            optimizer.synchronize()
            scaler.step(optimizer)
            scaler.update()
            if scaler.get_scale() < scale:
                skipped.append(step)
            scale = scaler.get_scale()
            continue
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
        digest.update(p.detach().cpu().numpy().tobytes())
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print("rank %d skipped %s scale %g finite %s parameters %s"
          % (rank, skipped, scale, finite, digest.hexdigest()), flush=True)
    kps.finish()


if __name__ == "__main__":
    main()
