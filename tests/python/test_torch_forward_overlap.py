"""kubeps.torch with model=: each module waits for its own parameters just before its
forward pass, so the next step's first layers compute while the last ones still travel.
Skips, saying why, where torch is not installed.
"""

import os
import unittest
from unittest import mock

from agent_fixture import requires_fake, reset_kubeps
from test_torch import TorchTestCase, batch_for, needs_torch, three_layers, torch, train

if torch is not None:
    import kubeps.torch as kps
import kubeps


class TwoBranches(torch.nn.Module if torch else object):
    """a(x) + b(x), or a(x) alone: a step may leave b out."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)

    def forward(self, x, use_b=True):
        return self.a(x) + self.b(x) if use_b else self.a(x)


@needs_torch
class ForwardOverlap(TorchTestCase):
    """model=: step() returns at once and each module waits for its own parameters."""

    def distributed(self, model, **options):
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(),
                                             model=model, **options)
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        return optimizer

    def test_each_module_takes_its_new_values_before_its_forward(self):
        self.connect()
        model, reference = three_layers(), three_layers()
        optimizer = self.distributed(model)
        x, y = batch_for(0)
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        # step() returned without the new values...
        for p, old in zip(model.parameters(), before):
            self.assertTrue(torch.equal(p, old))
        # ... which the first layer takes when it runs, the others not yet.
        model[0](x)
        self.assertFalse(torch.equal(model[0].weight, before[0]))
        self.assertTrue(torch.equal(model[4].weight, before[4]))
        self.assertTrue(optimizer.synchronize())  # the rest, outside a forward pass
        self.assertFalse(torch.equal(model[4].weight, before[4]))
        reset_kubeps()
        # A whole loop ends, bit for bit, where waiting in step() ends.
        self.connect()
        model = three_layers()
        train(model, self.distributed(model), 4)
        reset_kubeps()
        self.connect()
        train(reference, kps.DistributedOptimizer(torch.optim.SGD(reference.parameters(), lr=0.1),
                                                  named_parameters=reference.named_parameters()), 4)
        self.assertParametersEqual(model, reference)

    def train_with_a_rollback_on_wait(self, model, loss_of, name, at_iteration, resume_step):
        """Six steps, each exchange waited for apart; the wait for `name` in iteration
        `at_iteration` (1-based) finds its server restarted.  `loss_of(step, armed)` is the
        iteration's loss.  Returns the steps steps() yielded."""
        with mock.patch.dict(os.environ, {"KUBEPS_BUCKET_BYTES": "0"}):  # a push per hook
            optimizer = self.distributed(model)
        yielded = []
        for step in kps.steps(6):
            yielded.append(step)
            armed = len(yielded) == at_iteration
            if armed:
                self.agent.fake.arm_rollback_on_wait(name, resume_step=resume_step)
            optimizer.zero_grad()
            loss_of(step, armed).backward()
            optimizer.step()
        return yielded

    @requires_fake
    def test_a_rollback_found_in_step_for_a_parameter_left_out_goes_back_to_its_step(self):
        # b's shard restarted while b's last exchange travelled; the step that leaves b out
        # finds it in step(), the first to wait for b: the loop goes on from the resume
        # step, not the one after it (which would never push the resume step).
        self.connect()
        model = TwoBranches()
        yielded = self.train_with_a_rollback_on_wait(
            model, lambda step, leave_b_out: model(torch.ones(1, 2), use_b=not leave_b_out).sum(),
            "b.weight", at_iteration=4, resume_step=1)
        self.assertEqual(yielded, [0, 1, 2, 3, 1, 2, 3, 4, 5])

    @requires_fake
    def test_a_rollback_found_in_a_forward_pass_ends_as_a_clean_run(self):
        agent = self.connect()
        model = three_layers()
        optimizer = self.distributed(model)
        agent.fake.arm_rollback(at_step=4, resume_step=2)
        seen = []
        train(model, optimizer, 6, record=seen)
        # Step 4's exchanges fail in step 5's forward pass: step 5 is dropped.
        self.assertEqual(seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        reset_kubeps()
        clean = three_layers()
        self.connect()
        train(clean, self.distributed(clean), 6)
        self.assertParametersEqual(model, clean)

    @requires_fake
    def test_a_rollback_found_by_a_later_layer_leaves_the_backward_pass_whole(self):
        # Step 3's exchange of the last layer fails in step 4's forward pass, after the
        # layers before it ran on their new values: autograd saved those, so they go back to
        # the resume step's values only once the dropped iteration's backward is over (a
        # CNN whose sliced dense layer found a restarted server failed its backward pass:
        # "modified by an inplace operation").
        self.connect()
        model = three_layers()

        def loss_of(step, armed):
            x, y = batch_for(step)
            return torch.nn.CrossEntropyLoss()(model(x), y)
        seen = self.train_with_a_rollback_on_wait(model, loss_of, "4.weight", at_iteration=5,
                                                  resume_step=2)
        self.assertEqual(seen, [0, 1, 2, 3, 4, 2, 3, 4, 5])
        reset_kubeps()
        clean = three_layers()
        self.connect()
        with mock.patch.dict(os.environ, {"KUBEPS_BUCKET_BYTES": "0"}):
            train(clean, self.distributed(clean), 6)
        self.assertParametersEqual(model, clean)

    @requires_fake
    def test_a_rollback_found_outside_the_training_pass_drops_no_step(self):
        # Step 4's exchanges fail in another forward pass: an evaluation after step(), with
        # autograd or without, or a pass before the training one (a teacher's).
        for where, grad in [("after", False), ("after", True), ("before", False)]:
            with self.subTest(where=where, grad=grad):
                agent = self.connect()
                self.addCleanup(reset_kubeps)
                model, clean = three_layers(), three_layers()
                optimizer = self.distributed(model)
                agent.fake.arm_rollback(at_step=4, resume_step=2)
                seen = []
                for step in kps.steps(6):
                    seen.append(step)
                    x, y = batch_for(step)
                    if where == "before":
                        with torch.set_grad_enabled(grad):
                            model(x)
                    optimizer.zero_grad()
                    torch.nn.CrossEntropyLoss()(model(x), y).backward()
                    optimizer.step()
                    if where == "after":
                        with torch.set_grad_enabled(grad):
                            model(x)
                expected = [0, 1, 2, 3, 4, 2, 3, 4, 5] if where == "after" else \
                    [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]
                self.assertEqual(seen, expected)
                reset_kubeps()
                self.connect()
                train(clean, self.distributed(clean), 6)
                reset_kubeps()
                self.assertParametersEqual(model, clean)

    def test_weight_norm_and_a_parametrization_compute_from_the_new_values(self):
        # weight_norm makes the weight from weight_g and weight_v in a pre-hook of its own; a
        # parametrization makes it when read, from a parameter of a module whose forward never
        # runs. Both must see each step's new values, as without model=.
        class Doubled(torch.nn.Module):
            def forward(self, weight):
                return 2 * weight

        def build():
            model = three_layers()
            torch.nn.utils.weight_norm(model[0])
            torch.nn.utils.parametrize.register_parametrization(model[2], "weight", Doubled())
            return model

        self.connect()
        model = build()
        train(model, self.distributed(model), 4)
        reset_kubeps()
        self.connect()
        reference = build()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(reference.parameters(), lr=0.1),
                                             named_parameters=reference.named_parameters())
        kps.broadcast_parameters(reference.state_dict(), root_rank=0)
        train(reference, optimizer, 4)
        self.assertParametersEqual(model, reference)

    def test_data_parallel_waits_for_every_parameter_before_it_copies_them(self):
        # nn.DataParallel copies the parameters to its GPUs before the modules below it run:
        # their own waits would come too late for the copies.
        self.connect()
        model = torch.nn.DataParallel(three_layers())
        train(model, self.distributed(model), 3)
        waiting = [m for m in model.modules() if m._forward_pre_hooks]
        self.assertEqual(waiting, [model])
        reset_kubeps()
        self.connect()
        reference = three_layers()
        train(reference, self.distributed(reference), 3)
        self.assertParametersEqual(model.module, reference)

    def test_the_module_inside_a_data_parallel_is_refused_at_its_replicas(self):
        # On GPUs nn.DataParallel runs replicas that share the module's hooks; replicate()
        # marks them _is_replica, as here (this machine may have no GPU to replicate on).
        self.connect()
        model = three_layers()
        self.distributed(model)
        replica = three_layers()
        replica._forward_pre_hooks = model._forward_pre_hooks
        replica[0]._forward_pre_hooks = model[0]._forward_pre_hooks
        replica[0]._is_replica = True
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "model=Sequential runs inside an "
                                    "nn.DataParallel.*pass the DataParallel as model="):
            replica(batch_for(0)[0])

    def test_a_parameter_whose_module_never_runs_is_refused_saying_why(self):
        self.connect()

        class Tied(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.first = torch.nn.Linear(6, 3)
                self.shared = torch.nn.Linear(6, 3)  # only its weights are used

            def forward(self, x):
                return self.first(x) + torch.nn.functional.linear(x, self.shared.weight)

        torch.manual_seed(1)
        model = Tied()
        optimizer = self.distributed(model)
        with self.assertRaisesRegex(kubeps.FailedPrecondition, r"'shared.weight' was used in the forward "
                                    r"pass before its own module ran"):
            train(model, optimizer, 3)

    def test_a_model_that_does_not_hold_the_parameters(self):
        self.connect()
        model = three_layers()
        with self.assertRaisesRegex(kubeps.InvalidArgument, r"0.weight.* are not parameters of "
                                    r"model=Linear's modules"):
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters(),
                                     model=torch.nn.Linear(2, 2))


if __name__ == "__main__":
    unittest.main()
