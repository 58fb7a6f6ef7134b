"""Elastic workers (spec.replicaSpecs.worker.elasticPolicy) with `kubeps run`
and `kubeps scale`, as a user runs them: a job scaled while it trains, the
exactness of a scale-down against one worker throughout (a worker that cannot
come back: test_elastic_lost_workers)."""
import os
import signal
import subprocess
import tempfile
import time
import unittest

from jobtools import (KUBEPS, PACED_FOR_KILLS, RunningJob, elastic_job, manifest_with,
                      read_floats, run_job, wait_for_replica_pid, wait_for_steps, write_manifest)


def scale(name, workers, run_dir=None, at_step=None):
    args = [KUBEPS, "scale", name, "--workers=%d" % workers]
    if at_step is not None:
        args.append("--at-step=%d" % at_step)
    if run_dir:
        args.append("--run-dir=" + run_dir)
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def first_step_from(job, pattern):
    """The step of the scheduler's first 'workers from step S' line matching."""
    line = job.wait_for_line(r"workers from step \d+: " + pattern, timeout=60)
    return int(line.split("workers from step ")[1].split(":")[0])


class ElasticTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-elastic-")

    def test_scaled_from_two_workers_to_one_it_ends_where_one_worker_throughout_ends(self):
        # As the exactness test of two workers against one (test_local_run):
        # plain SGD on the softmax model, whose float rounding differences
        # stay at rounding (an MLP's flip ReLUs and grow over hundreds of steps).
        same = {"model": "softmax", "epochs": 2, "optimizer": {"name": "sgd", "learningRate": 0.1}}
        one_dump = os.path.join(self.dir, "one.bin")
        one = manifest_with("one", workers=1, batch=128, spec={"progressIntervalMs": 100}, **same)
        code, alone = run_job(write_manifest(self.dir, one, "one.yaml"),
                              env={"KUBEPS_DUMP_PARAMS": one_dump})
        self.assertEqual(code, 0, alone.output())

        scaled_dump = os.path.join(self.dir, "scaled.bin")
        job = RunningJob(write_manifest(self.dir, elastic_job("scaled", **same), "scaled.yaml"),
                         env={"KUBEPS_DUMP_PARAMS": scaled_dump})
        wait_for_steps(job, 0, 60)
        code, said = scale("scaled", 1, job.run_dir)
        asked = time.time() - job.start
        self.assertEqual(code, 0, said)
        self.assertIn("job scaled scaled to 1 workers", said)
        change = first_step_from(job, r"1 \(")
        # The scheduler says in the run folder which ranks compute, so that
        # the runner stops worker-1 only if it has not left 30 s after it
        # stopped computing, not 30 s after the scale.
        computing = os.path.join(job.run_dir, "computing-workers")
        said_computing = None
        deadline = time.time() + 30
        while said_computing != "0" and job.process.poll() is None and time.time() < deadline:
            time.sleep(0.05)
            if os.path.exists(computing):
                with open(computing) as f:
                    said_computing = f.read().strip()
        self.assertEqual(said_computing, "0", "the ranks computing once worker-1 left")
        self.assertEqual(job.wait(), 0, job.output())
        output = job.output()
        self.assertIn("left the job at step %d: it was scaled away" % change, output)
        self.assertIn("worker 1 (worker-1) left the job: it was scaled away", output)

        a, b = read_floats(one_dump), read_floats(scaled_dump)
        self.assertEqual(len(a), len(b))
        worst = max(abs(x - y) for x, y in zip(a, b))
        scale_of = max(abs(x) for x in a)
        # The same examples and the same mean gradient each step, summed in
        # another order: float rounding apart, the same parameters.
        self.assertLess(worst, 1e-5, "largest difference %g" % worst)
        self.assertAlmostEqual(job.accuracy(), alone.accuracy(), delta=0.001)
        after = [p for p in job.progress(rank=0) if p["total_steps"] > change]
        print("\nscale 2 -> 1 at step %d: %.2f s from kubeps scale to the first progress line "
              "past it; largest parameter difference to one worker throughout %.2g (of %.2g)"
              % (change, after[0]["time"] - asked, worst, scale_of))

    def test_scaled_up_and_down_with_tls_while_it_trains_it_finishes_as_accurate(self):
        # 3 epochs: the 2 x 2 MLP job makes some 650 steps a second, and one epoch could end
        # before the scale-down reaches it.
        code, fixed = run_job(write_manifest(self.dir, manifest_with("fixed", workers=2, epochs=3),
                                             "f.yaml"))
        self.assertEqual(code, 0, fixed.output())
        # With mutual TLS: a worker taken in later needs a certificate too.
        tls = {"security": {"tls": "Enabled"}}
        job = RunningJob(write_manifest(self.dir, elastic_job("updown", spec=tls, epochs=3),
                                        "updown.yaml"))
        wait_for_steps(job, 0, 60)
        self.assertEqual(scale("updown", 4, job.run_dir)[0], 0)
        up = first_step_from(job, r"4 \(")  # the step from which all four compute
        wait_for_steps(job, 0, up + 40)
        self.assertEqual(scale("updown", 1, job.run_dir)[0], 0)
        down = first_step_from(job, r"1 \(")
        self.assertEqual(job.wait(), 0, job.output())
        output = job.output()
        # Each joins at the first step after it registered: together or not.
        for rank in (2, 3):
            self.assertRegex(output, r"\[worker %d\] joined the job at step \d+" % rank)
            # A new worker resumes nothing: it says what it waits for.
            self.assertNotIn("[worker %d] resuming at step" % rank, output)
        self.assertEqual(output.count("left the job at step %d: it was scaled away" % down), 3)
        # The one left computes the whole global batch: a GPU's memory must hold it.
        self.assertRegex(output, r"workers from step %d: 1 \(.*\), up to (\d+) of the step's \1 "
                         r"examples each" % down)
        self.assertAlmostEqual(job.accuracy(), fixed.accuracy(), delta=0.01)

    def test_a_shard_restarted_in_the_middle_of_a_scale_up_ends_bit_identical(self):
        # The change at step 450 exactly (kubeps scale --at-step), so that
        # both runs have the same schedule; checkpoints at 400 and 800, so
        # that the shard killed past 450 rolls the job back to before it.
        def run(name, kill):
            dump = os.path.join(self.dir, name + ".bin")
            text = elastic_job(name, epochs=2, spec={"checkpoint": {"intervalSteps": 400}})
            # The killed run slowed: unslowed, its kill had about 1 s between
            # steps 480 and 800 to land in.
            job = RunningJob(write_manifest(self.dir, text, name + ".yaml"),
                             env=dict(PACED_FOR_KILLS if kill else {},
                                      KUBEPS_DUMP_PARAMS=dump))
            job.wait_for_line(r"\[worker 0\] epoch")
            code, said = scale(name, 3, job.run_dir, at_step=450)
            self.assertEqual(code, 0, said)
            if kill:
                wait_for_steps(job, 0, 480)
                os.kill(wait_for_replica_pid(job, "server-1"), signal.SIGKILL)
            self.assertEqual(job.wait(), 0, job.output())
            self.assertIn("workers from step 450: 3", job.output())
            with open(dump, "rb") as f:
                return f.read(), job
        clean, _ = run("clean", kill=False)
        killed, job = run("killed", kill=True)
        self.assertIn("[worker 0] rolled back to step 400", job.output())
        self.assertRegex(job.output(), r"\[worker 2\] joined the job at step 450")
        self.assertEqual(clean, killed, "parameters differ from the run without the restart")

    def test_sigterm_of_each_role_and_a_scheduler_restart_then_a_shard_kill_end_bit_identical(self):
        # What a real cluster does to a scaled job: evictions (SIGTERM) of the
        # scheduler, a worker and a server, and a crash (SIGKILL) of a shard
        # after the scheduler came back; then the job is run again over its
        # folder. A server's end rolls the job back to a checkpoint, and the
        # steps are redone with the same schedule (2 -> 3 at step 300). With
        # mutual TLS, as on a cluster: the joiner and every restarted process
        # present their certificates, and the second run gets a CA of its own.
        def run(name, faults):
            dump = os.path.join(self.dir, name + ".bin")
            text = elastic_job(name, epochs=4, spec={"checkpoint": {"intervalSteps": 100},
                                                     "runPolicy": {"backoffLimit": 10},
                                                     "security": {"tls": "Enabled"}})
            path = write_manifest(self.dir, text, name + ".yaml")
            job = RunningJob(path, env={"KUBEPS_DUMP_PARAMS": dump})
            job.wait_for_line(r"\[worker 0\] epoch")
            self.assertEqual(scale(name, 3, job.run_dir, at_step=300)[0], 0)
            at = 400
            for replica, sig, sign in faults:
                wait_for_steps(job, 0, at)
                before = len(job.lines)
                os.kill(wait_for_replica_pid(job, replica), sig)
                deadline = time.time() + 60
                while not any(sign in line for _, line in job.lines[before:]):
                    self.assertLess(time.time(), deadline, job.output())
                    time.sleep(0.05)
                at = max(p["total_steps"] for p in job.progress(rank=0)) + 150
            self.assertEqual(job.wait(), 0, job.output())
            with open(dump, "rb") as f:
                return f.read(), job, path
        clean, _, _ = run("clean", [])
        faulted, job, path = run("faulted", [
            ("scheduler-0", signal.SIGTERM, "registered again with the restarted scheduler"),
            ("server-1", signal.SIGKILL, "rolled back to step"),
            ("worker-2", signal.SIGTERM, "worker 2 (worker-2) re-registered after a restart"),
            ("server-0", signal.SIGTERM, "rolled back to step")])
        self.assertEqual(clean, faulted, "parameters differ from the run without the faults")
        # The same job run again over its folder: it has nothing left to train,
        # and starts with the manifest's 2 workers, not the 3 it was scaled to.
        again = RunningJob(path, run_dir=job.run_dir)
        self.assertEqual(again.wait(), 0, again.output())
        self.assertNotIn("scaled to", again.output())
        self.assertIn("2 workers", again.output())

    def test_an_async_job_takes_workers_in_and_lets_them_go_while_it_trains(self):
        job = RunningJob(write_manifest(self.dir, elastic_job("async", mode="async", epochs=2),
                                        "async.yaml"))
        wait_for_steps(job, 0, 60)
        self.assertEqual(scale("async", 3, job.run_dir)[0], 0)
        job.wait_for_line(r"\[worker 2\] joined the job at step \d+", timeout=60)
        self.assertEqual(scale("async", 1, job.run_dir)[0], 0)
        self.assertEqual(job.wait(), 0, job.output())
        output = job.output()
        self.assertEqual(output.count("left the job at step"), 2, output)
        self.assertGreater(job.accuracy(), 0.8)

    def test_scaling_a_job_outside_its_bounds_or_one_not_running_is_refused(self):
        job = RunningJob(write_manifest(self.dir, elastic_job("bounds", maximum=3), "b.yaml"))
        try:
            wait_for_steps(job, 0, 5)
            code, said = scale("bounds", 5, job.run_dir)
            self.assertEqual(code, 1)
            self.assertIn("--workers 5 is outside job bounds's elasticPolicy [1, 3]", said)
            code, said = scale("other", 2, job.run_dir)
            self.assertIn("runs job bounds, not other", said)
        finally:
            job.interrupt()
            job.wait()
        code, said = scale("nosuchjob", 2)
        self.assertEqual(code, 1)
        self.assertIn("no running job nosuchjob", said)


if __name__ == "__main__":
    unittest.main()
