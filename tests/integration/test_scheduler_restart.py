"""The scheduler killed with SIGKILL mid-job: the local runner starts it
again, every node registers with it again (rank, incarnation, recovery
generation), and the job ends as fast as without the kill, with no error
logged and exactly the same parameters. Faults after the restart (a shard
or a worker killed) recover as if the scheduler had never restarted, and an
async worker killed with the scheduler goes on from its own step."""
import json
import os
import re
import signal
import tempfile
import time
import unittest

from jobtools import (OVERLAPPED, PACED_FOR_KILLS, RunningJob, manifest_with, processes_with_env,
                      read_floats, run_job, wait_for_replica_pid, wait_for_steps, write_manifest)

STEPS = 468
# The clean runs too: one test times the killed run against its clean run.
JOB_ENV = dict(OVERLAPPED, **PACED_FOR_KILLS, KUBEPS_MAX_STEPS=str(STEPS))


# With a learning-rate schedule: the rate goes by each part's update count,
# which a restarted server, a rollback or a SIGTERM must neither lose nor
# count twice for the parameters to end bit-identical.
SCHEDULED_ADAM = {"name": "adam", "learningRate": 0.001,
                  "schedule": {"warmupSteps": 100, "decay": "cosine", "decaySteps": STEPS,
                               "minLearningRate": 0.0001}}


def job_text(name):
    return manifest_with(name, {"progressIntervalMs": 100,
                                "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 3}},
                         optimizer=SCHEDULED_ADAM).replace(
        '"epochs": 1', '"epochs": 1, "checkpoint": {"intervalSteps": 50}')


def elastic_tls_job_text(name):
    job = json.loads(manifest_with(name, {
        "progressIntervalMs": 100, "security": {"tls": "Enabled"},
        "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 3}}))
    job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    return json.dumps(job)


def scheduler_pid(job):
    for replica in ("scheduler", "scheduler-0"):
        pids = sorted(set(processes_with_env("KUBEPS_RUN_DIR", job.run_dir)) &
                      set(processes_with_env("KUBEPS_NODE_ID", replica)))
        if len(pids) == 1:
            return pids[0]
    raise AssertionError("no single scheduler process; output:\n" + job.output())


class SchedulerRestartTest(unittest.TestCase):
    clean = None  # the run without kills: (seconds it took, its final parameters)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-schedrestart-")

    def start(self, name):
        dump = os.path.join(self.dir, name + ".bin")
        job = RunningJob(write_manifest(self.dir, job_text(name), name + ".yaml"),
                         env=dict(JOB_ENV, KUBEPS_DUMP_PARAMS=dump))
        self.addCleanup(lambda: job.process.poll() is None and (job.process.kill(), job.process.wait()))
        return job, dump

    def clean_run(self):
        """The job without kills, run once for every test that compares with it."""
        if SchedulerRestartTest.clean is None:
            dump = os.path.join(self.dir, "clean.bin")
            start = time.time()
            code, clean = run_job(write_manifest(self.dir, job_text("clean"), "clean.yaml"),
                                  env=dict(JOB_ENV, KUBEPS_DUMP_PARAMS=dump))
            self.assertEqual(code, 0, clean.output())
            SchedulerRestartTest.clean = time.time() - start, read_floats(dump)
        return SchedulerRestartTest.clean

    def kill_scheduler(self, job, at_step, sig=signal.SIGKILL):
        """Sends `sig` to the scheduler at `at_step` and waits until every node
        is known to the restarted one; the line saying it restarts."""
        wait_for_steps(job, 0, at_step)
        os.kill(scheduler_pid(job), sig)
        restarted = job.wait_for_line(r"scheduler\S* exited with code %d; restarting it" % (128 + sig))
        deadline = time.time() + 60
        while time.time() < deadline and job.process.poll() is None and len(
                self.registered_again(job)) < 4:
            time.sleep(0.02)
        return restarted

    @staticmethod
    def registered_again(job):
        """When each node said it registered again with a restarted scheduler."""
        return [t for t, line in job.lines if "registered again with the restarted scheduler" in line]

    def test_an_elastic_job_hears_from_its_restarted_scheduler_within_seconds_over_tls(self):
        # An elastic job's workers ask the scheduler who computes the steps
        # ahead, beating until it answers: without it the job stands still.
        # Before, a beat failed at once on a channel in transient failure, so
        # nothing drove its reconnection but gRPC's backup poll every 5 s:
        # over TLS, whose handshake takes several round trips, the workers
        # came back 30 s late.
        manifest = write_manifest(self.dir, elastic_tls_job_text("schedtls"), "schedtls.yaml")
        job = RunningJob(manifest, env={"KUBEPS_MAX_STEPS": str(STEPS)})
        self.addCleanup(lambda: job.process.poll() is None and (job.process.kill(), job.process.wait()))
        restarted = self.kill_scheduler(job, 100, signal.SIGTERM)
        again = self.registered_again(job)
        self.assertEqual(len(again), 4, job.output())
        took = max(again) - next(t for t, line in job.lines if line == restarted)
        print("\nscheduler SIGTERM over TLS: every node registered again %.2f s after its restart"
              % took)
        # About 0.3 s here; 30 s before.
        self.assertLess(took, 5, job.output())
        self.assertEqual(job.wait(300), 0, job.output())

    def assert_no_error(self, job):
        bad = [line for _, line in job.lines
               if re.search(r"error|could not|failed", line, re.I) and "exited with code 137" not in line]
        self.assertEqual(bad, [], job.output())

    def test_scheduler_kill_costs_nothing_then_a_shard_kill_recovers(self):
        clean_time, clean_params = self.clean_run()
        job, dump = self.start("schedkill")
        self.kill_scheduler(job, 100)
        # A shard killed after the scheduler's restart: rolled back and recovered.
        wait_for_steps(job, 0, 250, timeout=180)
        os.kill(wait_for_replica_pid(job, "server-1"), signal.SIGKILL)
        self.assertEqual(job.wait(300), 0, job.output())
        self.assertIn("server-1 exited with code 137; restarting it", job.output())
        self.assertIn("rolled back to step", job.output())
        self.assertEqual(read_floats(dump), clean_params, "parameters differ from the clean run's")

    def test_scheduler_kill_alone_then_a_worker_kill_recovers(self):
        clean_time, clean_params = self.clean_run()
        job, dump = self.start("schedonly")
        self.kill_scheduler(job, 100)
        wait_for_steps(job, 0, 250, timeout=180)
        os.kill(wait_for_replica_pid(job, "worker-1"), signal.SIGKILL)
        self.assertEqual(job.wait(300), 0, job.output())
        took = time.time() - job.start
        print("\nscheduler SIGKILL + worker SIGKILL: %.1f s; without kills %.1f s" % (took, clean_time))
        self.assertIn("worker-1 exited with code 137; restarting it", job.output())
        self.assertEqual(read_floats(dump), clean_params, "parameters differ from the clean run's")
        for rank in (0, 1):
            self.assertEqual(job.progress(rank=rank)[-1]["total_steps"], STEPS, job.output())

    def test_an_async_worker_killed_with_the_scheduler_goes_on_from_its_own_step(self):
        """Worker-0 killed right after the scheduler, before it could say its
        step to the new one. An async worker's steps are its own; before,
        the new scheduler knew none of it and the worker started at 0. The
        shards' word on it came back with their registrations."""
        text = job_text("asyncboth").replace('"mode": "sync"', '"mode": "async"')
        self.assertIn('"mode": "async"', text)
        job = RunningJob(write_manifest(self.dir, text, "asyncboth.yaml"), env=JOB_ENV)
        self.addCleanup(lambda: job.process.poll() is None and (job.process.kill(), job.process.wait()))
        wait_for_steps(job, 0, 100)
        worker = wait_for_replica_pid(job, "worker-0")
        os.kill(scheduler_pid(job), signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        before = max(p["total_steps"] for p in job.progress(rank=0))
        self.assertEqual(job.wait(300), 0, job.output())
        self.assertIn("worker-0 exited with code 137; restarting it", job.output())
        resumed = re.findall(r"^\[worker 0\] resuming at step (\d+) of %d" % STEPS, job.output(),
                             re.MULTILINE)
        self.assertEqual(len(resumed), 1, job.output())
        self.assertGreaterEqual(int(resumed[0]), before, job.output())
        self.assertEqual(job.progress(rank=0)[-1]["total_steps"], STEPS, job.output())

    def test_a_recovery_the_scheduler_died_with_unheard_is_opened_again(self):
        """A shard killed, and the scheduler killed as soon as it says it
        opened the recovery the shard's restart calls for, most often before
        any node heard of it (servers beat every 250 ms). The next scheduler
        opened none: every node registered again in generation 0, and the
        shard's new process waited at its checkpoint for good while the
        others trained on."""
        clean_time, clean_params = self.clean_run()
        job, dump = self.start("unheard")
        wait_for_steps(job, 0, 150)
        os.kill(wait_for_replica_pid(job, "server-0"), signal.SIGKILL)
        job.wait_for_line(r"recovery: generation 1 rolls every shard")
        os.kill(scheduler_pid(job), signal.SIGKILL)
        self.assertEqual(job.wait(300), 0, job.output())
        self.assertIn("scheduler-0 exited with code 137; restarting it", job.output())
        self.assertEqual(read_floats(dump), clean_params, "parameters differ from the clean run's")

    def test_scheduler_kill_ends_within_5_s_of_a_clean_run_with_no_error(self):
        clean_time, clean_params = self.clean_run()
        job, dump = self.start("schedtime")
        self.kill_scheduler(job, 150)
        self.assertEqual(job.wait(300), 0, job.output())
        took = time.time() - job.start
        print("\nscheduler SIGKILL: job took %.1f s; without the kill %.1f s" % (took, clean_time))
        self.assert_no_error(job)
        self.assertEqual(read_floats(dump), clean_params, "parameters differ from the clean run's")
        # The figure (printed above) is within 5 s on an idle machine; the
        # bound is looser so that a loaded CI machine does not fail it, and
        # still far below the 20-30 s the lost-membership bug cost.
        self.assertLess(took, clean_time + 10, job.output())


if __name__ == "__main__":
    unittest.main()
