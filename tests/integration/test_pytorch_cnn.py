"""examples/pytorch/cnn through `kubeps run`: the seed CNN in plain PyTorch,
2 servers (Adam 1e-3), 2 workers of 64 examples, sync, 3 epochs, each
worker's train.py beside its kubeps-agent, reaches at least 90% test accuracy
and prints the built-in trainer's progress lines.

About two and a half minutes on 2 cores. Needs a Python with torch, found as
test_user_code.py finds it ($KUBEPS_TORCH_PYTHON, default /usr/bin/python3).
"""
import os
import re
import tempfile
import unittest

from jobtools import SOURCE_DIR, RunningJob
from test_user_code import MISSING, accuracy_of, program_env

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "pytorch", "cnn", "trainingjob.yaml")
STEPS_PER_EPOCH = 60000 // 128
STEPS = 3 * STEPS_PER_EPOCH
# Measured: 0.9057 (3 epochs of Adam 1e-3, global batch 128); the issue asks
# for 90%, which is what the example is for, so the bound is not lowered.
MIN_ACCURACY = 0.90
PROGRESS = re.compile(r"^\[worker-(\d)/trainer\] epoch (\d)/3 step (\d+)/%d total_steps (\d+) "
                      r"steps/sec [\d.]+ samples/sec [\d.]+ loss [\d.]+$" % STEPS_PER_EPOCH)


@unittest.skipIf(MISSING, MISSING)
class PytorchCnnTest(unittest.TestCase):
    def test_example_reaches_90_percent_in_3_epochs(self):
        directory = tempfile.mkdtemp(prefix="kubeps-pytorch-cnn-")
        job = RunningJob(EXAMPLE, run_dir=os.path.join(directory, "run"),
                         env=program_env(directory))
        self.addCleanup(lambda: job.process.poll() is None and job.process.kill())
        code = job.wait(900)
        output = job.output()
        self.assertEqual(code, 0, output)
        self.assertRegex(output, r"\[kubeps\] job pytorch-cnn succeeded in [\d.]+ s", output)
        for rank in ("0", "1"):
            self.assertIn("[worker-%s/trainer] rank %s of 2, %d steps (3 epochs of %d) of 2 x 64 "
                          "examples, 1 torch thread(s)" % (rank, rank, STEPS, STEPS_PER_EPOCH),
                          output)
            last = [m for m in (PROGRESS.match(line) for _, line in job.lines)
                    if m and m.group(1) == rank][-1]
            self.assertEqual(last.groups()[1:], ("3", str(STEPS_PER_EPOCH), str(STEPS)), output)
        accuracy = accuracy_of(job)
        print("\nexamples/pytorch/cnn through kubeps run: test accuracy %.4f after %d steps"
              % (accuracy, STEPS))
        self.assertGreaterEqual(accuracy, MIN_ACCURACY, output)


if __name__ == "__main__":
    unittest.main()
