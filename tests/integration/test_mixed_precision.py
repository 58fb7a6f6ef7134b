"""A PyTorch job with a loss scaler (mixed precision), 2 ps x 2 workers through `kubeps run`:
one worker's gradient overflows, the servers (optimizer none, nonFinite SkipStep) hand the mean
on with its Inf, and both workers skip that step alike and end on the same parameters."""
import os
import re
import unittest

from jobtools import write_manifest
from user_code_job import UserCodeJobCase, program_manifest

PROGRAM_DIR = os.path.dirname(os.path.abspath(__file__))
RESULT = re.compile(r"^\[worker-\d/trainer\] rank (\d) skipped \[([\d, ]*)\] scale (\S+) "
                    r"finite (\w+) parameters ([0-9a-f]{64})$")


class MixedPrecisionTest(UserCodeJobCase):
    def run_job(self, non_finite):
        spec = "  mode: sync\n  optimizer: {name: none}\n  nonFinite: %s\n" % non_finite
        manifest = program_manifest("loss-scaled", "loss_scaled_program.py", PROGRAM_DIR, spec)
        path = write_manifest(self.dir, manifest, non_finite + ".yaml")
        job = self.start(non_finite, path)
        return job, job.wait(180)

    def test_an_overflow_on_one_worker_is_skipped_by_both(self):
        job, code = self.run_job("SkipStep")
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
