"""Stopping a job, and the end of one.

Ctrl-C (SIGINT) on `kubeps run` at any moment after the replicas start:
every replica is told to stop at once (workers first), the run exits 130
within a second and leaves no process of the job behind. Before, replicas
were stopped one by one, the scheduler first, each with a 5 s grace: the
run took 10 s to exit and the workers trained on meanwhile.

A job ends within a second of its last worker's exit, also when the
scheduler is gone before the servers (before, 10 s more: the servers waited
for a scheduler that would never tell them the job was over).

The goal is 1 s; the tests allow 2 s, for a loaded 2-core machine."""
import os
import signal
import tempfile
import threading
import time
import unittest

from jobtools import (SOURCE_DIR, RunningJob, manifest, processes_with_env, replica_pids,
                      wait_for_replica_pid, write_manifest)

EXAMPLE = os.path.join(SOURCE_DIR, "deploy", "examples", "fashion-mnist.yaml")
BOUND_S = 2.0


def job_processes(job):
    """Pids of every live process of the job (each carries its run folder)."""
    return processes_with_env("KUBEPS_RUN_DIR", job.run_dir)


def worker_pids(job):
    return [pid for name in ("worker-0", "worker-1") for pid in replica_pids(job.run_dir, name)]


def has_exited(pid):
    """True once `pid` has ended (a zombie not yet reaped has too)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            return not f.read()
    except OSError:
        return True


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


class LastWorkerWatch:
    """Notes, until the job ends, the last time a worker process was alive."""

    def __init__(self, job):
        self.job = job
        self.last_alive = None
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while self.job.process.poll() is None:
            if worker_pids(self.job):
                self.last_alive = time.time()
            time.sleep(0.02)


class InterruptTest(unittest.TestCase):
    """Ctrl-C at 0.2, 0.5, 1 and 2 s after `kubeps run` started."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeps-stop-")
        # Far longer than the latest interrupt (2 s), however fast the job steps.
        cls.manifest = write_manifest(cls.dir, manifest("stopjob", epochs=50))

    def interrupt_after(self, seconds, env=None):
        job = RunningJob(self.manifest, run_dir=tempfile.mkdtemp(prefix="kubeps-stop-run-"),
                         env=env)
        self.addCleanup(job.close)
        time.sleep(seconds)
        sent = time.time()
        job.interrupt()
        try:
            code = job.process.wait(timeout=30)
        except Exception:
            raise AssertionError("kubeps run did not exit 30 s after SIGINT; output:\n" +
                                 job.output())
        took = time.time() - sent
        # The children are reaped by then: whatever still carries the run
        # folder in its environment outlived the run.
        left = job_processes(job)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        print("Ctrl-C %.1f s after start: exit %d after %.2f s" % (seconds, code, took))
        self.assertEqual(code, 130, job.output())
        self.assertLessEqual(took, BOUND_S, "exit %.2f s after SIGINT; output:\n%s"
                             % (took, job.output()))
        self.assertEqual(left, [], "processes of the job outlived kubeps run")
        job.close()
        lines = [line for _, line in job.lines]
        stop_line = next((i for i, line in enumerate(lines) if "interrupted:" in line), None)
        self.assertIsNotNone(stop_line, job.output())
        trained_after = [line for line in lines[stop_line + 1:] if "total_steps" in line]
        self.assertLessEqual(len(trained_after), 1,
                             "workers trained on after the interruption:\n" + job.output())
        return job

    def test_ctrl_c_after_0_2_s(self):
        self.interrupt_after(0.2)

    def test_ctrl_c_after_0_5_s(self):
        self.interrupt_after(0.5)

    def test_ctrl_c_after_1_s(self):
        self.interrupt_after(1.0)

    def test_ctrl_c_after_2_s(self):
        self.interrupt_after(2.0)

    def test_ctrl_c_while_every_replica_waits_for_an_unanswering_scheduler(self):
        # Every request is lost (as in a network partition): the servers and
        # workers resend Register, each attempt waiting out its deadline.
        # Before, a server looked at its stop flag only between calls, so
        # each took its whole 5 s grace, one after the other.
        self.interrupt_after(2.0, env={"KUBEPS_FAULTS": "drop_request=1"})


class EndOfJobTest(unittest.TestCase):

    def test_the_example_job_ends_within_a_second_of_its_last_worker(self):
        job = RunningJob(EXAMPLE, env={"KUBEPS_MAX_STEPS": "150"})
        self.addCleanup(job.close)
        watch = LastWorkerWatch(job)
        code = job.wait(300)
        ended = time.time()
        watch.thread.join()
        self.assertEqual(code, 0, job.output())
        gap = ended - watch.last_alive
        print("example job: kubeps run exited %.2f s after its last worker" % gap)
        self.assertLessEqual(gap, BOUND_S, job.output())
        # Still a graceful end: each server wrote its final checkpoint.
        self.assertEqual(job.output().count("final checkpoint of step"), 2, job.output())

    def test_a_job_whose_scheduler_is_gone_before_its_servers_ends_at_once(self):
        # The servers must miss the scheduler's "the job is over": they are
        # frozen (SIGSTOP) from the moment the workers need them no more
        # until the scheduler, which waits a second for them, has exited.
        # Worker rank 0 writes its parameters to a FIFO after its test
        # accuracy and before it tells the scheduler it finished: it waits
        # there until the servers are frozen.
        workdir = tempfile.mkdtemp(prefix="kubeps-stop-late-")
        fifo = os.path.join(workdir, "params.fifo")
        os.mkfifo(fifo)
        job = RunningJob(write_manifest(workdir, manifest("latesched")),
                         env={"KUBEPS_MAX_STEPS": "100", "KUBEPS_DUMP_PARAMS": fifo})
        self.addCleanup(job.close)
        watch = LastWorkerWatch(job)
        servers = [wait_for_replica_pid(job, "server-%d" % i) for i in range(2)]
        scheduler = wait_for_replica_pid(job, "scheduler-0")
        job.wait_for_line(r"^\[worker 0\] test accuracy")
        wait_until(lambda: len(worker_pids(job)) == 1, 60, "the other worker's exit")
        for pid in servers:
            os.kill(pid, signal.SIGSTOP)
        try:
            with open(fifo, "rb") as f:
                f.read()
            wait_until(lambda: has_exited(scheduler), 30, "the scheduler's exit")
        finally:
            scheduler_gone = time.time()
            for pid in servers:
                os.kill(pid, signal.SIGCONT)
        code = job.wait(60)
        ended = time.time()
        watch.thread.join()
        gap = ended - scheduler_gone
        print("scheduler gone before the servers: kubeps run exited %.2f s after the "
              "scheduler, %.2f s after the last worker" % (gap, ended - watch.last_alive))
        self.assertEqual(code, 0, job.output())
        self.assertLessEqual(gap, BOUND_S, job.output())
        self.assertRegex(job.output(), r"scheduler-0 .*(exited|gone).*server-0, server-1")


if __name__ == "__main__":
    unittest.main()
