"""Batch work (common/batch_work.h): every thread of the scheduler and of each
parameter server runs under Linux's SCHED_BATCH policy, including those gRPC
starts once requests come, and so does every thread of a sync job's worker
but those that compute where its exchange runs after the step
(KUBEPS_OVERLAP=0, as `kubeps run` sets where the servers compute on the
workers' cores), so that a request or its answer waking up does not preempt
a computing worker. A worker whose exchange overlaps its backward pass, or
one of an async job, keeps the ordinary policy."""
import os
import re
import tempfile
import unittest

from jobtools import RunningJob, manifest, wait_for_replica_pid, wait_for_steps, write_manifest

SCHED_OTHER, SCHED_BATCH = 0, 3
# Some seconds of the 2 x 2 MLP job (several epochs): long enough to look at
# its threads after gRPC has started its own. Once they are looked at, Ctrl-C
# stops the job: the rest of it would only keep the machine busy.
EPOCHS, STEPS = 8, 3000
# What `kubeps run` exits with after Ctrl-C (test_stop).
INTERRUPTED = 130


def thread_policies(pid):
    """{thread id: scheduling policy} of process `pid` (field 41 of each
    thread's stat, counted after the command's closing parenthesis)."""
    policies = {}
    folder = "/proc/%d/task" % pid
    for tid in os.listdir(folder):
        try:
            with open(os.path.join(folder, tid, "stat")) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            # The thread ended meanwhile: gone from the folder, or (ESRCH)
            # between opening its stat and reading it; gRPC ends threads often.
            continue
        policies[int(tid)] = int(fields[41 - 3])
    return policies


class BatchWorkTest(unittest.TestCase):
    def run_job(self, overlap, check, mode="sync"):
        """A 2 x 2 MLP job with KUBEPS_OVERLAP=`overlap`; check(job) once it trains."""
        folder = tempfile.mkdtemp(prefix="kubeps-batch-work-")
        path = write_manifest(folder, manifest("batch", mode=mode, epochs=EPOCHS), "batch.yaml")
        job = RunningJob(path, env={"KUBEPS_MAX_STEPS": str(STEPS), "KUBEPS_OVERLAP": overlap})
        try:
            wait_for_steps(job, 0, 200)
            check(job)
            self.assertIsNone(job.process.poll(), "the job ended before its threads were "
                              "looked at all: make it longer\n" + job.output())
        finally:
            job.interrupt()
            code = job.wait(timeout=60)
        self.assertEqual(code, INTERRUPTED, job.output())
        self.assertNotIn("failed", job.output())

    def computing_threads(self, job, rank):
        """How many threads worker `rank` computes on, as it says at start."""
        said = job.wait_for_line(r"\[worker-%d\] computing on (\d+) thread" % rank, timeout=30)
        return int(re.search(r"computing on (\d+)", said).group(1))

    def test_servers_and_a_workers_exchange_after_the_step_run_as_batch_work(self):
        def check(job):
            for replica in ("scheduler-0", "server-0", "server-1"):
                policies = thread_policies(wait_for_replica_pid(job, replica))
                self.assertGreater(len(policies), 2, "%s has %d threads" % (replica, len(policies)))
                self.assertEqual(set(policies.values()), {SCHED_BATCH},
                                 "%s's threads by policy: %s" % (replica, policies))
            # A worker computes on its main thread and, given more than one
            # thread, on OpenMP's team beside it: those, and only those, are
            # ordinary work.
            for rank, replica in enumerate(("worker-0", "worker-1")):
                computing = self.computing_threads(job, rank)
                pid = wait_for_replica_pid(job, replica)
                policies = thread_policies(pid)
                self.assertEqual(policies[pid], SCHED_OTHER,
                                 "%s's main thread, which computes, is not ordinary work" % replica)
                ordinary = [tid for tid, policy in policies.items() if policy == SCHED_OTHER]
                self.assertEqual(len(ordinary), computing, "%s computes on %d threads; by "
                                 "policy: %s" % (replica, computing, policies))
                self.assertGreater(len(policies) - computing, 10,
                                   "%s's threads by policy: %s" % (replica, policies))
        self.run_job("0", check)

    def assert_workers_are_ordinary_work(self, job):
        for replica in ("worker-0", "worker-1"):
            policies = thread_policies(wait_for_replica_pid(job, replica))
            self.assertGreater(len(policies), 10, "%s has %d threads" % (replica, len(policies)))
            self.assertEqual(set(policies.values()), {SCHED_OTHER},
                             "%s's threads by policy: %s" % (replica, policies))

    def test_a_worker_whose_exchange_overlaps_its_backward_pass_is_ordinary_work(self):
        # Batch work would make the exchange wait for the pass it overlaps.
        self.run_job("1", self.assert_workers_are_ordinary_work)

    def test_an_async_jobs_workers_are_ordinary_work(self):
        # No step waits for the slower worker; batch work would only let one fall behind.
        self.run_job("0", self.assert_workers_are_ordinary_work, mode="async")


if __name__ == "__main__":
    unittest.main()
