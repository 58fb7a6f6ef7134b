"""kubeps.torch with gradients that overflow: a mixed-precision loss scaler's skipped step, and
spec.nonFinite with the servers' optimizer 'none' (the workers' optimizer applies the mean, so
the decision to skip a step is theirs).  Skips, saying why, where torch is not installed.
"""

import os
import threading
import time
import unittest
import warnings
from unittest import mock

from agent_fixture import requires_fake
from test_torch import TorchTestCase, batch_for, needs_torch, three_layers, torch

if torch is not None:
    import kubeps.torch as kps
import kubeps

OVERFLOW_STEP = 1


def pushed_steps(agent):
    """The step of each push_pull the fake agent received, in order."""
    return [request["step"] for _, op, request in agent.fake.events if op == "push_pull"]


def overflowing_loss(net, step):
    """The loss of `step`'s batch; at OVERFLOW_STEP an Inf, whose gradients are Inf and NaN."""
    x, y = batch_for(step)
    loss = torch.nn.functional.cross_entropy(net(x), y)
    return loss * float("inf") if step == OVERFLOW_STEP else loss


class LossScaler:
    """torch.cuda.amp.GradScaler's algorithm, written out: torch 1.13's scaler runs on CUDA
    only (on a CPU it disables itself and scales nothing).  Scale the loss; after backward
    (and, with kubeps, synchronize()), skip the step and halve the scale when a gradient is
    not finite, else unscale and step, doubling the scale every `growth_interval` steps."""

    def __init__(self, scale=2.0 ** 16, growth_interval=2):
        self.scale = scale
        self.growth_interval = growth_interval
        self.good_steps = 0
        self.skipped = 0

    def step(self, optimizer):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            self.skipped += 1
            self.scale /= 2
            self.good_steps = 0
            return  # as GradScaler: optimizer.step() is not called
        with torch.no_grad():
            for g in grads:
                g.div_(self.scale)
        optimizer.step()
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale *= 2
            self.good_steps = 0


def train_scaled(net, optimizer, scaler, steps, distributed):
    """A mixed-precision loop: steps() with kubeps, range() locally."""
    for step in (kps.steps(steps) if distributed else range(steps)):
        optimizer.zero_grad()
        (overflowing_loss(net, step) * scaler.scale).backward()
        if distributed:
            optimizer.synchronize()  # the averaged gradients, before the scaler looks
        scaler.step(optimizer)


@needs_torch
class NonFiniteGradients(TorchTestCase):
    def distributed_adam(self, model):
        optimizer = kps.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        return optimizer

    def test_a_loss_scaler_skips_the_overflowing_step_and_the_job_goes_on(self):
        self.connect(optimizer="none", non_finite="SkipStep")
        model, reference = three_layers(), three_layers()
        optimizer = self.distributed_adam(model)
        scaler = LossScaler()
        train_scaled(model, optimizer, scaler, 5, distributed=True)
        local_scaler = LossScaler()
        train_scaled(reference, torch.optim.Adam(reference.parameters(), lr=0.01), local_scaler,
                     5, distributed=False)
        self.assertEqual(scaler.skipped, 1, "the overflow was not seen in the averaged gradients")
        self.assertEqual((scaler.skipped, scaler.scale), (local_scaler.skipped, local_scaler.scale))
        self.assertParametersEqual(model, reference)

    def test_a_loss_scaler_in_a_loop_of_its_own_skips_too(self):
        # Without steps(), the next backward pass finds the skipped step's overflow.
        self.connect(optimizer="none", non_finite="SkipStep")
        model, reference = three_layers(), three_layers()
        optimizer = self.distributed_adam(model)
        scaler = LossScaler()
        for step in range(4):
            optimizer.zero_grad()
            (overflowing_loss(model, step) * scaler.scale).backward()
            optimizer.synchronize()
            scaler.step(optimizer)
        train_scaled(reference, torch.optim.Adam(reference.parameters(), lr=0.01), LossScaler(),
                     4, distributed=False)
        self.assertEqual(scaler.skipped, 1)
        self.assertParametersEqual(model, reference)

    def test_skip_step_skips_the_update_itself_without_a_scaler(self):
        self.connect(optimizer="none", non_finite="SkipStep")
        model, reference = three_layers(), three_layers()
        optimizer = self.distributed_adam(model)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for step in kps.steps(4):
                optimizer.zero_grad()
                overflowing_loss(model, step).backward()
                optimizer.step()
        local = torch.optim.Adam(reference.parameters(), lr=0.01)
        for step in range(4):
            local.zero_grad()
            overflowing_loss(reference, step).backward()
            if step != OVERFLOW_STEP:
                local.step()
        self.assertParametersEqual(model, reference)
        self.assertTrue(all(torch.isfinite(p).all() for p in model.parameters()))
        self.assertEqual(optimizer.kubeps_skipped_steps, 1)
        skipped = [str(w.message) for w in said if "skipped" in str(w.message)]
        self.assertEqual(len(skipped), 1, skipped)
        self.assertIn("step %d's averaged gradient holds NaN or Inf" % OVERFLOW_STEP, skipped[0])

    def test_fail_ends_the_job_at_the_first_overflow_saying_what_to_set(self):
        self.connect(optimizer="none")
        model = three_layers()
        optimizer = self.distributed_adam(model)
        with self.assertRaises(kubeps.InvalidArgument) as caught:
            for step in kps.steps(3):
                optimizer.zero_grad()
                overflowing_loss(model, step).backward()
                optimizer.step()
        self.assertEqual(caught.exception.reason, "NonFiniteGradient")
        self.assertIn("not finite", str(caught.exception))


@needs_torch
class TheScalersCalls(TorchTestCase):
    @requires_fake
    def test_a_rollback_found_by_synchronize_is_not_exchanged_again_by_step(self):
        # The recipe: synchronize(), the scaler's step (which calls step()). A rollback
        # found by synchronize() resumes the loop; step() must not push the stale
        # gradient as the resume step's.
        agent = self.connect(optimizer="none", non_finite="SkipStep")
        model = three_layers()
        optimizer = self.distributed_adam(model)
        agent.fake.arm_rollback(at_step=2, resume_step=1)
        seen = []
        for step in kps.steps(4):
            seen.append(step)
            optimizer.zero_grad()
            overflowing_loss(model, step + 10).backward()  # never overflows
            optimizer.synchronize()
            optimizer.step()
        self.assertEqual(seen, [0, 1, 2, 1, 2, 3])
        pushed = pushed_steps(agent)
        self.assertEqual(sorted(set(pushed)), [0, 1, 2, 3])
        self.assertEqual(pushed.count(1), 2 * pushed.count(0), pushed)

    distributed_adam = NonFiniteGradients.distributed_adam

    def test_a_fused_optimizers_scaler_argument_reaches_it_overflow_or_not(self):
        # torch 1.13's GradScaler calls step(grad_scaler=self) on an optimizer that
        # unscales and skips by itself (_step_supports_amp_scaling: Adam(fused=True) on
        # a GPU); it must get the call, to record its inf checks, even on an overflow.
        class ScalingSgd(torch.optim.SGD):
            _step_supports_amp_scaling = True
            calls = []

            def step(self, closure=None, grad_scaler=None):
                self.calls.append(grad_scaler)
                return super().step(closure)

        self.connect(optimizer="none", non_finite="SkipStep")
        model = three_layers()
        optimizer = kps.DistributedOptimizer(ScalingSgd(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        scaler = object()
        for step in kps.steps(3):
            optimizer.zero_grad()
            overflowing_loss(model, step).backward()
            optimizer.step(grad_scaler=scaler)
        self.assertEqual(ScalingSgd.calls, [scaler] * 3)

    def test_a_scaler_with_the_servers_optimizer_is_refused(self):
        self.connect()
        model = three_layers()
        optimizer = self.distributed_adam(model)
        overflowing_loss(model, 0).backward()
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    "a GradScaler needs the servers' optimizer 'none'"):
            optimizer.step(grad_scaler=object())

    @requires_fake
    def test_hooks_on_two_threads_push_the_step_after_a_skipped_one(self):
        # Hooks run on autograd's device threads: a backward pass after a skipped step
        # must push every key for the next step, whichever hook moves the step on.
        agent = self.connect(optimizer="none", non_finite="SkipStep")
        model = three_layers()
        with mock.patch.dict(os.environ, {"KUBEPS_BUCKET_BYTES": "0"}):  # a push per hook
            optimizer = self.distributed_adam(model)
        next(iter(kps.steps(1)))
        overflowing_loss(model, OVERFLOW_STEP).backward()
        self.assertTrue(optimizer.synchronize())  # overflowed: the scaler skips step()
        bindings = optimizer._kubeps_bindings
        for b in bindings:
            b.param.grad = torch.ones_like(b.param)
        threads = [threading.Thread(target=optimizer._kubeps_push_gradient, args=(b,))
                   for b in bindings]
        before = len(pushed_steps(agent))
        advance = type(kps._counter).advance

        def slow_advance(counter):  # widens the window between the hooks
            time.sleep(0.05)
            advance(counter)
        with mock.patch.object(type(kps._counter), "advance", slow_advance):
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        optimizer.step()
        self.assertEqual(set(pushed_steps(agent)[before:]), {1},
                         "a key was pushed for the skipped step again")


def cuda_missing():
    if torch is None:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA device (torch.cuda.is_available())"


def cuda_grad_scaler(**options):
    """torch.amp.GradScaler("cuda") where torch has it (2.3 on), torch.cuda.amp's before."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", **options)
    return torch.cuda.amp.GradScaler(**options)


@unittest.skipIf(cuda_missing(), "torch.cuda.amp.GradScaler needs a GPU: %s" % cuda_missing())
class WithTorchsGradScaler(TorchTestCase):
    def test_its_skipped_step_moves_the_job_on_as_locally(self):
        self.connect(optimizer="none", non_finite="SkipStep")
        results = []
        for distributed in (True, False):
            model = three_layers().cuda()
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            if distributed:
                optimizer = kps.DistributedOptimizer(optimizer,
                                                     named_parameters=model.named_parameters())
                kps.broadcast_parameters(model.state_dict(), root_rank=0)
            scaler = cuda_grad_scaler(growth_interval=2)
            for step in (kps.steps(5) if distributed else range(5)):
                optimizer.zero_grad()
                x, y = batch_for(step)
                with torch.autocast("cuda"):
                    loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
                if step == OVERFLOW_STEP:
                    loss = loss * float("inf")
                scaler.scale(loss).backward()
                if distributed:
                    optimizer.synchronize()
                scaler.step(optimizer)
                scaler.update()
            results.append((model, scaler.get_scale()))
        (model, scale), (reference, local_scale) = results
        self.assertEqual(scale, local_scale)
        self.assertParametersEqual(model, reference, exact=False)


if __name__ == "__main__":
    unittest.main()
