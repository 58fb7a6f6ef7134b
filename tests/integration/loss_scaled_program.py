"""A mixed-precision training loop as a user writes it, for test_mixed_precision: the loss
scaled, the averaged gradients synchronized before the scaler looks, a step skipped when they
overflowed.  With --device cuda it is torch's own GradScaler under autocast; on the CPU, where
torch 1.13's GradScaler does not run, its algorithm is written out: on an overflow the step is
skipped and the scale halved, else the gradients are unscaled and the optimizer steps.  Rank
1's loss overflows at --overflow-at; rank 0's never does.  The scale (the written-out
scaler's) and the steps skipped are the loop's own state, registered with
kps.restore_on_rollback with torch's scaler, so that a rollback takes them back too.

Prints, per rank: "skipped [steps]", "scale S" and "parameters <sha256 of their bytes>"; and
"step N" every --log-every steps.
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


class LoopState:
    """The scale of the written-out scaler and the steps skipped, as a rollback restores them."""

    def __init__(self, scale):
        self.scale, self.skipped = scale, []

    def state_dict(self):
        return {"scale": self.scale, "skipped": list(self.skipped)}

    def load_state_dict(self, state):
        self.scale, self.skipped = state["scale"], list(state["skipped"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--overflow-at", type=int, default=5)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--log-every", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model.to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    rank = kps.rank()
    loop = LoopState(2.0 ** 16)
    scaler = cuda_grad_scaler(init_scale=loop.scale) if args.device == "cuda" else None
    kps.restore_on_rollback(loop, *([scaler] if scaler is not None else []))
    for step in kps.steps(args.steps):
        if args.log_every and step % args.log_every == 0:
            print("step %d" % step, flush=True)
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
            if not optimizer.synchronize():
                continue  # the job rolled back: steps() goes on from the resume step
            scaler.step(optimizer)
            scaler.update()
            if scaler.get_scale() < loop.scale:
                loop.skipped.append(step)
            loop.scale = scaler.get_scale()
            continue
        (loss * loop.scale).backward()
        if not optimizer.synchronize():
            continue
        grads = [p.grad for p in model.parameters()]
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            loop.skipped.append(step)
            loop.scale /= 2
            continue  # as GradScaler.step(): optimizer.step() is not called
        with torch.no_grad():
            for g in grads:
                g.div_(loop.scale)
        optimizer.step()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print("rank %d skipped %s scale %g finite %s parameters %s"
          % (rank, loop.skipped, loop.scale, finite, digest.hexdigest()), flush=True)
    kps.finish()


if __name__ == "__main__":
    main()
