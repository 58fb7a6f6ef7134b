"""Elastic workers (spec.replicaSpecs.worker.elasticPolicy) with `kubeps run`:
a worker that cannot come back is dropped while minReplicas remain, and fails
the job, saying why, where none would. Its own ctest entry, apart from
test_elastic: it mostly waits out replaceTimeoutSeconds, so it runs beside a
test that computes (tests/CMakeLists.txt)."""
import os
import signal
import tempfile
import time
import unittest

from jobtools import (RunningJob, elastic_job, resume, wait_for_replica_pid, wait_for_steps,
                      write_manifest)


class LostWorkerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-elastic-")

    def test_a_frozen_worker_is_dropped_and_the_job_goes_on_without_it(self):
        job = RunningJob(write_manifest(
            self.dir, elastic_job("frozen", replace_timeout=2,
                                  spec={"checkpoint": {"intervalSteps": 20}}), "frozen.yaml"))
        wait_for_steps(job, 0, 60)
        victim = wait_for_replica_pid(job, "worker-1")
        os.kill(victim, signal.SIGSTOP)  # alive, but silent: as a worker on a lost node
        frozen = time.time() - job.start
        try:
            job.wait_for_line(r"worker worker-1 \(rank 1\) has been gone for 2 s", timeout=30)
            job.wait_for_line(r"\[worker 0\] rolled back to step", timeout=30)
            wait_for_steps(job, 0, max(p["total_steps"] for p in job.progress(rank=0)) + 1)
        finally:
            resume(victim)  # it comes back, and is taken in again
        self.assertEqual(job.wait(), 0, job.output())
        dropped = min(t for t, line in job.lines if "[worker 0] rolled back to step" in line)
        went_on = min(p["time"] for p in job.progress(rank=0) if p["time"] > dropped)
        print("\nworker frozen: the job went on %.2f s later (replaceTimeoutSeconds 2)"
              % (went_on - frozen))
        self.assertLess(went_on - frozen, 2 + 8)  # slack for a loaded machine
        self.assertRegex(job.output(), r"\[worker 1\] joined the job at step \d+")

    def test_a_lost_worker_at_min_replicas_fails_the_job_saying_why(self):
        job = RunningJob(write_manifest(
            self.dir, elastic_job("atmin", minimum=2, replace_timeout=1), "atmin.yaml"))
        wait_for_steps(job, 0, 30)
        victim = wait_for_replica_pid(job, "worker-1")
        os.kill(victim, signal.SIGSTOP)
        try:
            self.assertEqual(job.wait(), 1, job.output())
        finally:
            resume(victim)
        self.assertIn("below elasticPolicy.minReplicas (2)", job.output())


if __name__ == "__main__":
    unittest.main()
