"""kubeps.torch against the agent under test: the DistributedOptimizer's hook-driven pushes,
both update modes, on a GPU, in half precision and under torch.compile (where a process
starts: test_torch_start; the errors a user sees: test_torch_errors).  Skips, saying why,
where torch is not installed.
"""

import gc
import os
import subprocess
import sys
import textwrap
import time
import unittest
import warnings
import weakref
from unittest import mock

from agent_fixture import (HERE, client_environment, make_socket_dir, requires_fake,
                           reset_kubeps, start_agent)
from kubeps.errors import FailedPrecondition, InvalidArgument

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    import kubeps.torch as kps

needs_torch = unittest.skipIf(torch is None, "torch is not installed for %s; kubeps.torch's "
                              "tests need it (Debian: apt-get install python3-torch)"
                              % sys.executable)
LEARNING_RATE = 0.5  # the agent's servers' optimizer: sgd with this learning rate


def three_layers(seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4),
                               torch.nn.ReLU(), torch.nn.Linear(4, 3))


def batch_for(step):
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(8, 6, generator=generator), torch.randint(0, 3, (8,), generator=generator)


def train(model, optimizer, total_steps, record=None, set_to_none=False, device="cpu"):
    """The user's loop of the brief, against the current session, the batches on `device`."""
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in kps.steps(total_steps):
        if record is not None:
            record.append(step)
        x, y = batch_for(step)
        optimizer.zero_grad(set_to_none=set_to_none)
        loss_fn(model(x.to(device)), y.to(device)).backward()
        optimizer.step()


def train_locally(model, optimizer, total_steps):
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(total_steps):
        x, y = batch_for(step)
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()


class TorchTestCase(unittest.TestCase):
    def connect(self, **options):
        self.agent = start_agent(self, **options)
        kps.init(socket_dir=self.agent.socket_dir, timeout=10)
        return self.agent

    def linear_over_none(self, start_step, **options):
        """A Linear(2, 1) with SGD over servers that only average (optimizer none), which
        hold 9.0 everywhere and are at `start_step`."""
        model = torch.nn.Linear(2, 1)
        self.connect(optimizer="none", server_values={"weight": [9.0, 9.0], "bias": [9.0]},
                     start_step=start_step, **options)
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        return model

    def tearDown(self):
        reset_kubeps()
        if getattr(self, "agent", None) is not None and self.agent.fake is not None:
            self.assertEqual(self.agent.fake.violations, [], "the client broke the protocol")

    def assertParametersEqual(self, model, expected, exact=True):
        for (name, p), q in zip(model.named_parameters(), expected.parameters()):
            if exact:
                self.assertTrue(torch.equal(p, q), name)
            else:
                self.assertTrue(torch.allclose(p, q, rtol=1e-5, atol=1e-6), name)


class _SlowBackward(torch.autograd.Function if torch else object):
    """Identity whose backward takes 0.5 s: the pushes of the later layers have time to land."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    finished_at = []   # time.monotonic_ns() when each backward returned

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.5)
        _SlowBackward.finished_at.append(time.monotonic_ns())
        return grad


@needs_torch
class Updates(TorchTestCase):
    def backward_with_a_slow_layer_0(self, bucket_bytes):
        """One step of three_layers() whose backward takes 0.5 s before it reaches layer 0;
        returns (optimizer, when that backward returned, when step() was called)."""
        model = three_layers()
        with mock.patch.dict(os.environ, {"KUBEPS_BUCKET_BYTES": str(bucket_bytes)}):
            optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                 named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        # Layer 0's gradients exist only once the slow identity's backward has
        # returned: that moment splits the pushes that overlapped backward
        # from those that could not have.
        _SlowBackward.finished_at.clear()
        x, y = batch_for(0)
        hidden = _SlowBackward.apply(torch.relu(model[0](x)))
        loss = torch.nn.functional.cross_entropy(model[4](torch.relu(model[2](hidden))), y)
        loss.backward()
        time.sleep(0.2)  # room for the last push to be read by the agent
        step_called_at = time.monotonic_ns()
        optimizer.step()
        return optimizer, _SlowBackward.finished_at[0], step_called_at

    @requires_fake
    def test_gradients_are_pushed_during_backward_last_layer_first(self):
        agent = self.connect()
        # A bucket of 0 bytes: every parameter's gradient goes on its own.
        optimizer, layer_0_grads_from, step_called_at = self.backward_with_a_slow_layer_0(0)
        # Each hook exchanges its key: push, then pull of the next version.
        pushes = [(at, request["keys"][0]) for at, op, request in agent.fake.events
                  if op == "push_pull"]
        key = {name: i for i, name in enumerate(optimizer.kubeps_parameter_names)}
        arrival = {k: at for at, k in pushes}
        self.assertEqual(sorted(arrival), sorted(key.values()), "one push per parameter")
        for later_layer in ("4.weight", "4.bias", "2.weight", "2.bias"):
            self.assertLess(arrival[key[later_layer]], layer_0_grads_from,
                            "%s reached the agent before backward reached layer 0" % later_layer)
        for first_layer in ("0.weight", "0.bias"):
            self.assertGreater(arrival[key[first_layer]], layer_0_grads_from)
            self.assertLess(arrival[key[first_layer]], step_called_at,
                            "%s was pushed by its hook, not by step()" % first_layer)
        order = [k for _, k in sorted(pushes)]
        self.assertLess(order.index(key["4.weight"]), order.index(key["2.weight"]))

    @requires_fake
    def test_small_gradients_travel_together_until_a_request_holds_a_bucket(self):
        agent = self.connect()
        bucket = 100  # bytes: layer 4's 15 floats are below it, with layer 2's above
        optimizer, layer_0_grads_from, step_called_at = self.backward_with_a_slow_layer_0(bucket)
        key = {name: i for i, name in enumerate(optimizer.kubeps_parameter_names)}
        numel = {key[name]: p.numel() for name, p in three_layers().named_parameters()}
        requests = sorted((at, request["keys"]) for at, op, request in agent.fake.events
                          if op == "push_pull")
        sent = [k for _, keys in requests for k in keys]
        self.assertEqual(sorted(sent), sorted(numel), "every parameter once")
        self.assertGreater(len(requests), 1)
        self.assertLess(len(requests), len(numel), "small gradients went together")
        for _, keys in requests[:-1]:
            self.assertGreaterEqual(sum(numel[k] * 4 for k in keys), bucket,
                                    "a request left before it held a bucket: %s" % keys)
        first_at, first_keys = requests[0]
        self.assertIn(key["4.weight"], first_keys)
        self.assertLess(first_at, layer_0_grads_from, "the first bucket waited for backward's end")
        self.assertLess(requests[-1][0], step_called_at,
                        "the last bucket was sent by step(), not once every gradient was in")

    def test_the_servers_optimizer_updates_the_parameters(self):
        self.connect()
        model, reference = three_layers(), three_layers()
        # The user's own optimizer (lr 100) is not stepped: the servers' sgd is.
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=100.0),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        train(model, optimizer, 3)
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE), 3)
        self.assertParametersEqual(model, reference, exact=False)

    def test_with_servers_that_only_average_the_wrapped_optimizer_steps(self):
        self.connect(optimizer="none")
        model, reference = three_layers(), three_layers()
        optimizer = kps.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
            named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        # Gradients set to None between steps: the hooks still see each new one.
        train(model, optimizer, 3, set_to_none=True)
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), 3)
        # One worker: the average is this worker's gradient, so momentum SGD runs as locally.
        self.assertParametersEqual(model, reference)
        self.assertTrue(optimizer.state, "the wrapped optimizer kept its momentum buffers")

    def test_with_servers_that_only_average_the_gradients_are_clipped_after_synchronize(self):
        self.connect(optimizer="none")
        model, reference = three_layers(), three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        local = torch.optim.SGD(reference.parameters(), lr=0.1)
        loss_fn = torch.nn.CrossEntropyLoss()
        for step in kps.steps(3):
            x, y = batch_for(step)
            for net, opt in [(model, optimizer), (reference, local)]:
                opt.zero_grad()
                loss_fn(net(x), y).backward()
                if opt is optimizer:
                    self.assertTrue(optimizer.synchronize())  # the averaged gradients
                torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.05)
                if opt is optimizer and step == 1:
                    with optimizer.skip_synchronize():  # as a program written for Horovod
                        opt.step()
                else:
                    opt.step()
        self.assertParametersEqual(model, reference)

    @requires_fake
    def test_async_mode_pulls_the_newest_values(self):
        agent = self.connect(mode="async")
        model, reference = three_layers(), three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        train(model, optimizer, 2)
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE), 2)
        self.assertParametersEqual(model, reference, exact=False)
        # Push and pull together, the step's six small gradients in one request (far below
        # a bucket); no pull waits for a version of its own.
        self.assertEqual([op for _, op, _ in agent.fake.events if op in ("push", "pull")], [])
        exchanges = [(r["step"], len(r["keys"])) for _, op, r in agent.fake.events
                     if op == "push_pull"]
        self.assertEqual(sorted(exchanges), [(0, 6), (1, 6)])

    def test_a_scalar_parameter(self):
        self.connect()
        scale, reference = torch.nn.Parameter(torch.tensor(2.0)), torch.tensor(2.0)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD([scale], lr=0.1),
                                             named_parameters=[("scale", scale)])
        for step in kps.steps(2):
            optimizer.zero_grad()
            (scale * scale).backward()  # gradient 2 * scale
            optimizer.step()
            reference -= LEARNING_RATE * 2 * reference
        self.assertEqual(scale.shape, torch.Size([]))
        self.assertEqual(scale.item(), reference.item())

    def with_an_extra_layer(self, extra, prefix="unused"):
        """three_layers() and `extra`, named under `prefix`, both in one optimizer:
        (model, extra, the optimizer)."""
        model = three_layers()
        params = list(model.named_parameters()) + [(prefix + "." + n, p)
                                                   for n, p in extra.named_parameters()]
        optimizer = kps.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.1),
                                             named_parameters=params)
        return model, extra, optimizer

    def with_an_unused_layer(self):
        """three_layers() and a layer its forward pass never uses."""
        return self.with_an_extra_layer(torch.nn.Linear(2, 2))

    def test_a_parameter_without_gradient_is_pushed_as_zeros(self):
        self.connect()
        model, unused, optimizer = self.with_an_unused_layer()
        before = unused.weight.detach().clone()
        train(model, optimizer, 2)  # would hang in sync mode if a key were never pushed
        self.assertTrue(torch.equal(unused.weight, before))

    def test_sparse_gradients_come_back_sparse_with_servers_that_only_average(self):
        # An embedding's sparse gradient goes dense (the regions are) and comes back as
        # sparse as it went, so that SparseAdam, which takes nothing else, steps it.
        self.connect(optimizer="none")
        torch.manual_seed(1)
        model, reference = (torch.nn.EmbeddingBag(10, 3, sparse=True) for _ in range(2))
        reference.load_state_dict(model.state_dict())
        optimizer = kps.DistributedOptimizer(torch.optim.SparseAdam(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        local = torch.optim.SparseAdam(reference.parameters(), lr=0.1)
        for step in kps.steps(3):
            for net, opt in [(model, optimizer), (reference, local)]:
                opt.zero_grad()
                net(torch.tensor([[1, 2], [3, step]])).sum().backward()
                opt.step()
        self.assertTrue(model.weight.grad.is_sparse)
        self.assertParametersEqual(model, reference)

    @requires_fake
    def test_the_last_bucket_leaves_with_backward_when_a_parameter_gets_no_gradient(self):
        # The first step cannot tell an unused parameter from a late one: its
        # last bucket goes with step(). From then on the hooks know which
        # gradients a backward brings, as DDP learns a static graph.
        agent = self.connect()
        model, unused, optimizer = self.with_an_unused_layer()
        key = {name: i for i, name in enumerate(optimizer.kubeps_parameter_names)}
        used = sorted(key[name] for name, _ in model.named_parameters())
        zeros = sorted(key["unused." + name] for name, _ in unused.named_parameters())
        step_called_at = []
        for step in kps.steps(3):
            optimizer.zero_grad()
            x, y = batch_for(step)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            time.sleep(0.2)  # room for a bucket sent by the last hook to reach the agent
            step_called_at.append(time.monotonic_ns())
            optimizer.step()
        requests = sorted((r["step"], at, sorted(r["keys"])) for at, op, r in agent.fake.events
                          if op == "push_pull")
        first = [(at, keys) for s, at, keys in requests if s == 0]
        self.assertEqual(len(first), 1, first)
        self.assertEqual(first[0][1], sorted(used + zeros))
        self.assertGreater(first[0][0], step_called_at[0])
        for step in (1, 2):
            sent = [(at, keys) for s, at, keys in requests if s == step]
            self.assertEqual([keys for _, keys in sent], [used, zeros], sent)
            self.assertLess(sent[0][0], step_called_at[step],
                            "step %d's gradients waited for step()" % step)
            self.assertGreater(sent[1][0], step_called_at[step], "the zeros go with step()")

    def test_the_shared_views_stay_valid_after_the_session(self):
        self.connect()
        model = three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        train(model, optimizer, 1)
        views = [(b.values, b.param) for b in optimizer._kubeps_bindings]
        kps.shutdown()
        # torch.frombuffer tensors hold no buffer export: unmapping under them would crash here.
        for values, param in views:
            self.assertTrue(torch.equal(values, param))

    def test_a_model_wrapped_again_after_the_session_holds_no_hook_of_the_first(self):
        # A notebook wraps the same model once per run. Each wrapping's gradient hooks
        # stayed on the model after shutdown(), and held that optimizer (its bindings,
        # the views of its shared memory) for as long as the model lived.
        self.connect()
        model = three_layers()
        first = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
        train(model, first, 1)
        kps.shutdown()
        first = weakref.ref(first)
        gc.collect()
        self.assertIsNone(first(), "the first wrapping outlived its session")
        self.connect()
        second = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                          named_parameters=model.named_parameters())
        train(model, second, 1)

    def test_a_learning_rate_scheduler_accepts_the_distributed_optimizer(self):
        self.connect()
        model = three_layers()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer = kps.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
        self.assertIsInstance(optimizer, torch.optim.SGD)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        train(model, optimizer, 1)
        scheduler.step()
        self.assertEqual(optimizer.param_groups[0]["lr"], 0.05)

    def test_a_learning_rate_scheduler_made_before_the_wrapping_steps_through_kubeps(self):
        # The scheduler patches step() on the optimizer it is given; copied
        # into the wrapper, that patch ran SGD's own step (lr 100) without kubeps.
        self.connect()
        model, reference = three_layers(), three_layers()
        sgd = torch.optim.SGD(model.parameters(), lr=100.0)
        scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
        optimizer = kps.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        train(model, optimizer, 3)
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE), 3)
        self.assertParametersEqual(model, reference, exact=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
            scheduler.step()
        self.assertEqual(optimizer.param_groups[0]["lr"], 50.0)

    def test_a_parameter_without_a_gradient_in_a_step_after_one_with_is_no_error(self):
        # zero_grad() zeroes .grad in place (torch 1.x's default); a branch the forward
        # pass leaves out gives its parameters no gradient that step. What step()'s
        # check recorded of the step before must not be taken for a change.
        self.connect()
        model, branch, optimizer = self.with_an_extra_layer(torch.nn.Linear(6, 3), "branch")
        for step in kps.steps(3):
            x, y = batch_for(step)
            optimizer.zero_grad(set_to_none=False)
            logits = model(x) + (branch(x) if step != 1 else 0)
            torch.nn.functional.cross_entropy(logits, y).backward()
            optimizer.step()

    def test_a_scheduler_made_before_the_wrapping_outlives_load_state_dict(self):
        # Optimizer.load_state_dict (resume_with's load) replaces param_groups: the
        # scheduler set the rate on the optimizer given, which no longer shared them.
        self.connect(optimizer="none")
        model = three_layers()
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(sgd, step_size=1, gamma=0.5)
        optimizer = kps.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
        optimizer.load_state_dict(optimizer.state_dict())
        for step in kps.steps(2):
            x, y = batch_for(step)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            scheduler.step()
        self.assertEqual(optimizer.param_groups[0]["lr"], 0.025)


def cuda_missing():
    if torch is None or not torch.cuda.is_available():
        return "no CUDA device visible to torch: the GPU model's test needs one"
    return None


@needs_torch
@unittest.skipIf(cuda_missing(), cuda_missing())
class OnAGpu(TorchTestCase):
    """A model on the GPU: kubeps.torch copies each gradient out of the device and the new
    values back in, so training there ends where it ends on the CPU (up to the GPU's
    arithmetic)."""

    def train_on_the_gpu(self, per_module):
        self.connect()
        model = three_layers().to("cuda")
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=100.0),
                                             named_parameters=model.named_parameters(),
                                             model=model if per_module else None)
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        train(model, optimizer, 3, device="cuda")
        for name, p in model.named_parameters():
            self.assertEqual(p.device.type, "cuda", name)
        return model.cpu()

    def test_each_update_mode_ends_where_the_cpu_model_ends(self):
        reference = three_layers()
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE), 3)
        for per_module in (False, True):
            with self.subTest(per_module=per_module):
                model = self.train_on_the_gpu(per_module)
                reset_kubeps()
                self.assertParametersEqual(model, reference, exact=False)


@needs_torch
class HalfPrecisionParameters(TorchTestCase):
    """A bfloat16 model: the servers keep float32 values (mixed precision's master weights),
    each worker's parameters are their rounding, and the gradients go up as float32."""

    def test_a_bfloat16_model_trains_on_float32_values_the_servers_keep(self):
        self.connect()
        model, reference = three_layers().bfloat16(), three_layers().bfloat16()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        master = [p.detach().float() for p in reference.parameters()]
        loss_fn = torch.nn.CrossEntropyLoss()
        for step in kps.steps(3):
            x, y = batch_for(step)
            optimizer.zero_grad()
            loss_fn(model(x.bfloat16()), y).backward()
            optimizer.step()
            # The same step by hand: the bfloat16 copy of float32 values computes the gradient.
            with torch.no_grad():
                for p, m in zip(reference.parameters(), master):
                    p.copy_(m)
            reference.zero_grad()
            loss_fn(reference(x.bfloat16()), y).backward()
            for p, m in zip(reference.parameters(), master):
                m.sub_(LEARNING_RATE * p.grad.float())
        for binding, m in zip(optimizer._kubeps_bindings, master):
            self.assertEqual(binding.param.dtype, torch.bfloat16, binding.name)
            self.assertTrue(torch.allclose(binding.values, m, rtol=1e-6, atol=1e-7), binding.name)
            self.assertTrue(torch.equal(binding.param, binding.values.bfloat16()), binding.name)
        kept = torch.cat([b.values.flatten() for b in optimizer._kubeps_bindings])
        self.assertFalse(torch.equal(kept, kept.bfloat16().float()),
                         "the servers' values were rounded to bfloat16")

    def test_with_optimizer_none_the_mean_comes_back_as_a_bfloat16_gradient(self):
        self.connect(optimizer="none")
        model, reference = three_layers().bfloat16(), three_layers().bfloat16()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        local = torch.optim.SGD(reference.parameters(), lr=0.1)
        for step in kps.steps(2):
            x, y = batch_for(step)
            for net, opt in ((model, optimizer), (reference, local)):
                opt.zero_grad()
                torch.nn.CrossEntropyLoss()(net(x.bfloat16()), y).backward()
                opt.step()
        for name, p in model.named_parameters():
            self.assertEqual(p.grad.dtype, torch.bfloat16, name)
        self.assertParametersEqual(model, reference)

    def test_a_float16_parameter_is_the_rounding_of_the_servers_value(self):
        # float16 layers do not run on torch 1.13's CPU: an elementwise model does.
        self.connect()
        weight = torch.nn.Parameter(torch.tensor([1.0, -2.0, 60000.0], dtype=torch.float16))
        optimizer = kps.DistributedOptimizer(torch.optim.SGD([weight], lr=0.1),
                                             named_parameters=[("weight", weight)])
        kps.broadcast_parameters({"weight": weight})
        x = torch.tensor([0.1, 0.2, -20000.0], dtype=torch.float16)
        for _ in kps.steps(2):
            optimizer.zero_grad()
            (weight * x).float().sum().backward()
            optimizer.step()
        (binding,) = optimizer._kubeps_bindings
        # sgd with learning rate 0.5, twice: value - 0.5 * x in float32 on the servers.
        kept = torch.tensor([1.0, -2.0, 60000.0]) - 2 * LEARNING_RATE * x.float()
        self.assertTrue(torch.allclose(binding.values, kept, rtol=1e-6), binding.values)
        self.assertEqual(weight.dtype, torch.float16)
        self.assertTrue(torch.equal(weight[:2], binding.values[:2].half()), weight)
        self.assertEqual(weight[2].item(), float("inf"), "past float16's 65504")


def compile_missing():
    if torch is None or not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0 or later: %s" % (torch and torch.__version__)
    return None


@needs_torch
@unittest.skipIf(compile_missing(), compile_missing())
class UnderTorchCompile(TorchTestCase):
    """A compiled model: its backward pass is one compiled graph, but the parameters' gradient
    accumulators are still autograd's, so their hooks push as in eager mode, and the per-module
    hooks of model= run where the compiled forward breaks its graph for them."""

    def test_each_update_mode_ends_where_the_eager_model_ends(self):
        reference = three_layers()
        train_locally(reference, torch.optim.SGD(reference.parameters(), lr=LEARNING_RATE), 3)
        backends = [("aot_eager", "cpu")] + ([("inductor", "cuda")] if not cuda_missing() else [])
        for (backend, device), per_module in [(b, m) for b in backends for m in (False, True)]:
            with self.subTest(backend=backend, device=device, per_module=per_module):
                # Compiled code outlives its model and does not check the hooks it was
                # traced with: without a reset, the next model would run the last one's.
                torch._dynamo.reset()
                self.connect()
                try:
                    model = three_layers().to(device)
                    optimizer = kps.DistributedOptimizer(
                        torch.optim.SGD(model.parameters(), lr=100.0),
                        named_parameters=model.named_parameters(),
                        model=model if per_module else None)
                    kps.broadcast_parameters(model.state_dict(), root_rank=0)
                    train(torch.compile(model, backend=backend), optimizer, 3, device=device)
                finally:
                    reset_kubeps()
                self.assertParametersEqual(model.cpu(), reference, exact=False)


@needs_torch
class AsAUserRunsIt(unittest.TestCase):
    def test_the_three_lines_in_a_training_process_beside_an_agent_process(self):
        socket_dir = make_socket_dir(self)
        agent = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_agent.py"), socket_dir,
                                  "--rollback-at", "3", "--resume-step", "2"],
                                 stderr=subprocess.PIPE, text=True)
        self.addCleanup(agent.kill)
        script = textwrap.dedent("""
            import torch
            import kubeps.torch as kps
            kps.init()
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                        torch.nn.Linear(8, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            optimizer = kps.DistributedOptimizer(optimizer,
                                                 named_parameters=model.named_parameters())
            kps.broadcast_parameters(model.state_dict(), root_rank=0)
            seen = []
            for step in kps.steps(5):
                seen.append(step)
                x = torch.full((3, 4), float(step))
                optimizer.zero_grad()
                model(x).pow(2).mean().backward()
                optimizer.step()
            kps.finish()
            print("steps", seen)
        """)
        user = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=client_environment(KUBEPS_SOCKET_DIR=socket_dir), timeout=120,
                              cwd="/tmp")
        self.assertEqual(user.returncode, 0, user.stderr)
        self.assertIn("steps [0, 1, 2, 3, 2, 3, 4]", user.stdout)
        _, agent_errors = agent.communicate(timeout=30)
        self.assertEqual(agent.returncode, 0, "the agent exits 0 after finish: " + agent_errors)


if __name__ == "__main__":
    unittest.main()
