"""kubeps.torch's parameter names across wrappers: torch.compile's and nn.DataParallel's
(DistributedDataParallel's) leave the names the workers and servers agree on unchanged, so a
job resumes when a run adds or drops one, and a wrapped model's state_dict maps each key to
its own tensor. Skips, saying why, where torch is not installed.
"""

import unittest

from agent_fixture import requires_fake
from test_torch import TorchTestCase, needs_torch, torch

if torch is not None:
    import kubeps.torch as kps


def compiled(module):
    """torch.compile(module) where torch has it; before torch 2.0, a module that names its
    parameters as torch.compile's wrapper does."""
    if hasattr(torch, "compile"):
        return torch.compile(module)

    class OptimizedModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._orig_mod = module

        def forward(self, *args):
            return self._orig_mod(*args)

    return OptimizedModule()


@needs_torch
class NamesAcrossWrappers(TorchTestCase):
    def assertResumesUnder(self, model, linear, prefix=""):
        """`model`, whose Linear(2, 1) `linear` sits inside wrappers, declares it as
        `prefix`weight and `prefix`bias and resumes at step 5 with the servers' values."""
        names = [prefix + "weight", prefix + "bias"]
        self.connect(server_values=dict(zip(names, [[0.5, -0.5], [2.0]])), start_step=5)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        self.assertEqual(optimizer.kubeps_parameter_names, names)
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(linear.weight.tolist(), [[0.5, -0.5]])
        self.assertEqual(linear.bias.tolist(), [2.0])

    @requires_fake
    def test_a_job_resumes_with_its_model_compiled_now_and_not_before(self):
        # torch.compile wraps the model (and any submodule compiled alone) in a
        # module whose parameters are named "_orig_mod.<name>".
        model = torch.nn.Sequential(torch.nn.Linear(2, 1))
        model[0] = compiled(model[0])
        model = compiled(model)
        self.assertEqual([name for name, _ in model.named_parameters()],
                         ["_orig_mod.0._orig_mod.weight", "_orig_mod.0._orig_mod.bias"])
        self.assertResumesUnder(model, model._orig_mod[0]._orig_mod, prefix="0.")
        self.assertEqual(list(kps.steps(6)), [5])

    @requires_fake
    def test_a_job_resumes_with_its_model_in_data_parallel_now_and_not_before(self):
        # More GPUs in the pod than in the run before: nn.DataParallel's names
        # all start with "module.", as DistributedDataParallel's do.
        model = torch.nn.DataParallel(compiled(torch.nn.Linear(2, 1)))
        self.assertEqual([name for name, _ in model.named_parameters()],
                         ["module._orig_mod.weight", "module._orig_mod.bias"])
        self.assertResumesUnder(model, model.module._orig_mod)

    @requires_fake
    def test_a_wrapped_state_dict_maps_each_key_to_its_own_tensor(self):
        # A submodule named "module" beside a parameter of the same last name:
        # the wrapper's prefix comes off every key of the state_dict or none.
        inner = torch.nn.Module()
        inner.x = torch.nn.Parameter(torch.zeros(2))
        inner.module = torch.nn.Module()
        inner.module.x = torch.nn.Parameter(torch.zeros(3))
        model = torch.nn.DataParallel(inner)
        self.connect(server_values={"x": [1.0, 2.0], "module.x": [3.0, 4.0, 5.0]}, start_step=5)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        self.assertEqual(optimizer.kubeps_parameter_names, ["x", "module.x"])
        state = model.state_dict()
        kps.broadcast_parameters(state)
        self.assertEqual(inner.x.tolist(), [1.0, 2.0])
        self.assertEqual(inner.module.x.tolist(), [3.0, 4.0, 5.0])
        self.assertEqual(state["module.module.x"].tolist(), [3.0, 4.0, 5.0])

    @requires_fake
    def test_a_wrapped_state_dict_against_names_declared_with_the_wrapper(self):
        # The wrapped model's names and another module's, declared together:
        # "module." stays in the names, and the wrapped state_dict's keys match.
        model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
        extra = torch.nn.Linear(1, 1, bias=False)
        self.connect(server_values={"module.weight": [0.5, -0.5], "module.bias": [2.0],
                                    "weight": [3.0]}, start_step=5)
        named = list(model.named_parameters()) + list(extra.named_parameters())
        optimizer = kps.DistributedOptimizer(
            torch.optim.SGD([p for _, p in named], lr=0.1), named_parameters=named)
        self.assertEqual(optimizer.kubeps_parameter_names, ["module.weight", "module.bias",
                                                            "weight"])
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(model.module.weight.tolist(), [[0.5, -0.5]])
        self.assertEqual(extra.weight.tolist(), [[3.0]])


if __name__ == "__main__":
    unittest.main()
