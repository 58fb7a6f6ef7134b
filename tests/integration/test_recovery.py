"""A parameter shard killed with SIGKILL mid-job: the local runner restarts
it, it reloads its checkpoint, the scheduler rolls every shard and worker
back to that step, and the job ends exactly where it would have without
the kill."""
import os
import signal
import tempfile
import time
import unittest

from jobtools import (OVERLAPPED, PACED_FOR_KILLS, RunningJob, manifest, processes_with_env,
                      run_job, write_manifest)


def job_text(name):
    # The learning rate goes by each part's update count, which the checkpoints
    # keep: a restored shard that lost it would step with other rates.
    schedule = {"warmupSteps": 100, "decay": "cosine", "decaySteps": 400, "minLearningRate": 1e-5}
    return manifest(name, optimizer={"name": "adam", "learningRate": 0.001,
                                     "schedule": schedule}).replace(
        '"epochs": 1', '"epochs": 1, "checkpoint": {"intervalSteps": 50}').replace(
        '"progressIntervalMs": 500', '"progressIntervalMs": 100')


class ShardRecoveryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-recovery-")

    def test_killed_shard_resumes_from_checkpoint_bit_for_bit(self):
        clean_dump = os.path.join(self.dir, "clean.bin")
        code, clean = run_job(write_manifest(self.dir, job_text("clean"), "clean.yaml"),
                              env=dict(OVERLAPPED, KUBEPS_DUMP_PARAMS=clean_dump))
        self.assertEqual(code, 0, clean.output())

        killed_dump = os.path.join(self.dir, "killed.bin")
        job = RunningJob(write_manifest(self.dir, job_text("killed"), "killed.yaml"),
                         env=dict(OVERLAPPED, **PACED_FOR_KILLS, KUBEPS_DUMP_PARAMS=killed_dump))
        # Kill server 1 once the job is well past its first checkpoints.
        deadline = time.time() + 120
        while time.time() < deadline and not any(p["total_steps"] >= 180 for p in job.progress()):
            time.sleep(0.05)
        victims = set(processes_with_env("KUBEPS_RUN_DIR", job.run_dir)) & set(
            processes_with_env("KUBEPS_NODE_ID", "server-1"))
        self.assertEqual(len(victims), 1, job.output())
        killed_at = time.time() - job.start
        os.kill(victims.pop(), signal.SIGKILL)
        self.assertEqual(job.wait(), 0, job.output())

        output = job.output()
        self.assertIn("server-1 exited with code 137; restarting it", output)
        self.assertIn("loaded checkpoint of step", output)
        self.assertIn("rolled back to step", output)
        with open(clean_dump, "rb") as a, open(killed_dump, "rb") as b:
            self.assertEqual(a.read(), b.read(), "parameters differ from the run without the kill")
        self.assertEqual(job.accuracy(), clean.accuracy())

        resumed = min(t for t, line in job.lines if "rolled back to step" in line)
        next_step = min(p["time"] for p in job.progress() if p["time"] > resumed)
        print("\nshard SIGKILL: %.2f s from the kill to the next completed step; accuracy %.4f "
              "(without the kill %.4f)" % (next_step - killed_at, job.accuracy(), clean.accuracy()))
        self.assertLess(next_step - killed_at, 30)
        self.assertEqual(processes_with_env("KUBEPS_RUN_DIR", job.run_dir), [])


if __name__ == "__main__":
    unittest.main()
