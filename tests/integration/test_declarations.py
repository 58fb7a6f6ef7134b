"""Workers whose programs declare other tensors under the same keys (another model, the same
shapes), or fewer: the parameter servers compare the names and counts, and the job fails at
once saying so (reason ModelMismatch), instead of training one worker's layer with another's
gradient or waiting on the keys one worker never pushes.  2 ps x 2 workers, `kubeps run`."""
import os
import textwrap
import unittest

from jobtools import write_manifest
from user_code_job import UserCodeJobCase, program_manifest

# Rank 0's model; rank 1's is RANK_1_LAYERS.
PROGRAM = textwrap.dedent("""
    from collections import OrderedDict
    import torch
    import kubeps.torch as kps
    kps.init()
    torch.manual_seed(1)
    layers = %s if kps.rank() == 1 else [("fc1", (8, 4)), ("fc2", (4, 2))]
    model = torch.nn.Sequential(OrderedDict(
        [(name, torch.nn.Linear(*shape)) for name, shape in layers]))
    optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in kps.steps(5):
        optimizer.zero_grad()
        model(torch.ones(3, 8)).sum().backward()
        optimizer.step()
    kps.finish()
""")


class DeclarationsTest(UserCodeJobCase):
    def run_two_models(self, rank_1_layers):
        with open(os.path.join(self.dir, "program.py"), "w") as f:
            f.write(PROGRAM % rank_1_layers)
        manifest = program_manifest("two-models", "program.py", self.dir,
                                    "  runPolicy: {restartPolicy: OnFailure, backoffLimit: 3}\n")
        job = self.start("two-models", write_manifest(self.dir, manifest))
        code = job.wait(180)
        out = job.output()
        self.assertNotEqual(code, 0, out)
        # A rerun declares the same tensors: the job fails at once, without restarts.
        self.assertRegex(out, r"job two-models failed .*ModelMismatch")
        self.assertNotIn("restarting it", out)
        return out

    def test_workers_of_two_models_fail_the_job_naming_the_tensors(self):
        # The same shapes in the same order, the layers named otherwise.
        out = self.run_two_models('[("encoder", (8, 4)), ("head", (4, 2))]')
        self.assertRegex(out, r"worker-1 declares \"encoder\.(weight|bias)\" as part \(key \d, "
                              r"offset 0, length \d+\), but this server holds \"fc1\.(weight|bias)"
                              r"\" there: the workers run different models")

    def test_a_worker_of_fewer_tensors_fails_the_job_not_waits_on_them(self):
        # fc2 without its bias: rank 0's placement of the tensors both declare
        # (every server holds a part), one fewer on server 1.
        out = self.run_two_models('[("fc1", (8, 4)), ("fc2", (4, 2, False))]')
        self.assertRegex(out, r"worker-1 places [01] parts? on this server, which holds 2 \(rank "
                              r"0's\): the workers run different models")


if __name__ == "__main__":
    unittest.main()
