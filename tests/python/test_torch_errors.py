"""kubeps.torch's errors: what a user who calls it wrong is told, naming what and where.
Skips, saying why, where torch is not installed.
"""

import os
import unittest
from unittest import mock

from test_torch import LEARNING_RATE, TorchTestCase, batch_for, needs_torch, three_layers, torch

if torch is not None:
    import kubeps.torch as kps
import kubeps


@needs_torch
class UserErrors(TorchTestCase):
    def test_the_optimizer_before_init(self):
        model = three_layers()
        with self.assertRaises(kubeps.FailedPrecondition) as caught:
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
        self.assertIn("kubeps.torch.DistributedOptimizer() was called before kubeps.init()",
                      str(caught.exception))

    def test_broadcast_and_steps_before_the_optimizer(self):
        self.connect()
        model = three_layers()
        for call, name in [(lambda: kps.broadcast_parameters(model.state_dict()),
                            "kubeps.torch.broadcast_parameters()"),
                           (lambda: list(kps.steps(3)), "kubeps.torch.steps()")]:
            with self.assertRaises(kubeps.FailedPrecondition) as caught:
                call()
            self.assertIn("%s needs the parameters declared: make "
                          "kubeps.torch.DistributedOptimizer" % name, str(caught.exception))

    def test_a_second_optimizer(self):
        self.connect()
        model = three_layers()
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"DistributedOptimizer\(\) was called twice.*0.weight, "
                                    r"0.bias, 2.weight"):
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())

    def test_a_bucket_size_that_is_not_a_number_of_bytes(self):
        self.connect()
        model = three_layers()
        with mock.patch.dict(os.environ, {"KUBEPS_BUCKET_BYTES": "1MB"}):
            with self.assertRaises(kubeps.InvalidArgument) as caught:
                kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
        self.assertIn("KUBEPS_BUCKET_BYTES='1MB': not a number of bytes", str(caught.exception))

    def test_a_float64_parameter(self):
        self.connect()
        model = three_layers().double()
        with self.assertRaisesRegex(kubeps.InvalidArgument, "parameter '0.weight' is float64; "
                                                            "kubeps carries float32, bfloat16 "
                                                            "and float16"):
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())

    def test_a_parameter_without_a_name(self):
        self.connect()
        model = three_layers()
        named = list(model.named_parameters())[1:]
        with self.assertRaisesRegex(kubeps.InvalidArgument, r"a parameter of the optimizer "
                                                            r"\(shape \[5, 6\]\) is not in "
                                                            "named_parameters"):
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=named)

    def test_a_state_dict_of_another_model(self):
        self.connect()
        model = three_layers()
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        other = torch.nn.Linear(2, 2)
        with self.assertRaisesRegex(kubeps.InvalidArgument,
                                    r"none of the tensors given \(weight, bias\) is a declared "
                                    r"parameter \(declared: 0.weight, 0.bias"):
            kps.broadcast_parameters(other.state_dict())

    def first_backward(self):
        """A model, its DistributedOptimizer and a loss of step 0 whose backward ran; loss()
        computes it again."""
        model = three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        x, y = batch_for(0)
        next(iter(kps.steps(1)))

        def loss():
            return torch.nn.CrossEntropyLoss()(model(x), y)
        loss().backward()
        return model, optimizer, loss

    def test_a_gradient_clipped_after_backward_sent_it(self):
        # With the servers' optimizer each gradient goes to the servers as backward
        # computes it: clipped afterwards, the clipping changed nothing, silently.
        self.connect()
        model, optimizer, loss = self.first_backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-3)
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"the gradient of '0.weight' changed after backward computed "
                                    r"it \(clipped\? unscaled by a GradScaler\?\).*optimizer "
                                    r"'none'.*optimizer.synchronize\(\)"):
            optimizer.step()

    def test_a_gradient_clipped_after_synchronize_with_the_servers_optimizer(self):
        # Horovod's order: backward, synchronize(), clip, step(). With the servers'
        # optimizer synchronize() pulled the update made from the unclipped gradients:
        # step() let the clipping go, silently.
        self.connect()
        model, optimizer, loss = self.first_backward()
        self.assertTrue(optimizer.synchronize())
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-6)
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"the gradient of '0.weight' changed after backward computed "
                                    r"it .*optimizer 'none'"):
            optimizer.step()

    def test_zero_grad_between_backward_and_step(self):
        # Before, the servers applied the gradients backward had sent, whatever
        # zero_grad() left in .grad.
        self.connect()
        model, optimizer, loss = self.first_backward()
        for set_to_none in (True, False):
            with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                        r"optimizer.zero_grad\(\) was called after backward and "
                                        r"before optimizer.step\(\).*Call zero_grad\(\) before "
                                        r"backward"):
                optimizer.zero_grad(set_to_none=set_to_none)
        optimizer.step()
        optimizer.zero_grad()  # after step(): the next step's

    def test_a_steps_body_that_leaves_out_step(self):
        # Before, steps() moved on to the next step, whose pushes the servers refused
        # while they waited for this worker's of the one left out: the job hung. Left
        # after backward, the next backward said it "computed 2 times".
        for after_backward in (False, True):
            self.connect()
            model = three_layers()
            optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                 named_parameters=model.named_parameters())
            with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                        r"the body of kubeps.torch.steps\(\) for step 1 ended "
                                        r"without optimizer.step\(\).*optimizer.synchronize\(\) "
                                        r"and leave step\(\) out"):
                for step in kps.steps(3):
                    if step == 1 and not after_backward:
                        continue  # a bad batch, skipped
                    optimizer.zero_grad()
                    x, y = batch_for(step)
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    if step == 1:
                        continue  # a loss found bad after backward
                    optimizer.step()
            kps.shutdown()

    def test_a_backward_pass_after_synchronize_without_step(self):
        # synchronize() ended the step's exchange: a second backward pass of the same
        # step would send its gradients again, and the next step() would not wait for them.
        self.connect(optimizer="none")
        model, optimizer, loss = self.first_backward()
        self.assertTrue(optimizer.synchronize())
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"backward ran after optimizer.synchronize\(\) ended step 0's "
                                    r"exchange: call optimizer.step\(\) first"):
            loss().backward()

    def test_a_learning_rate_schedule_with_the_servers_optimizer(self):
        # The servers apply the job's learning rate: a torch scheduler changed the
        # wrapped optimizer's, which nothing reads, silently.
        self.connect()
        model = three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        loss_fn = torch.nn.CrossEntropyLoss()
        with self.assertWarnsRegex(UserWarning, r"param_groups\[0\]\['lr'\] changed from 0.1 "
                                                r"to 0.05 .*spec.optimizer.*'none'") as caught:
            for step in kps.steps(3):
                x, y = batch_for(step)
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
                scheduler.step()
        said = [w for w in caught.warnings if "param_groups" in str(w.message)]
        self.assertEqual(len(said), 1, "said once, not at every step")

    def test_param_groups_of_their_own_with_the_servers_optimizer(self):
        self.connect()
        model = three_layers()
        groups = [{"params": model[0].parameters(), "lr": 0.01},
                  {"params": list(model[2].parameters()) + list(model[4].parameters())}]
        with self.assertWarnsRegex(UserWarning, r"param_groups\[0\] and \[1\] differ in 'lr' "
                                                r"\(0.01, 0.1\).*the job's spec.optimizer"):
            kps.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1),
                                     named_parameters=model.named_parameters())

    def test_backward_before_the_initial_values(self):
        self.connect()
        model = three_layers()
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        x, y = batch_for(0)
        with self.assertRaises(kubeps.FailedPrecondition) as caught:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        self.assertRegex(str(caught.exception), r"the gradient hook of '4.(weight|bias)' ran "
                         r"before the servers had initial values: call "
                         r"kubeps.torch.broadcast_parameters\(model.state_dict\(\)\) or "
                         r"iterate kubeps.torch.steps\(\), before the first backward")

    def test_a_gradient_of_the_wrong_shape(self):
        self.connect()
        weight = torch.nn.Parameter(torch.zeros(2, 3))
        optimizer = kps.DistributedOptimizer(torch.optim.SGD([weight], lr=0.1),
                                             named_parameters=[("weight", weight)])
        kps.broadcast_parameters({"weight": weight})
        # The parameter changed after the declaration; its gradient set by hand.  (A
        # backward over it is refused by torch itself: the hook's node keeps the old shape.)
        weight.data = torch.zeros(4, 3)
        weight.grad = torch.ones(4, 3)
        with self.assertRaises(kubeps.InvalidArgument) as caught:
            optimizer.step()
        self.assertEqual(str(caught.exception), "InvalidArgument: the gradient of 'weight' has "
                         "shape [4, 3], but 'weight' was declared to kubeps with shape [2, 3] "
                         "(did the parameter change shape after DistributedOptimizer was made?)")

    def test_a_parameter_made_trainable_after_wrapping(self):
        # With 'none' the wrapped optimizer would step it on this worker's own
        # gradient alone: the workers' copies would drift apart, silently.
        self.connect(optimizer="none")
        model = three_layers()
        model[0].weight.requires_grad_(False)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        before = model[0].weight.detach().clone()
        model[0].weight.requires_grad_(True)
        x, y = batch_for(0)
        torch.nn.CrossEntropyLoss()(model(x), y).backward()
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"'0.weight' is trainable, but it was not when the "
                                    r"DistributedOptimizer was made"):
            optimizer.step()
        self.assertTrue(torch.equal(model[0].weight, before))

    def test_a_frozen_parameter_with_an_old_gradient_is_no_error(self):
        # zero_grad(set_to_none=False), torch 1.x's default, leaves zeros in a gradient it had.
        self.connect()
        model = three_layers()
        first = torch.nn.CrossEntropyLoss()(model(batch_for(0)[0]), batch_for(0)[1])
        first.backward()
        model[0].weight.requires_grad_(False)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        for step in kps.steps(2):
            optimizer.zero_grad(set_to_none=False)
            x, y = batch_for(step)
            torch.nn.CrossEntropyLoss()(model(x), y).backward()
            optimizer.step()
        self.assertIsNotNone(model[0].weight.grad)

    def test_a_param_group_added_after_wrapping(self):
        self.connect()
        model, extra = three_layers(), torch.nn.Linear(2, 2)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        optimizer.add_param_group({"params": extra.parameters()})
        x, y = batch_for(0)
        torch.nn.CrossEntropyLoss()(model(x), y).backward()
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    r"the optimizer holds 8 parameters, but 6 were there when "
                                    r"the DistributedOptimizer was made \(add_param_group\?\)"):
            optimizer.step()

    def test_two_backward_passes_in_one_step(self):
        self.connect()
        model = torch.nn.Linear(3, 2)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        model(torch.ones(1, 3)).sum().backward()
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    "the gradient of '(weight|bias)' was computed 2 times before "
                                    "optimizer.step\\(\\); pass backward_passes_per_step=2"):
            model(torch.ones(1, 3)).sum().backward()
        optimizer.step()

    def test_backward_passes_per_step_accumulates(self):
        self.connect()
        model, reference = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        reference.load_state_dict(model.state_dict())
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(),
                                             backward_passes_per_step=2)
        for step in kps.steps(1):
            optimizer.zero_grad()
            model(torch.ones(1, 3)).sum().backward()
            model(2 * torch.ones(1, 3)).sum().backward()
            optimizer.step()
        local = torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE)
        reference(torch.ones(1, 3)).sum().backward()
        reference(2 * torch.ones(1, 3)).sum().backward()
        local.step()
        self.assertParametersEqual(model, reference, exact=False)
