"""A graceful stop (SIGTERM: what Kubernetes sends on eviction, a node drain
or a rollout, and what `kill PID` sends) of any replica mid-job: the replica
says so and exits 143, the run policy restarts it, and the job ends with the
same parameters as without the stop. Before, a server or the scheduler so
stopped exited 0 without a word, was taken for finished, never came back,
and the job failed 40 s later blaming a worker."""
import os
import signal
import tempfile
import unittest

from jobtools import (OVERLAPPED, RunningJob, read_floats, run_job, wait_for_replica_pid,
                      wait_for_steps, write_manifest)
from test_scheduler_restart import JOB_ENV, STEPS, job_text, scheduler_pid


class SigtermTest(unittest.TestCase):
    clean_params = None

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeps-sigterm-")
        dump = os.path.join(cls.dir, "clean.bin")
        code, clean = run_job(write_manifest(cls.dir, job_text("clean"), "clean.yaml"),
                              env=dict(OVERLAPPED, KUBEPS_DUMP_PARAMS=dump, KUBEPS_MAX_STEPS=str(STEPS)))
        assert code == 0, clean.output()
        cls.clean_params = read_floats(dump)

    def stop_mid_job(self, name, *replicas, text=job_text):
        """SIGTERM at step 150 to each of `replicas` at once: one, or several
        as a drain of their node stops them."""
        dump = os.path.join(self.dir, name + ".bin")
        job = RunningJob(write_manifest(self.dir, text(name), name + ".yaml"),
                         env=dict(JOB_ENV, KUBEPS_DUMP_PARAMS=dump))
        self.addCleanup(lambda: job.process.poll() is None and (job.process.kill(),
                                                                 job.process.wait()))
        wait_for_steps(job, 0, 150)
        for pid in [scheduler_pid(job) if replica == "scheduler-0" else
                    wait_for_replica_pid(job, replica) for replica in replicas]:
            os.kill(pid, signal.SIGTERM)
        self.assertEqual(job.wait(300), 0, job.output())
        for replica in replicas:
            self.assertIn("%s exited with code 143; restarting it" % replica, job.output())
        self.assertEqual(read_floats(dump), self.clean_params,
                         "parameters differ from the clean run's")
        return job

    def test_a_server_stopped_by_sigterm_says_so_and_is_recovered(self):
        job = self.stop_mid_job("termserver", "server-0")
        self.assertIn("server stopped by SIGTERM before the job was over; exits 143", job.output())

    def test_the_scheduler_stopped_by_sigterm_says_so_and_is_recovered(self):
        job = self.stop_mid_job("termsched", "scheduler-0")
        self.assertIn("scheduler stopped by SIGTERM before the job was over; exits 143",
                      job.output())

    def test_a_drain_of_the_scheduler_and_a_server_is_recovered_with_resume_false(self):
        """With spec.checkpoint.resume false, the new scheduler told the
        server's new process to delete its checkpoints as an earlier run's
        when it registered before any node that ran on; the recovery its
        restart called for then found no common step and failed the job.
        The server now tells its own run's checkpoints from another's."""
        def without_resume(name):
            return job_text(name).replace('"intervalSteps": 50', '"intervalSteps": 50, "resume": false')
        job = self.stop_mid_job("drain", "scheduler-0", "server-0", text=without_resume)
        self.assertNotIn("discarded an earlier run's checkpoints", job.output())

    def test_a_worker_stopped_by_sigterm_is_recovered(self):
        self.stop_mid_job("termworker", "worker-1")


if __name__ == "__main__":
    unittest.main()
