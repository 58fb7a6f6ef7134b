"""A job run again over its own checkpoints (the same --run-dir, or the same
spec.checkpoint.path): it resumes from the newest step every shard holds, or
starts fresh with spec.checkpoint.resume false; shards whose checkpoints do
not overlap fail the job with a message naming the folders; a damaged
checkpoint file is set aside. And `kubeps run` without --run-dir removes its
run folder after a successful job unless --keep-run-dir is given."""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from jobtools import (BIN_DIR, DATASET, KUBEPS, PACED_FOR_KILLS, SLIGHTLY_SLOW_NETWORK, RunningJob,
                      manifest, processes_with_env, write_manifest)

TIMEOUT = 300  # generous: four engineers' builds and tests share two cores


def job_text(name, resume=None, interval=50, mode="sync", servers=2, optimizer=None, workers=2,
             elastic=False, batch=32):
    """`elastic`: an elasticPolicy of 1 to 2 workers."""
    checkpoint = {"intervalSteps": interval}
    if resume is not None:
        checkpoint["resume"] = resume
    job = json.loads(manifest(name, batch=batch, mode=mode, ps=servers, workers=workers,
                              optimizer=optimizer))
    job["spec"].update(checkpoint=checkpoint, progressIntervalMs=200)
    if elastic:
        job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {"minReplicas": 1,
                                                                  "maxReplicas": 2}
    return json.dumps(job, indent=2)


def steps_of(run_dir, server):
    return steps_of_folder(os.path.join(run_dir, "checkpoints", server))


def read_text(path):
    with open(path) as f:
        return f.read()


def steps_of_folder(folder):
    return sorted(int(os.path.basename(p)[5:-5])
                  for p in glob.glob(os.path.join(folder, "step-*.ckpt")))


class RunTwiceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-ckpt-")
        self.run_dir = os.path.join(self.dir, "run")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_job(self, text, max_steps, filename="job.yaml"):
        job = RunningJob(write_manifest(self.dir, text, filename), run_dir=self.run_dir,
                         env={"KUBEPS_MAX_STEPS": str(max_steps)})
        try:
            code = job.wait(TIMEOUT)
        finally:
            job.close()
        self.assertEqual(processes_with_env("KUBEPS_RUN_DIR", self.run_dir), [])
        return code, job

    def succeed_twice(self, first_text, first_steps, second_text, second_steps):
        """Both runs over the same checkpoints, each Succeeded: the two jobs."""
        code, first = self.run_job(first_text, first_steps)
        self.assertEqual(code, 0, first.output())
        code, second = self.run_job(second_text, second_steps)
        self.assertEqual(code, 0, second.output())
        return first, second

    def test_second_run_resumes_and_a_finished_job_run_again_succeeds(self):
        code, first = self.run_job(job_text("twice"), 120)
        self.assertEqual(code, 0, first.output())
        # The final checkpoint: the job's last step, on every shard.
        self.assertIn(120, steps_of(self.run_dir, "server-0"))
        self.assertIn(120, steps_of(self.run_dir, "server-1"))

        start = time.time()
        code, second = self.run_job(job_text("twice"), 200)
        self.assertEqual(code, 0, second.output())
        self.assertIn("resuming at step 120 of 200", second.output())
        self.assertNotIn("waits for the job to roll back", second.output())
        print("\nrun again over its checkpoints (120 -> 200 steps): exit %d in %.1f s"
              % (code, time.time() - start))

        start = time.time()
        code, third = self.run_job(job_text("twice"), 200)
        self.assertEqual(code, 0, third.output())
        self.assertIn("resuming at step 200 of 200: the checkpoints hold the job's last step, so "
                      "nothing is left to train", third.output())
        # Its speed is that of the steps it trained: none.
        self.assertRegex(third.output(), r"\[worker 0\] test accuracy [\d.]+ \(test loss [\d.]+\) after 200 "
                         r"steps in [\d.]+ s \(0\.00 steps/sec\)")
        print("finished job run again: exit %d in %.1f s" % (code, time.time() - start))

    def test_an_async_job_run_again_resumes_each_worker_at_its_own_step(self):
        # An async shard's checkpoint step counts the pushes it applied, from
        # every worker: 2 workers x 120 steps are step 240. Each worker's own
        # step is what the shards applied of its pushes. Before, both workers
        # of the second run started at the shards' count, 240 of 200, and
        # trained nothing.
        code, first = self.run_job(job_text("async-twice", mode="async"), 120)
        self.assertEqual(code, 0, first.output())
        self.assertIn(240, steps_of(self.run_dir, "server-0"))
        code, second = self.run_job(job_text("async-twice", mode="async"), 200)
        self.assertEqual(code, 0, second.output())
        for rank in (0, 1):
            self.assertIn("[worker %d] resuming at step 120 of 200" % rank, second.output())
            self.assertEqual(second.progress(rank=rank)[-1]["total_steps"], 200, second.output())

    def test_the_built_in_trainer_behind_the_agent_resumes_too(self):
        # `kubeps-agent --connect`: the built-in trainer as the job's own
        # program, beside each worker's agent, learns where to start from
        # the agent (which resumed the job) instead of asking the servers.
        job = json.loads(job_text("connected"))
        for field in ("model", "dataset"):
            del job["spec"][field]
        trainer = {"name": "trainer", "image": "kubeps/agent:0.1.0",
                   "command": [os.path.join(BIN_DIR, "kubeps-agent"), "--connect", "--model=mlp",
                               "--dataset=" + DATASET]}
        job["spec"]["replicaSpecs"]["worker"]["template"] = {"spec": {"containers": [trainer]}}
        code, first = self.run_job(json.dumps(job), 60)
        self.assertEqual(code, 0, first.output())
        code, second = self.run_job(json.dumps(job), 100)
        self.assertEqual(code, 0, second.output())
        self.assertIn("resuming at step 60 of 100", second.output())

    def test_resume_false_starts_fresh(self):
        code, first = self.run_job(job_text("fresh"), 120)
        self.assertEqual(code, 0, first.output())
        code, second = self.run_job(job_text("fresh", resume=False), 60, "fresh.yaml")
        self.assertEqual(code, 0, second.output())
        self.assertIn("discarded an earlier run's checkpoints", second.output())
        self.assertNotIn("resuming at step", second.output())
        # The old steps are gone; this run's final checkpoint is there.
        self.assertNotIn(120, steps_of(self.run_dir, "server-0"))
        self.assertIn(60, steps_of(self.run_dir, "server-0"))

    def test_no_common_step_fails_at_once_naming_the_folders(self):
        code, first = self.run_job(job_text("apart"), 120)
        self.assertEqual(code, 0, first.output())
        folder = os.path.join(self.run_dir, "checkpoints")
        # server-0 keeps only its newest step, server-1 only an older one.
        for step in steps_of(self.run_dir, "server-0")[:-1]:
            os.unlink(os.path.join(folder, "server-0", "step-%020d.ckpt" % step))
        os.unlink(os.path.join(folder, "server-1", "step-%020d.ckpt" % 120))
        code, second = self.run_job(job_text("apart"), 200)
        self.assertNotEqual(code, 0, second.output())
        self.assertIn("no checkpoint step in common", second.output())
        self.assertIn(os.path.join(folder, "server-0"), second.output())
        # A restart finds the same files: the job fails at once, instead of
        # spending its backoffLimit on restarts that all fail alike.
        self.assertIn("(NoCommonCheckpoint)", second.output())
        self.assertNotIn("Restarting", second.output())

    def test_a_job_run_again_with_another_number_of_servers_fails_at_once_saying_so(self):
        # Each shard holds the parts key placement gives it among the job's
        # servers. Before, 2 -> 3 failed on "no checkpoint step in common"
        # (the new server holds none) after spending every restart, and
        # 2 -> 1 as a model mismatch naming every cause but this one.
        code, first = self.run_job(job_text("servers"), 60)
        self.assertEqual(code, 0, first.output())
        for servers in (3, 1):
            code, again = self.run_job(job_text("servers", servers=servers), 100)
            self.assertNotEqual(code, 0, again.output())
            self.assertIn("written by a job of 2 servers, and this job has %d" % servers,
                          again.output())
            self.assertIn("(CheckpointMismatch)", again.output())
            self.assertIn("Cut them for %d first (kubeps reshard JOB.yaml" % servers,
                          again.output())
            self.assertNotIn("Restarting", again.output())
        # Nothing was touched: with its 2 servers the job resumes.
        code, third = self.run_job(job_text("servers"), 100)
        self.assertEqual(code, 0, third.output())
        self.assertIn("resuming at step 60 of 100", third.output())

    def test_checkpoints_resharded_for_other_servers_go_on_bit_for_bit(self):
        # `kubeps reshard` cuts the parameters and the optimizer's state
        # again as the next job's servers and bigArrayBound place them:
        # elementwise, a sync job resumed from them goes on as it would have
        # with its first servers. 2 servers (dense1.weight sliced), then 3,
        # then 1 under the default bound, against 2 throughout.
        def text(servers, bound):
            job = json.loads(job_text("reshard", servers=servers))
            job["spec"]["bigArrayBound"] = bound
            return json.dumps(job, indent=2)

        def reshard(*args):
            return subprocess.run([KUBEPS, "reshard", *args], capture_output=True, text=True,
                                  timeout=60)

        dumps = {name: os.path.join(self.dir, name + ".params") for name in ("straight", "resharded")}
        straight = RunningJob(write_manifest(self.dir, text(2, 100000), "straight.yaml"),
                              run_dir=os.path.join(self.dir, "straight"),
                              env={"KUBEPS_MAX_STEPS": "150", "KUBEPS_DUMP_PARAMS": dumps["straight"]})
        try:
            self.assertEqual(straight.wait(TIMEOUT), 0, straight.output())
        finally:
            straight.close()

        code, first = self.run_job(text(2, 100000), 60)
        self.assertEqual(code, 0, first.output())
        # As a user finds out: the job run with 3 fails, and says what to do
        # (its new server-2 leaves an empty folder behind).
        code, refused = self.run_job(text(3, 100000), 100)
        self.assertIn("(CheckpointMismatch)", refused.output())
        self.assertIn("kubeps reshard JOB.yaml", refused.output())
        done = reshard(write_manifest(self.dir, text(3, 100000), "next.yaml"), "--run-dir",
                       self.run_dir)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("step 60 of 2 servers (4 tensors", done.stdout)
        self.assertIn("resharded for 3 servers under bigArrayBound 100000", done.stdout)
        self.assertEqual(steps_of(self.run_dir, "server-2"), [60])
        code, second = self.run_job(text(3, 100000), 100)
        self.assertEqual(code, 0, second.output())
        self.assertIn("resuming at step 60 of 100", second.output())

        # Without a manifest, as in a pod that mounts the volume: the default bound.
        flags = ("--path", os.path.join(self.run_dir, "checkpoints"), "--servers", "1")
        done = reshard(*flags)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("step 100 of 3 servers", done.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "checkpoints", "server-1")))
        again = reshard(*flags)
        self.assertIn("nothing to reshard", again.stdout)
        # That reshard killed after its last move, before it dropped its
        # journal: the job refuses the folder at once, and the next reshard
        # finishes it.
        with open(os.path.join(flags[1], ".reshard-in-progress"), "w") as f:
            f.write("staging .reshard-step-100\nmoved-aside before-reshard-3-servers-step-100\n"
                    "servers 1\nold-servers 3\nstep 100\n")
        code, halfway = self.run_job(text(1, 1000000), 150)
        self.assertNotEqual(code, 0)
        self.assertIn("(CheckpointMismatch)", halfway.output())
        self.assertIn("is halfway through a reshard that was stopped between its moves",
                      halfway.output())
        again = reshard(*flags)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("finished the reshard of step 100 for 1 servers", again.stdout)
        job = RunningJob(write_manifest(self.dir, text(1, 1000000)), run_dir=self.run_dir,
                         env={"KUBEPS_MAX_STEPS": "150", "KUBEPS_DUMP_PARAMS": dumps["resharded"]})
        try:
            self.assertEqual(job.wait(TIMEOUT), 0, job.output())
        finally:
            job.close()
        self.assertIn("resuming at step 100 of 150", job.output())
        self.assertGreater(os.path.getsize(dumps["straight"]), 800000)  # 200k float32 and more
        with open(dumps["straight"], "rb") as a, open(dumps["resharded"], "rb") as b:
            self.assertTrue(a.read() == b.read(), "the resharded job's parameters differ")

    def test_an_async_jobs_checkpoints_are_refused_to_a_sync_job_run_again_over_them(self):
        # An async checkpoint's step counts every worker's pushes: before,
        # 2 workers x 60 async steps resumed as sync step 120 of 150, 60
        # steps skipped, and the job "Succeeded".
        code, first = self.run_job(job_text("modes", mode="async"), 60)
        self.assertEqual(code, 0, first.output())
        code, again = self.run_job(job_text("modes"), 150)
        self.assertNotEqual(code, 0, again.output())
        self.assertIn("written by an async job, and this job is sync", again.output())
        self.assertIn("(CheckpointMismatch)", again.output())
        self.assertNotIn("Restarting", again.output())

    def test_a_job_run_again_with_another_optimizer_keeps_the_parameters_and_starts_its_state(self):
        # Before, Adam took momentum's velocity for its first moment, with no
        # second moment and momentum's count of updates for its bias
        # correction: the loss went to millions, and the job "Succeeded".
        momentum = {"name": "momentum", "learningRate": 0.01}
        first, second = self.succeed_twice(job_text("optimizers", optimizer=momentum), 150,
                                           job_text("optimizers"), 300)
        self.assertIn("resuming at step 150 of 300", second.output())
        said = ("written with optimizer momentum, and this job runs adam: its parameters are kept, "
                "and adam's state starts fresh")
        self.assertEqual(second.output().count(said), 2, second.output())  # once by each server
        self.assertGreater(second.accuracy(), max(0.75, first.accuracy()), second.output())

    def test_an_elastic_job_run_again_with_fewer_workers_keeps_its_global_batch(self):
        # Kueue admits an evicted elastic job again with the workers its queue
        # has room for. Its global batch is the job's, whatever the workers
        # (docs/elastic.md): started again with 1 of 2, it took 32 examples a
        # step for 64, and counted step 100 as 3200 examples of its epoch, not
        # 6400: 3200 seen twice, and an epoch of 1875 steps, not 937.
        _, second = self.succeed_twice(job_text("elastic-again", elastic=True), 100,
                                       job_text("elastic-again", workers=1, elastic=True), 100000)
        self.assertIn("hold a global batch of 64 examples a step (their checkpoints, their "
                      "pushes); the job keeps it, cut over its 1 worker", second.output())
        self.assertIn("resuming at step 100 of 937", second.output())

    def test_an_elastic_job_run_again_with_a_smaller_batch_size_takes_it(self):
        # A GPU ran out of memory: its user halves spec.batchSize and runs the
        # job again over its checkpoints. Keeping their global batch, it took
        # 64 examples a step again, cut over the same 2 workers: the same 32 a
        # worker it ran out of memory with.
        _, second = self.succeed_twice(job_text("smaller", elastic=True), 100,
                                       job_text("smaller", elastic=True, batch=16), 150)
        self.assertIn("the checkpoints were written by a job of spec.batchSize 32, a global batch "
                      "of 64, and this one takes its own, spec.batchSize x its 2 workers: 32 "
                      "examples a step: its global batch is another, so that it takes step 100 "
                      "for another number of examples of its epoch", second.output())
        self.assertIn("resuming at step 100 of 150", second.output())
        self.assertRegex(second.output(), r"\[worker 0\] epoch 1/1 step \d+/1875 ")

    def test_a_fixed_job_run_again_with_another_number_of_workers_says_what_it_costs(self):
        # Its global batch is its workers' batches together: the rest of the
        # epoch it resumes in skips or repeats examples (with 1 worker of 2,
        # step 100 stands for 3200 examples, not 6400: 3200 are seen again).
        # Before, nothing said so.
        _, second = self.succeed_twice(job_text("fewer"), 100, job_text("fewer", workers=1), 150)
        self.assertIn("the checkpoints were written by a job of 2 workers x 32 examples, and this "
                      "one has 1 x 32: its global batch is another", second.output())
        self.assertIn("resuming at step 100 of 150", second.output())

    def test_damaged_checkpoint_is_set_aside(self):
        code, first = self.run_job(job_text("damaged"), 120)
        self.assertEqual(code, 0, first.output())
        newest = os.path.join(self.run_dir, "checkpoints", "server-1", "step-%020d.ckpt" % 120)
        with open(newest, "r+b") as f:  # one bit of a stored float flipped
            middle = os.path.getsize(newest) // 2
            f.seek(middle)
            byte = f.read(1)[0]
            f.seek(middle)
            f.write(bytes([byte ^ 0x10]))
        code, second = self.run_job(job_text("damaged"), 200)
        self.assertEqual(code, 0, second.output())
        self.assertIn(newest + ".damaged", second.output())
        self.assertTrue(os.path.exists(newest + ".damaged"))
        self.assertIn("resuming at step 100 of 200", second.output())


class LaggingShardTest(unittest.TestCase):
    """One shard's checkpoint writes fail (a directory stands where its
    temporary file would go: running as root, a read-only mode would not stop
    the write); the other shard is then killed. The recovery goes back to the
    newest step both hold, which the healthy shard kept although it is older
    than its newest 3, and the job succeeds."""

    def test_recovery_uses_the_newest_common_step(self):
        tmp = tempfile.mkdtemp(prefix="kubeps-ckpt-lag-")
        self.addCleanup(shutil.rmtree, tmp, True)
        run_dir = os.path.join(tmp, "run")
        folder = os.path.join(run_dir, "checkpoints", "server-1")
        os.makedirs(folder)
        # Every checkpoint of server-1 from step 100 to 500 fails (9, under the 10 in a row at
        # which a shard gives up; a restore starts the count again), and the job ends at 540.
        # The kill below comes after step 260, and must come before 540 (650 steps a second
        # without the network's delay).
        for step in range(100, 550, 50):
            os.makedirs(os.path.join(folder, "step-%020d.ckpt.tmp" % step))
        job = RunningJob(write_manifest(tmp, job_text("lag")), run_dir=run_dir,
                         env=dict(SLIGHTLY_SLOW_NETWORK, KUBEPS_MAX_STEPS="540"))
        self.addCleanup(job.close)
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and not any(p["total_steps"] >= 260 for p in job.progress()):
            self.assertIsNone(job.process.poll(), job.output())
            time.sleep(0.05)
        victims = set(processes_with_env("KUBEPS_RUN_DIR", run_dir)) & set(
            processes_with_env("KUBEPS_NODE_ID", "server-0"))
        self.assertEqual(len(victims), 1, job.output())
        os.kill(victims.pop(), signal.SIGKILL)
        self.assertEqual(job.wait(TIMEOUT), 0, job.output())
        output = job.output()
        self.assertIn("checkpoint of step 100 into %s failed" % folder, output)
        self.assertIn("rolled back to step 50", output)


class ReadOnlyFolderTest(unittest.TestCase):
    """The checkpoints' volume turns read-only mid-job (ext4 remounts itself
    read-only after an I/O error; a volume is detached under the pod).
    `kubeps run` runs in a mount namespace of its own, where its checkpoints
    folder is a bind mount that the test remounts read-only once both shards
    wrote a checkpoint: as root, a read-only mode would stop nothing. Each
    shard tolerates failed writes for a while, then gives up, and the job
    fails at once (a restart would write into the same folder), with a
    message that names the folder and the error."""

    def test_the_job_fails_naming_the_folder(self):
        probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
        if probe.returncode != 0:
            self.skipTest("needs a mount namespace (root with CAP_SYS_ADMIN): " + probe.stderr)
        tmp = tempfile.mkdtemp(prefix="kubeps-ckpt-ro-")
        self.addCleanup(shutil.rmtree, tmp, True)
        run_dir = os.path.join(tmp, "run")
        folder = os.path.join(run_dir, "checkpoints")
        os.makedirs(folder)
        wrapper = os.path.join(tmp, "kubeps-in-a-mount-namespace")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec unshare --mount --propagation private sh -c '
                    '\'mount --bind "$0" "$0" && exec "$@"\' %s %s "$@"\n' % (folder, KUBEPS))
        os.chmod(wrapper, 0o755)
        job = RunningJob(write_manifest(tmp, job_text("readonly", interval=10)), run_dir=run_dir,
                         env={"KUBEPS_MAX_STEPS": "1500"}, kubeps=wrapper)
        self.addCleanup(job.close)
        deadline = time.time() + TIMEOUT
        while not (steps_of(run_dir, "server-0") and steps_of(run_dir, "server-1")):
            self.assertIsNone(job.process.poll(), job.output())
            self.assertLess(time.time(), deadline, job.output())
            time.sleep(0.05)
        # A checkpoint being written holds a file open for writing, and the
        # remount is refused (EBUSY) while one does: tried again at once.
        for attempt in range(200):
            remount = subprocess.run(["nsenter", "-t", str(job.process.pid), "-m", "mount", "-o",
                                      "remount,bind,ro", folder], capture_output=True, text=True)
            if remount.returncode == 0 or "busy" not in remount.stderr:
                break
            time.sleep(0.01)
        self.assertEqual(remount.returncode, 0, remount.stderr)
        start = time.time()
        code = job.wait(TIMEOUT)
        output = job.output()
        self.assertNotEqual(code, 0, output)
        self.assertRegex(output, r"server-\d failed and is not restarted \(a rerun would fail the "
                         r"same way\): \d+ checkpoint writes in a row failed, the last: checkpoint "
                         r"of step \d+ into %s/server-\d failed: .*Read-only file system"
                         % re.escape(folder))
        self.assertNotIn("restarting it", output)
        self.assertEqual(processes_with_env("KUBEPS_RUN_DIR", run_dir), [])
        print("\ncheckpoints folder read-only mid-job: the job failed %.1f s later" %
              (time.time() - start))


class SharedFolderTest(unittest.TestCase):
    """Two jobs given the same spec.checkpoint.path run at once (a manifest
    copied under a new name). Each shard's folder has one live process: the
    second job's servers find the first job's there and the job fails at once,
    naming the folder and who holds it, while the first job trains on with its
    checkpoints its own. (Another job's process is given a grace first, as a
    deleted job's pod may be stopping: 2 s for `kubeps run`.) Before, the
    second job took the first one's newest checkpoint for its own start, and
    both wrote into the same files."""

    def test_the_second_job_fails_and_the_first_goes_on(self):
        tmp = tempfile.mkdtemp(prefix="kubeps-ckpt-shared-")
        self.addCleanup(shutil.rmtree, tmp, True)
        folder = os.path.join(tmp, "checkpoints")

        def text(name):
            job = json.loads(job_text(name, interval=20))
            job["spec"]["checkpoint"]["path"] = folder
            job["spec"]["epochs"] = 2  # still training when the second job gives up, under load
            return json.dumps(job)

        first = RunningJob(write_manifest(tmp, text("first"), "first.yaml"),
                           env=dict(PACED_FOR_KILLS, KUBEPS_MAX_STEPS="1800"))
        self.addCleanup(first.close)
        # Training means both servers registered, so each holds its folder.
        first.wait_for_line(r"^\[worker 0\] epoch", TIMEOUT)
        marks = {server: read_text(os.path.join(folder, server, "run"))
                 for server in ("server-0", "server-1")}
        second = RunningJob(write_manifest(tmp, text("second"), "second.yaml"),
                            env={"KUBEPS_MAX_STEPS": "1800"})
        self.addCleanup(second.close)
        code = second.wait(TIMEOUT)
        output = second.output()
        self.assertIsNone(first.process.poll(), "the first job ended before the second did; "
                          "nothing was shared:\n" + first.output())
        self.assertNotEqual(code, 0, output)
        self.assertRegex(output, r"server-\d failed and is not restarted \(a rerun would fail the "
                         r"same way\): checkpoint folder %s/server-\d is in use by server-\d of "
                         r"job default/first \(run [^)]+\) on [^ ]+, pid \d+" % re.escape(folder))
        self.assertIn("CheckpointFolderInUse", output)
        self.assertNotIn("resuming at step", output)
        self.assertEqual(first.wait(TIMEOUT), 0, first.output())
        for server, mark in marks.items():
            self.assertEqual(read_text(os.path.join(folder, server, "run")), mark, server)
            self.assertIn(1800, steps_of_folder(os.path.join(folder, server)))
        print("\na second job over the same checkpoint folder failed %.1f s after its start"
              % second.lines[-1][0])


class RunFolderTest(unittest.TestCase):
    """Without --run-dir: the folder `kubeps run` makes under $TMPDIR."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kubeps-tmpdir-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_kubeps(self, *flags, max_steps=20):
        path = write_manifest(self.tmp, job_text("folder"), "job.yaml")
        env = dict(os.environ, TMPDIR=self.tmp, KUBEPS_MAX_STEPS=str(max_steps))
        result = subprocess.run([KUBEPS, "run", path] + list(flags), env=env, timeout=TIMEOUT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return result, glob.glob(os.path.join(self.tmp, "kubeps-folder-*"))

    def test_removed_after_success(self):
        result, folders = self.run_kubeps()
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertEqual(folders, [], result.stdout)

    def test_kept_when_asked(self):
        result, folders = self.run_kubeps("--keep-run-dir")
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertEqual(len(folders), 1, result.stdout)
        self.assertTrue(os.path.isdir(os.path.join(folders[0], "checkpoints")))


if __name__ == "__main__":
    unittest.main()
