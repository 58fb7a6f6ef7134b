"""A PyTorch job with a loss scaler (mixed precision), 2 ps x 2 workers through `kubeps run`:
one worker's gradient overflows, the servers (optimizer none, nonFinite SkipStep) hand the mean
on with its Inf, and both workers skip that step alike and end on the same parameters.  On the
CPU the scaler's algorithm is written out (torch 1.13's GradScaler runs on CUDA only); where
the program's torch sees a GPU, torch's own GradScaler runs it under autocast as well.  A server
stopped by SIGTERM after the overflow rolls the job back to before it, and the program's scale
and optimizer go back with its parameters: the run ends as the clean one."""
import os
import re
import signal
import subprocess
import unittest

from jobtools import replica_pids, write_manifest
from user_code_job import MISSING, TORCH_PYTHON, UserCodeJobCase, program_manifest

PROGRAM_DIR = os.path.dirname(os.path.abspath(__file__))
# Each request delayed by up to 10 ms: a step takes longer than the kill takes to land.
PACED = {"KUBEPS_FAULTS": "delay=1,delay_max_ms=10"}
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
    def run_job(self, non_finite, device="cpu", name="", spec="", args=(), env=None,
                during=None):
        """The loss-scaled program's job; `during(job)` runs while it does."""
        spec = "  mode: sync\n  optimizer: {name: none}\n  nonFinite: %s\n%s" % (non_finite,
                                                                                  spec)
        manifest = program_manifest("loss-scaled", "loss_scaled_program.py", PROGRAM_DIR, spec,
                                    args=["--device", device] + list(args))
        name = "%s-%s%s" % (non_finite, device, name)
        path = write_manifest(self.dir, manifest, name + ".yaml")
        job = self.start(name, path, env)
        if during is not None:
            during(job)
        return job, job.wait(180)

    def results(self, job):
        """rank -> (skipped, scale, finite, parameters) as each rank printed them."""
        results = {}
        for _, line in job.lines:
            found = RESULT.match(line)
            if found:
                results[int(found.group(1))] = found.groups()[1:]
        self.assertEqual(sorted(results), [0, 1], job.output())
        return results

    def test_an_overflow_on_one_worker_is_skipped_by_both(self):
        self.assert_both_skip_the_overflow("cpu")

    @unittest.skipIf(CUDA_MISSING, "torch's GradScaler on a GPU: %s" % CUDA_MISSING)
    def test_torchs_grad_scaler_on_a_gpu_skips_the_overflow_on_both(self):
        self.assert_both_skip_the_overflow("cuda")

    def assert_both_skip_the_overflow(self, device):
        job, code = self.run_job("SkipStep", device)
        out = job.output()
        self.assertEqual(code, 0, out)
        results = self.results(job)
        # Rank 0's own gradient was finite: it skipped because the mean was not.
        self.assertEqual(results[0], results[1], out)
        skipped, scale, finite, _ = results[0]
        self.assertEqual((skipped, scale, finite), ("5", "32768", "True"), out)

    def test_a_server_stopped_mid_job_takes_the_scale_back_with_the_parameters(self):
        # A server stopped by SIGTERM (an eviction, a drain) after step 140 rolls the job
        # back to its checkpoint of step 100; the overflow at 120 is computed again. The
        # program's optimizer, parameters, scale and record of skipped steps go back to
        # step 100 with it (kps.restore_on_rollback), so the run ends as the clean one:
        # the overflow skipped once, the scale halved once, the same parameters.
        options = dict(spec="  checkpoint: {intervalSteps: 100}\n",
                       args=["--steps", "400", "--overflow-at", "120", "--log-every", "20"],
                       env=PACED)
        clean, code = self.run_job("SkipStep", name="-clean", **options)
        self.assertEqual(code, 0, clean.output())

        def stop_server(job):
            job.wait_for_line(r"^\[worker-0/trainer\] step 140$", timeout=120)
            victims = replica_pids(job.run_dir, "server-0")
            self.assertEqual(len(victims), 1, job.output())
            os.kill(victims[0], signal.SIGTERM)

        job, code = self.run_job("SkipStep", name="-stopped", during=stop_server, **options)
        out = job.output()
        self.assertEqual(code, 0, out)
        self.assertIn("server-0 exited with code 143; restarting it", out)
        self.assertIn("loaded checkpoint of step 100", out)
        results = self.results(job)
        self.assertEqual(results, self.results(clean), out)
        self.assertEqual(results[0][:2], ("120", "32768"), out)

    def test_without_skip_step_the_overflow_fails_the_job_saying_what_to_set(self):
        job, code = self.run_job("Fail")
        out = job.output()
        self.assertNotEqual(code, 0, out)
        self.assertRegex(out, r"job loss-scaled failed.*NonFiniteGradient", out)
        self.assertIn("spec.nonFinite: SkipStep", out)


if __name__ == "__main__":
    unittest.main()
