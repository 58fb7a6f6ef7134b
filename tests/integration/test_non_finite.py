"""A diverging job (SGD with learning rate 1e10): it fails at once, with a
condition that says the model diverged, instead of ending `succeeded` with
NaN parameters; with spec.nonFinite: SkipStep the shards skip the steps and
count them, and the job runs to its end."""
import tempfile
import time
import unittest

from jobtools import (SLOW_NETWORK, RunningJob, manifest, metric, run_job, scrape,
                      write_manifest)

DIVERGING = {"name": "sgd", "learningRate": 1e10}


class NonFiniteTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-test-")

    def test_diverging_job_fails_at_once_saying_why(self):
        path = write_manifest(self.dir, manifest("diverge", optimizer=DIVERGING, batch=32))
        start = time.time()
        code, job = run_job(path, env={"KUBEPS_MAX_STEPS": "300"}, timeout=240)
        took = time.time() - start
        out = job.output()
        print("\ndiverging job: exit %d after %.1f s" % (code, took))
        self.assertNotEqual(code, 0, out)
        self.assertNotRegex(out, r"job diverge succeeded")
        # The job's own verdict names the reason and the worker, and no
        # replica was restarted for it (a rerun diverges again).
        self.assertRegex(out, r"job diverge failed.*(NonFiniteLoss|NonFiniteGradient)", out)
        self.assertRegex(out, r"worker-\d failed and is not restarted", out)
        self.assertNotIn("restarting it", out)

    def test_skip_step_skips_and_counts_and_the_job_ends(self):
        text = manifest("skip", optimizer=DIVERGING, batch=32)
        text = text.replace('"mode": "sync",', '"mode": "sync",\n    "nonFinite": "SkipStep",')
        self.assertIn("SkipStep", text)
        path = write_manifest(self.dir, text)
        # Held up to 50 ms a request, the 60 steps last seconds, not a tenth
        # of one: the scrapes below see the skipped steps before the server exits.
        job = RunningJob(path, env=dict(SLOW_NETWORK, KUBEPS_MAX_STEPS="60"))
        try:
            _, metrics_port = job.ports("server-0")
            skipped = 0
            while job.process.poll() is None:
                try:
                    skipped = max(skipped, metric(scrape(metrics_port),
                                                  "kubeps_server_updates_skipped_total"))
                except Exception:
                    pass  # the server may be gone already
                time.sleep(0.05)
            code = job.wait(timeout=240)
        finally:
            job.close()
        out = job.output()
        self.assertEqual(code, 0, out)
        self.assertGreater(skipped, 0, out)
        print("\nSkipStep: job succeeded, server-0 skipped %d updates" % skipped)


if __name__ == "__main__":
    unittest.main()
