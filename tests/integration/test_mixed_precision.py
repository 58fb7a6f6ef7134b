"""A PyTorch job with a loss scaler (mixed precision), 2 ps x 2 workers through `kubeps run`:
one worker's gradient overflows, the servers (optimizer none, nonFinite SkipStep) hand the mean
on with its Inf, and both workers skip that step alike and end on the same parameters.  On the
CPU the scaler's algorithm is written out (torch 1.13's GradScaler runs on CUDA only); where
the program's torch sees a GPU, torch's own GradScaler runs it under autocast as well."""
import os
import re
import subprocess
import unittest

from jobtools import write_manifest
from user_code_job import MISSING, TORCH_PYTHON, UserCodeJobCase, program_manifest

PROGRAM_DIR = os.path.dirname(os.path.abspath(__file__))
RESULT = re.compile(r"^\[worker-\d/trainer\] rank (\d) skipped \[([\d, ]*)\] scale (\S+) "
                    r"finite (\w+) parameters ([0-9a-f]{64})$")


def why_cuda_is_missing():
    if MISSING:
        return MISSING
    probe = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120)
    if probe.stdout.strip() != "True":
        return "%s's torch sees no CUDA device" % TORCH_PYTHON
    return None


CUDA_MISSING = why_cuda_is_missing()


class MixedPrecisionTest(UserCodeJobCase):
    def run_job(self, non_finite, device="cpu"):
        spec = "  mode: sync\n  optimizer: {name: none}\n  nonFinite: %s\n" % non_finite
        manifest = program_manifest("loss-scaled", "loss_scaled_program.py", PROGRAM_DIR, spec,
                                    args=["--device", device])
        path = write_manifest(self.dir, manifest, "%s-%s.yaml" % (non_finite, device))
        job = self.start(non_finite + "-" + device, path)
        return job, job.wait(180)

    def test_an_overflow_on_one_worker_is_skipped_by_both(self):
        self.assert_both_skip_the_overflow("cpu")

    @unittest.skipIf(CUDA_MISSING, "torch's GradScaler on a GPU: %s" % CUDA_MISSING)
    def test_torchs_grad_scaler_on_a_gpu_skips_the_overflow_on_both(self):
        self.assert_both_skip_the_overflow("cuda")

    def assert_both_skip_the_overflow(self, device):
        job, code = self.run_job("SkipStep", device)
        out = job.output()
        self.assertEqual(code, 0, out)
        results = {}
        for _, line in job.lines:
            found = RESULT.match(line)
            if found:
                results[int(found.group(1))] = found.groups()[1:]
        self.assertEqual(sorted(results), [0, 1], out)
        # Rank 0's own gradient was finite: it skipped because the mean was not.
        self.assertEqual(results[0], results[1], out)
        skipped, scale, finite, _ = results[0]
        self.assertEqual((skipped, scale, finite), ("5", "32768", "True"), out)

    def test_without_skip_step_the_overflow_fails_the_job_saying_what_to_set(self):
        job, code = self.run_job("Fail")
        out = job.output()
        self.assertNotEqual(code, 0, out)
        self.assertRegex(out, r"job loss-scaled failed.*NonFiniteGradient", out)
        self.assertIn("spec.nonFinite: SkipStep", out)


if __name__ == "__main__":
    unittest.main()
