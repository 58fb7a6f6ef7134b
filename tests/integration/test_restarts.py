"""runPolicy end to end: replicas of a real `kubeps run` job are killed (or
fail on their own) and the job ends as its restart policy says, with the
reason on the runner's last line and no process left behind."""
import json
import os
import re
import signal
import tempfile
import time
import unittest

from jobtools import (DATASET, OVERLAPPED, PACED_FOR_KILLS, RunningJob, manifest_with,
                      processes_with_env, read_floats, wait_for_replica_pid, wait_for_steps,
                      write_manifest)

# The MLP example's settings (Adam, batch 64 per worker, 2 servers, 2
# workers), one epoch (468 steps), progress every 100 ms so the time from a
# kill to the next step can be read off the output.
STEPS = 468
KILL_AT_STEP = 150


def restart_job(name, policy, backoff_limit=3, dataset=DATASET, mode="sync"):
    text = manifest_with(name, {"mode": mode, "progressIntervalMs": 100,
                                "runPolicy": {"restartPolicy": policy, "backoffLimit": backoff_limit}})
    return text.replace(DATASET, dataset)


def final_line(job):
    lines = [line for _, line in job.lines if line.startswith("[kubeps] job ")]
    return lines[-1] if lines else ""


class RestartTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-restart-")

    def start(self, name, policy, backoff_limit=3, env=None, dataset=DATASET, mode="sync"):
        path = write_manifest(self.dir, restart_job(name, policy, backoff_limit, dataset, mode),
                              name + ".yaml")
        full_env = dict(OVERLAPPED, **PACED_FOR_KILLS, KUBEPS_MAX_STEPS=str(STEPS))
        full_env.update(env or {})
        job = RunningJob(path, run_dir=os.path.join(self.dir, "run-" + name), env=full_env)
        self.addCleanup(self.stop, job)
        return job

    @staticmethod
    def stop(job):
        if job.process.poll() is None:
            job.process.kill()
            job.process.wait()

    def kill_worker(self, job, sig, replica="worker-0", exclude=()):
        """Sends `sig` to the replica mid-run; returns (pid, seconds since
        the job started, the job's highest step before the kill)."""
        pid = wait_for_replica_pid(job, replica, exclude=exclude)
        before = max(p["total_steps"] for p in job.progress()) if job.progress() else 0
        at = time.time() - job.start
        os.kill(pid, sig)
        return pid, at, before

    def assert_succeeded(self, job, code):
        self.assertEqual(code, 0, job.output())
        self.assertRegex(final_line(job), r"^\[kubeps\] job \S+ succeeded in [\d.]+ s$", job.output())
        self.assert_nothing_lingers(job)

    def assert_failed(self, job, code, reason, message):
        self.assertEqual(code, 1, job.output())
        line = final_line(job)
        self.assertRegex(line, r"^\[kubeps\] job \S+ failed after [\d.]+ s \(%s\): " % reason, job.output())
        self.assertRegex(line, message, job.output())
        self.assert_nothing_lingers(job)

    def assert_nothing_lingers(self, job):
        """No process of the job is left within 10 s of its workers' last line."""
        worker_lines = [t for t, line in job.lines if line.startswith("[worker ")]
        finished = worker_lines[-1] if worker_lines else 0.0
        deadline = job.start + finished + 10
        left = processes_with_env("KUBEPS_RUN_DIR", job.run_dir)
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = processes_with_env("KUBEPS_RUN_DIR", job.run_dir)
        self.assertEqual(left, [], "processes of the job still alive 10 s after its workers finished")

    def run_to_end(self, job, timeout=240):
        return job.wait(timeout)

    # OnFailure --------------------------------------------------------------

    def test_on_failure_restarts_a_killed_worker_and_training_recovers(self):
        clean_dump = os.path.join(self.dir, "clean.bin")
        clean = self.start("onfailure-clean", "OnFailure", env={"KUBEPS_DUMP_PARAMS": clean_dump})
        self.assert_succeeded(clean, self.run_to_end(clean))
        self.assertNotIn("restarting it", clean.output())

        killed_dump = os.path.join(self.dir, "killed.bin")
        job = self.start("onfailure-kill", "OnFailure", env={"KUBEPS_DUMP_PARAMS": killed_dump})
        wait_for_steps(job, 0, KILL_AT_STEP)
        old, killed_at, before = self.kill_worker(job, signal.SIGKILL)
        self.assert_succeeded(job, self.run_to_end(job))
        self.assertIn("job onfailure-kill Restarting: worker-0 exited with code 137; restarting it "
                      "(restart 1 of at most 3)", job.output())
        self.assertNotIn(old, processes_with_env("KUBEPS_NODE_ID", "worker-0"))

        # Time from the kill to the first step the job completes after it.
        after = [p for p in job.progress() if p["time"] > killed_at and p["total_steps"] > before]
        self.assertTrue(after, job.output())
        recovery = after[0]["time"] - killed_at
        clean_accuracy, killed_accuracy = clean.accuracy(), job.accuracy()
        same = read_floats(clean_dump) == read_floats(killed_dump)
        print("\nOnFailure: worker-0 killed after step %d; next step %d done %.2f s after the kill; "
              "accuracy %.4f without the kill, %.4f with it; final parameters %s"
              % (before, after[0]["total_steps"], recovery, clean_accuracy, killed_accuracy,
                 "bit-identical" if same else "differ"))
        self.assertLess(recovery, 10.0, job.output())
        self.assertLess(abs(killed_accuracy - clean_accuracy), 0.01)
        # The restarted worker starts where the servers are, not at step 0:
        # before, it computed every step again (each gradient dropped as one
        # of a step applied) while worker 1 waited, 6 s for the CNN killed at
        # step 185, hours for a long job. With overlap a progress line of step
        # N is printed once step N-1 is pushed, and that push may not have
        # reached every server when the kill lands: the servers are then at
        # N-1, and the restarted worker rightly computes step N-1 again (its
        # push is new to the server that lacked it). They are never further
        # behind: no push of a step leaves before the step before is done.
        resumed = re.findall(r"^\[worker 0\] resuming at step (\d+) of %d" % STEPS,
                             job.output(), re.MULTILINE)
        self.assertEqual(len(resumed), 1, job.output())
        self.assertGreaterEqual(int(resumed[0]), before - 1, job.output())
        redone = [p for p in job.progress(rank=0) if p["time"] > killed_at and p["total_steps"] < before]
        self.assertEqual(redone, [], "the restarted worker computed steps the job had done")
        # Sync mode, and a shard takes one gradient per worker and step: a
        # step the killed worker had pushed part of changes nothing when it
        # is computed again, so the job ends with exactly the parameters of
        # the run without the kill.
        self.assertTrue(same, "parameters after the kill differ from the clean run's")
        # Both workers ran every step of the job.
        for rank in (0, 1):
            self.assertEqual(job.progress(rank=rank)[-1]["total_steps"], STEPS, job.output())

    def test_a_worker_restarted_in_an_async_job_goes_on_from_its_own_step(self):
        # An async worker's steps are its own (the servers' versions count
        # every worker's updates). Before, the restarted worker started at 0
        # and computed all of them again.
        job = self.start("async-kill", "OnFailure", mode="async")
        wait_for_steps(job, 0, KILL_AT_STEP)
        _, killed_at, _ = self.kill_worker(job, signal.SIGKILL)
        self.assert_succeeded(job, self.run_to_end(job))
        self.assertIn("Restarting: worker-0 exited with code 137", job.output())
        resumed = re.findall(r"^\[worker 0\] resuming at step (\d+) of %d" % STEPS,
                             job.output(), re.MULTILINE)
        self.assertEqual(len(resumed), 1, job.output())
        # From the step its heartbeats said last: at most a beat's (500 ms) before the kill.
        before = max(p["total_steps"] for p in job.progress(rank=0) if p["time"] < killed_at)
        print("\nasync: worker-0 killed after step %d, resumed at step %s" % (before, resumed[0]))
        self.assertGreater(int(resumed[0]), 0, job.output())
        for rank in (0, 1):
            self.assertEqual(job.progress(rank=rank)[-1]["total_steps"], STEPS, job.output())

    def test_on_failure_gives_up_at_the_backoff_limit(self):
        job = self.start("backoff", "OnFailure", backoff_limit=1)
        wait_for_steps(job, 0, 50)
        first, _, _ = self.kill_worker(job, signal.SIGKILL)
        job.wait_for_line(r"worker-0 exited with code 137; restarting it \(restart 1 of at most 1\)")
        # Kill the restarted worker once it is back in the job.
        job.wait_for_line(r"worker 0 \(worker-0\) re-registered")
        self.kill_worker(job, signal.SIGKILL, exclude=(first,))
        self.assert_failed(job, self.run_to_end(job), "BackoffLimitExceeded",
                           r"worker-0 exited with code 137; backoffLimit 1 reached after 1 restarts")

    # Never ------------------------------------------------------------------

    def test_never_fails_the_job_at_the_first_kill(self):
        job = self.start("never", "Never")
        wait_for_steps(job, 1, 50)
        self.kill_worker(job, signal.SIGKILL, replica="worker-1")
        self.assert_failed(job, self.run_to_end(job), "RestartPolicyNever",
                           r"worker-1 exited with code 137 and restartPolicy is Never")
        self.assertNotIn("restarting it", job.output())

    # ExitCode ---------------------------------------------------------------

    def test_exit_code_restarts_a_sigkilled_worker(self):
        job = self.start("exitcode-kill", "ExitCode")
        wait_for_steps(job, 0, KILL_AT_STEP)
        self.kill_worker(job, signal.SIGKILL)
        self.assert_succeeded(job, self.run_to_end(job))
        self.assertIn("worker-0 exited with code 137; restarting it (restart 1 of at most 3)", job.output())
        self.assertEqual(job.progress(rank=0)[-1]["total_steps"], STEPS, job.output())

    def test_exit_code_restarts_a_sigtermed_worker(self):
        job = self.start("exitcode-term", "ExitCode")
        wait_for_steps(job, 0, KILL_AT_STEP)
        self.kill_worker(job, signal.SIGTERM)
        self.assert_succeeded(job, self.run_to_end(job))
        self.assertIn("worker-0 exited with code 143; restarting it (restart 1 of at most 3)", job.output())
        self.assertEqual(job.progress(rank=0)[-1]["total_steps"], STEPS, job.output())

    def test_exit_code_does_not_retry_a_permanent_error(self):
        # A job's own program that ends with code 3, a user's error that no
        # kubeps reason names (a missing data set is one: it fails any job
        # at once, under every policy).
        job = json.loads(restart_job("exitcode-permanent", "ExitCode"))
        for field in ("model", "dataset"):
            del job["spec"][field]
        program = ["sh", "-c", "echo 'train.py: no such optimizer' >&2; exit 3"]
        job["spec"]["replicaSpecs"]["worker"]["template"] = {"spec": {"containers": [{
            "name": "trainer", "image": "example/trainer:1", "command": program}]}}
        path = write_manifest(self.dir, json.dumps(job), "exitcode-permanent.yaml")
        job = RunningJob(path, run_dir=os.path.join(self.dir, "run-exitcode-permanent"))
        self.addCleanup(self.stop, job)
        self.assert_failed(job, self.run_to_end(job, timeout=60), "PermanentExitCode",
                           r"worker-\d exited with code 3, a permanent error under restartPolicy ExitCode")
        self.assertIn("no such optimizer", job.output())
        self.assertNotIn("restarting it", job.output())


if __name__ == "__main__":
    unittest.main()
