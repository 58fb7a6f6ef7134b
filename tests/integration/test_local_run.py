"""`kubeps run` end to end: real binaries, real Fashion-MNIST, loopback."""
import os
import re
import tempfile
import unittest

from jobtools import (KUBEPS, SOURCE_DIR, RunningJob, manifest, metric, processes_with_env,
                      read_floats, run_job, scrape, wait_for_steps, write_manifest)
import subprocess


class LocalRunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-test-")

    def test_example_mlp_reaches_85_percent_and_matches_single_process(self):
        example = os.path.join(SOURCE_DIR, "deploy/examples/fashion-mnist.yaml")
        code, job = run_job(example)
        self.assertEqual(code, 0, job.output())
        # Progress lines come from both workers, tagged with role and rank.
        self.assertTrue(job.progress(rank=0) and job.progress(rank=1), job.output())
        distributed = job.accuracy()
        self.assertGreaterEqual(distributed, 0.85, job.output())

        code, local = run_job(example, command="train-local")
        self.assertEqual(code, 0, local.output())
        print("\nMLP example: distributed %.4f, single process %.4f" % (distributed, local.accuracy()))
        self.assertLess(abs(distributed - local.accuracy()), 0.01)
        # Worker 0 says how much of its training it waited for the exchange
        # (part of it: a sync step waits for the other worker and the update);
        # the one process waits for nothing and says nothing of it.
        waits = re.findall(r"\[worker \d\] test accuracy .* steps/sec\), ([\d.]+)% of it waiting for the "
                           r"exchange$", job.output(), re.M)
        self.assertEqual(len(waits), 1, job.output())  # worker 0 evaluates
        self.assertTrue(0 < float(waits[0]) < 100, waits)
        self.assertNotIn("waiting for the exchange", local.output())

    def test_sync_two_workers_equal_one_worker_with_double_batch(self):
        # Plain SGD, fixed seed and data order: the mean of two workers' means
        # over b examples is the mean over 2b examples, up to the order of
        # float additions. (Over hundreds of MLP steps those last-bit
        # differences flip ReLUs and grow; 50 steps keep them at rounding.)
        sgd = {"name": "sgd", "learningRate": 0.1}
        for model, steps, size in (("mlp", 50, 784 * 256 + 256 + 256 * 10 + 10),
                                   ("softmax", 150, 784 * 10 + 10)):
            dumps = {}
            for workers, batch in ((2, 32), (1, 64)):
                path = write_manifest(self.dir, manifest("exact-%d" % workers, model=model, workers=workers,
                                                         batch=batch, optimizer=sgd), "exact-%d.yaml" % workers)
                dumps[workers] = os.path.join(self.dir, "params-%s-%d.bin" % (model, workers))
                code, job = run_job(path, env={"KUBEPS_MAX_STEPS": str(steps),
                                               "KUBEPS_DUMP_PARAMS": dumps[workers]})
                self.assertEqual(code, 0, job.output())
            two, one = read_floats(dumps[2]), read_floats(dumps[1])
            self.assertEqual(len(two), size)
            self.assertEqual(len(one), size)
            worst = max(abs(a - b) for a, b in zip(two, one))
            print("\nsync exactness, %s after %d steps: max |2 workers x 32 - 1 worker x 64| = %.3g"
                  % (model, steps, worst))
            self.assertLess(worst, 1e-6)

    def test_sync_run_is_deterministic_bit_for_bit(self):
        path = write_manifest(self.dir, manifest("repeat", workers=2, batch=32))
        dumps = []
        for i in range(2):
            dumps.append(os.path.join(self.dir, "params-%d.bin" % i))
            code, job = run_job(path, env={"KUBEPS_MAX_STEPS": "100", "KUBEPS_DUMP_PARAMS": dumps[-1]})
            self.assertEqual(code, 0, job.output())
        with open(dumps[0], "rb") as a, open(dumps[1], "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_metrics_agree_with_progress_lines(self):
        # Long enough (20 epochs) that the job outlives every scrape on a fast
        # machine as on a loaded one; stopped with Ctrl-C once checked.
        path = write_manifest(self.dir, manifest("metrics", workers=2, batch=64, epochs=20))
        job = RunningJob(path)
        job.wait_for_line(r"\[worker 0\] epoch")
        _, worker_port = job.ports("worker-0")
        _, server_port = job.ports("server-0")
        _, scheduler_port = job.ports("scheduler-0")
        checks = 0
        while job.process.poll() is None and checks < 3:
            before = job.progress(rank=0)[-1]["total_steps"]
            series = scrape(worker_port)
            steps = metric(series, "kubeps_worker_steps_total", rank="0")
            samples = metric(series, "kubeps_worker_samples_total", rank="0")
            # The counter may run ahead of the last progress line, never past
            # what the worker goes on to print: the first line at or beyond it
            # must come (a fixed sleep here raced a loaded machine's output).
            after = wait_for_steps(job, 0, steps, timeout=60)["total_steps"]
            if after == before:
                continue
            self.assertLessEqual(before, steps)
            self.assertLessEqual(steps, after)
            # The two counters are collected one after the other while the
            # worker trains: they may be a step apart, never more.
            self.assertIn(samples, ((steps - 1) * 64, steps * 64, (steps + 1) * 64))
            self.assertIsNotNone(metric(series, "kubeps_worker_loss", rank="0"))
            self.assertGreater(metric(series, "kubeps_worker_push_latency_seconds_count", rank="0"), 0)
            self.assertGreater(metric(series, "kubeps_worker_pull_bytes_total", rank="0"), 0)
            self.assertGreater(metric(series, "kubeps_worker_step_duration_seconds_count", rank="0"), 0)
            # Each step waits for its exchange for part of its time, never longer than the step.
            waited = metric(series, "kubeps_worker_exchange_wait_seconds_sum", rank="0")
            self.assertGreater(waited, 0)
            self.assertLess(waited, metric(series, "kubeps_worker_step_duration_seconds_sum", rank="0"))
            server = scrape(server_port)
            self.assertGreater(metric(server, "kubeps_server_pushes_total"), 0)
            self.assertGreater(metric(server, "kubeps_server_updates_applied_total"), 0)
            self.assertGreater(metric(server, "kubeps_server_push_bytes_total"), 0)
            self.assertGreater(metric(server, "kubeps_server_pulls_total"), 0)
            self.assertEqual(metric(scrape(scheduler_port), "kubeps_scheduler_registered_nodes"), 4)
            checks += 1
        self.assertEqual(checks, 3, "the job ended before three scrapes:\n" + job.output())
        job.interrupt()
        self.assertEqual(job.wait(timeout=60), 130, job.output())

    def test_async_trains(self):
        path = write_manifest(self.dir, manifest("async", mode="async", epochs=1))
        code, job = run_job(path)
        self.assertEqual(code, 0, job.output())
        self.assertGreater(job.accuracy(), 0.80, job.output())

    def test_ctrl_c_stops_every_child(self):
        path = write_manifest(self.dir, manifest("interrupt", epochs=20))
        job = RunningJob(path)
        job.wait_for_line(r"\[worker 1\] epoch")
        self.assertEqual(len(processes_with_env("KUBEPS_RUN_DIR", job.run_dir)), 5)
        job.interrupt()
        self.assertEqual(job.wait(timeout=30), 130, job.output())
        self.assertEqual(processes_with_env("KUBEPS_RUN_DIR", job.run_dir), [])

    def test_two_jobs_side_by_side(self):
        first = RunningJob(write_manifest(self.dir, manifest("left", model="softmax"), "a.yaml"),
                           env={"KUBEPS_MAX_STEPS": "200"})
        second = RunningJob(write_manifest(self.dir, manifest("right", model="softmax"), "b.yaml"),
                            env={"KUBEPS_MAX_STEPS": "200"})
        self.assertEqual(first.wait(), 0, first.output())
        self.assertEqual(second.wait(), 0, second.output())
        self.assertGreater(first.accuracy(), 0.6)
        self.assertGreater(second.accuracy(), 0.6)

    def test_missing_dataset_fails_at_once_naming_the_path_in_the_jobs_failure(self):
        # The default run policy (OnFailure, backoffLimit 3): a rerun would
        # read the same folder, so the worker's reason fails the job at once.
        text = manifest("nodata").replace("/usr/share/datasets/fashion-mnist", "/nonexistent/fmnist")
        code, job = run_job(write_manifest(self.dir, text))
        self.assertEqual(code, 1, job.output())
        failure = [line for line in job.output().splitlines() if "job nodata failed after" in line]
        self.assertEqual(len(failure), 1, job.output())
        self.assertIn("(DatasetNotFound)", failure[0])
        self.assertIn("spec.dataset.path: /nonexistent/fmnist does not exist", failure[0])
        self.assertNotIn("restarting", job.output())

    def test_a_bad_bucket_size_fails_the_job_naming_the_variable(self):
        code, job = run_job(write_manifest(self.dir, manifest("badbucket")),
                            env={"KUBEPS_BUCKET_BYTES": "1MB"})
        self.assertEqual(code, 1, job.output())
        self.assertIn('KUBEPS_BUCKET_BYTES="1MB": not a number of bytes', job.output())

    def test_one_process_computes_on_the_cores_it_may_use_not_the_machines(self):
        # An affinity mask (taskset, a cpuset, a container's CPUs) or a CPU
        # limit allows fewer cores than the machine has: as many threads
        # as the machine's cores would wait for each other at every BLAS
        # call's barrier.
        path = write_manifest(self.dir, manifest("pinned", workers=1, batch=32))
        first_cpu = sorted(os.sched_getaffinity(0))[0]
        result = subprocess.run(["taskset", "-c", str(first_cpu), KUBEPS, "train-local", path],
                                env=dict(os.environ, KUBEPS_MAX_STEPS="2"), capture_output=True,
                                text=True, timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("computing on 1 thread (the cores this process may use)",
                      result.stdout + result.stderr)

    def test_validate_names_each_bad_field(self):
        text = manifest("bad").replace('"replicas": 2', '"replicas": -1', 1)
        text = text.replace('"adam"', '"adamw"')
        result = subprocess.run([KUBEPS, "validate", write_manifest(self.dir, text)],
                                capture_output=True, text=True)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("spec.replicaSpecs.ps.replicas", result.stderr)
        self.assertIn("spec.optimizer.name", result.stderr)
        good = subprocess.run([KUBEPS, "validate", os.path.join(SOURCE_DIR, "deploy/examples/fashion-mnist.yaml")],
                              capture_output=True, text=True)
        self.assertEqual(good.returncode, 0, good.stderr)


if __name__ == "__main__":
    unittest.main()
