"""Workers whose programs declare other tensors under the same keys (another model, the same
shapes): the parameter servers compare the names and the job fails at once saying so (reason ModelMismatch), instead of
training one worker's layer with another's gradient.  2 ps x 2 workers through `kubeps run`."""
import os
import textwrap
import unittest

from jobtools import write_manifest
from user_code_job import UserCodeJobCase

# Rank 1 names its layers otherwise: the same shapes, in the same order.
PROGRAM = textwrap.dedent("""
    from collections import OrderedDict
    import torch
    import kubeps.torch as kps
    kps.init()
    torch.manual_seed(1)
    names = ("encoder", "head") if kps.rank() == 1 else ("fc1", "fc2")
    model = torch.nn.Sequential(OrderedDict([(names[0], torch.nn.Linear(8, 4)),
                                             (names[1], torch.nn.Linear(4, 2))]))
    optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in kps.steps(5):
        optimizer.zero_grad()
        model(torch.ones(3, 8)).sum().backward()
        optimizer.step()
    kps.finish()
""")
MANIFEST = """apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata:
  name: two-models
spec:
  runPolicy: {restartPolicy: OnFailure, backoffLimit: 3}
  replicaSpecs:
    ps: {replicas: 2}
    worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: trainer
              image: kubeps/tests:0
              command: [python3, program.py]
              workingDir: %s
"""


class DeclarationsTest(UserCodeJobCase):
    def test_workers_of_two_models_fail_the_job_naming_the_tensors(self):
        with open(os.path.join(self.dir, "program.py"), "w") as f:
            f.write(PROGRAM)
        job = self.start("two-models", write_manifest(self.dir, MANIFEST % self.dir))
        code = job.wait(180)
        out = job.output()
        self.assertNotEqual(code, 0, out)
        self.assertRegex(out, r"worker-1 declares \"encoder\.(weight|bias)\" as part \(key \d, "
                              r"offset 0, length \d+\), but this server holds \"fc1\.(weight|bias)"
                              r"\" there: the workers run different models")
        # A rerun declares the same tensors: the job fails at once, without restarts.
        self.assertRegex(out, r"job two-models failed .*ModelMismatch")
        self.assertNotIn("restarting it", out)


if __name__ == "__main__":
    unittest.main()
