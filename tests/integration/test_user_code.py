"""A TrainingJob that brings its own PyTorch program, through `kubeps run`
(user_code_job.py): examples/pytorch/mlp (train.py and its trainingjob.yaml,
2 servers, 2 workers, sync, Adam on the servers, 500 steps), each worker's
program beside its kubeps-agent. It trains to the accuracy measured for it; a
SIGKILL of a worker's program, and later in the same job one of its agent,
are repaired by the run policy, the worker keeps its rank and the job ends at
the same accuracy; a SIGKILL of a parameter server rolls the job back to its
checkpoint and it ends with the same parameters, bit for bit, as without it
(and so under injected faults: test_user_code_faults), with the servers'
Adam or with the program's own (optimizer none), where a killed worker's
program rolls the job back to the checkpoint step its own state is of too; a
job with optimizer none run again over its checkpoints needs the program's
own state of the step it resumes at, and fails saying so without it; a manifest with
neither a model nor a program fails `kubeps validate`, saying so, and the
built-in trainer as the program refuses the servers' optimizer none.
"""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from jobtools import (BIN_DIR, DATASET, KUBEPS, metric, read_ports, replica_pids, run_job,
                      scrape, write_manifest)
from user_code_job import (EXAMPLE, KILL_AFTER_STEP, MIN_ACCURACY, RANK, STEPS, UserCodeJobCase,
                           accuracy_of, differing_parameters, example_manifest, worker_process)

# worker-0's program's progress lines (every 50 steps).
PROGRESS = re.compile(r"^\[worker-0/trainer\] step (\d+)/")
# Checkpoints as a user of a long job keeps them: they change no bit, and a
# killed server rolls back to the newest.
CHECKPOINTS = {"checkpoint": {"intervalSteps": 50}}
SECOND_KILL_AFTER_STEP = 300
# The example's spec.optimizer, the servers' Adam.
ADAM_ON_THE_SERVERS = "    name: adam\n    learningRate: 0.001\n"
OWN_OPTIMIZER_STEPS = 200
# Runs the example with its first life stalled in one save (stall_in_save.py).
STALL_IN_SAVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stall_in_save.py")
STALLED = "worker-0's program, stalled in its save"


class UserCodeTest(UserCodeJobCase):
    clean = None  # (job, saved parameters) of the example without faults
    own_optimizer_clean = None  # saved parameters of the same with the program's optimizer

    def clean_run(self):
        """The example with checkpoints and rank 0 saving its final parameters,
        without faults; run once for the test class: (job, saved file)."""
        if UserCodeTest.clean is None:
            job, saved = self.saved_run("clean", spec=CHECKPOINTS)
            self.assert_succeeded(job, job.wait(180))
            UserCodeTest.clean = (job, saved)
        return UserCodeTest.clean

    def test_example_trains_with_its_program_beside_each_agent(self):
        job, _ = self.clean_run()
        output = job.output()
        # Each worker's program ran, with the replica's tag on its lines.
        for worker in ("worker-0", "worker-1"):
            self.assertIn("[%s/trainer] step %d/%d loss " % (worker, STEPS, STEPS), output)
        # The agents beside the programs compute nothing, so say no thread count.
        self.assertNotIn("computing on", output)
        self.assertRegex(output, r"running job pytorch-mlp: 1 scheduler, 2 servers, 2 workers "
                                 r"\(sync, container trainer: python3 train.py --steps 500\b")
        accuracy = accuracy_of(job)
        seconds = float(re.search(r"succeeded in ([\d.]+) s", output).group(1))
        print("\nexamples/pytorch/mlp through kubeps run: test accuracy %.4f after %d steps, "
              "job %.1f s" % (accuracy, STEPS, seconds))
        self.assertGreaterEqual(accuracy, MIN_ACCURACY, output)

    def kill_worker_0(self, job, which, after_step, since):
        """SIGKILLs worker-0's program or agent once its program has printed
        step `after_step` or later after `since` (seconds into the job): the
        time of the kill, and the rank the program had."""
        deadline = time.time() + 120
        while not self.progress_of_worker_0(job, since, after_step):
            self.assertLess(time.time(), deadline, "worker-0 never reached step %d; output:\n%s"
                            % (after_step, job.output()))
            self.assertIsNone(job.process.poll(), job.output())
            time.sleep(0.05)
        rank = [m.group(1) for m in (RANK.match(line) for _, line in job.lines) if m][-1]
        pid = worker_process(job, which)
        killed_at = time.time() - job.start
        os.kill(pid, signal.SIGKILL)
        return killed_at, rank

    @staticmethod
    def progress_of_worker_0(job, since, from_step=0):
        """The times of worker-0's program's progress lines (every 50 steps)
        after `since`, of step `from_step` or later."""
        matches = ((t, PROGRESS.match(line)) for t, line in list(job.lines) if t > since)
        return [t for t, m in matches if m and int(m.group(1)) >= from_step]

    def test_a_killed_program_then_a_killed_agent_are_restarted_and_the_worker_keeps_its_rank(self):
        clean = accuracy_of(self.clean_run()[0])
        job = self.start("kills")
        program_killed_at, rank = self.kill_worker_0(job, "program", KILL_AFTER_STEP, 0)
        agent_killed_at, _ = self.kill_worker_0(
            job, "agent", SECOND_KILL_AFTER_STEP, program_killed_at)
        self.assert_succeeded(job, job.wait(180))
        output = job.output()
        # The program killed: its container's exit restarts the worker.
        self.assertIn("worker-0's program (container trainer) exited with code 137", output)
        self.assertIn("job pytorch-mlp Restarting: worker-0 exited with code 137; restarting it "
                      "(restart 1 of at most 3)", output)
        # The agent killed: it is restarted; the program sees its connection
        # break and fails, and the run policy restarts the worker's pod.
        self.assertIn("worker-0's agent exited with code 137; restarting it", output)
        self.assertRegex(output, r"job pytorch-mlp Restarting: worker-0 exited with code \d+; "
                                 r"restarting it \(restart 2 of at most 3\)")
        ranks = [(t, m.group(1)) for t, m in ((t, RANK.match(line)) for t, line in job.lines) if m]
        self.assertEqual([r for _, r in ranks], [rank] * 3,
                         "worker-0's program ran three times, keeping its rank; output:\n" + output)
        accuracy = accuracy_of(job)
        for (what, killed_at, step), (started, _) in zip(
                [("program", program_killed_at, KILL_AFTER_STEP),
                 ("agent", agent_killed_at, SECOND_KILL_AFTER_STEP)], ranks[1:]):
            resumed = self.progress_of_worker_0(job, killed_at)
            self.assertTrue(resumed, output)
            print("\nSIGKILL of worker-0's %s (rank %s) %.1f s into the job, after step %d: the "
                  "program restarted with rank %s %.1f s after the kill, its next progress line "
                  "%.1f s after" % (what, rank, killed_at, step, rank, started - killed_at,
                                   resumed[0] - killed_at))
        print("accuracy %.4f without the kills, %.4f with them" % (clean, accuracy))
        self.assertLess(abs(accuracy - clean), 0.01, output)

    def test_a_killed_parameter_server_costs_no_bit(self):
        clean, clean_saved = self.clean_run()
        job, saved = self.saved_run("kill-server", spec=CHECKPOINTS)
        job.wait_for_line(r"^\[worker-0/trainer\] step 150/", timeout=120)
        victims = replica_pids(job.run_dir, "server-1")
        self.assertEqual(len(victims), 1, job.output())
        killed_at = time.time() - job.start
        os.kill(victims[0], signal.SIGKILL)
        self.assert_succeeded(job, job.wait(180))
        output = job.output()
        self.assertIn("server-1 exited with code 137; restarting it", output)
        self.assertIn("loaded checkpoint of step", output)
        resumed = self.progress_of_worker_0(job, killed_at)
        self.assertTrue(resumed, output)
        print("\nSIGKILL of server-1 %.1f s into the PyTorch job, after step 150: worker-0's next "
              "progress line %.1f s after the kill; accuracy %.4f without the kill, %.4f with it"
              % (killed_at, resumed[0] - killed_at, accuracy_of(clean), accuracy_of(job)))
        self.assertEqual(differing_parameters(clean_saved, saved), [], output)
        self.assertEqual(accuracy_of(job), accuracy_of(clean))

    def own_optimizer_manifest(self, name, steps, save=None, spec=CHECKPOINTS, args=()):
        """The example with spec.optimizer none: the servers only average, and each
        program's Adam steps its own parameters."""
        path = example_manifest(self.dir, name, steps, save, spec, args)
        with open(path) as f:
            text = f.read()
        self.assertIn(ADAM_ON_THE_SERVERS, text)
        with open(path, "w") as f:
            f.write(text.replace(ADAM_ON_THE_SERVERS, "    name: none\n"))
        return path

    def test_a_rerun_over_the_checkpoints_of_the_programs_own_optimizer_needs_its_state(self):
        # With optimizer none the servers' checkpoints hold averaged gradients, not
        # parameters. Before, a second run over the first's spec.checkpoint.path resumed at
        # its last step from fresh values and ended "Succeeded" with a model that never
        # learned (test accuracy 0.06).
        spec = {"checkpoint": {"intervalSteps": 50, "path": os.path.join(self.dir, "ckpt")}}
        path = self.own_optimizer_manifest("rerun", 100, spec=spec)
        first = self.start("rerun-first", path)
        self.assert_succeeded(first, first.wait(180))
        again = self.start("rerun-again", path)
        code = again.wait(180)
        out = again.output()
        self.assertNotEqual(code, 0, out)
        self.assertRegex(out, r"job pytorch-mlp failed.*ProgramStateMissing", out)
        self.assertIn("starts at step 100, but the servers' optimizer is none", out)
        self.assertNotIn("restarting it", out, "a rerun would be refused the same way")
        self.assertNotIn("test accuracy", out)
        print("\nthe none job run again over its checkpoints: " +
              [line for _, line in again.lines if line.startswith("[kubeps] job ")][-1])

        # The example keeping its own state (--state-dir, kps.resume_with): a job run to
        # step 100, then again to its end over the same checkpoints, resumes from its
        # state of step 100 and ends on the bytes of a run that never stopped.
        spec = {"checkpoint": {"intervalSteps": 50,
                               "path": os.path.join(self.dir, "ckpt-own-state")}}
        resumed = os.path.join(self.dir, "own-state-resumed.pt")
        for name, steps, save in (("to-100", 100, None), ("resumed", OWN_OPTIMIZER_STEPS, resumed)):
            job = self.start("own-state-" + name,
                             self.own_optimizer_manifest("own-state-" + name, steps, save, spec,
                                                         self.own_optimizer_args("own-state")))
            self.assert_succeeded(job, job.wait(180))
        self.assertRegex(job.output(), r"\[worker-\d/trainer\] resumed at step 100 "
                                       r"from .*step-00000100\.pt")
        self.assertEqual(differing_parameters(self.own_optimizer_clean_run(), resumed), [])

    def own_optimizer_args(self, name):
        """Progress every 10 steps; the program's state kept at every checkpoint step."""
        return ["--log-every", "10", "--state-dir", os.path.join(self.dir, name + "-state")]

    def own_optimizer_clean_run(self):
        """The example with the program's own optimizer, without faults, run once for
        the test class: the file of its final parameters."""
        if UserCodeTest.own_optimizer_clean is None:
            saved = os.path.join(self.dir, "own-optimizer-clean.pt")
            job = self.start("own-optimizer-clean", self.own_optimizer_manifest(
                "own-optimizer-clean", OWN_OPTIMIZER_STEPS, saved,
                args=self.own_optimizer_args("own-optimizer-clean")))
            self.assert_succeeded(job, job.wait(180))
            UserCodeTest.own_optimizer_clean = saved
        return UserCodeTest.own_optimizer_clean

    def test_a_killed_server_or_worker_costs_no_bit_with_the_programs_own_optimizer(self):
        # spec.optimizer none: the servers only average, and each program's Adam steps its
        # own parameters; a rollback takes those and Adam's moments back with the servers'
        # step (kubeps/_torch_rollback.py). Before, they kept their values and the redone
        # steps were applied twice.
        # In one job: the scheduler stopped (SIGTERM, as an eviction), then a worker's
        # program killed, then a server killed. The restarted scheduler knows no common
        # checkpoint until the servers say theirs. The killed program sends the job back
        # to the newest checkpoint step, which its restarted self's own state (--state-dir)
        # is of; before, it went on from fresh values beside the others. The killed server
        # sends it back again.
        # Then a worker's program killed after the servers checkpointed a step and before
        # its own save of that step was written: the job goes back to the step before,
        # the newest its own state holds. Before, it went back to the servers' newest, and
        # the restarted program, holding no state of it, failed until the job did.
        program = "worker-0's program"
        faults = {"own-optimizer-kills": [(50, "scheduler-0", signal.SIGTERM),
                                          (110, program, signal.SIGKILL),
                                          (150, "server-1", signal.SIGKILL)],
                  "own-optimizer-kill-worker-in-its-save": [(100, STALLED, signal.SIGKILL)]}
        clean = self.own_optimizer_clean_run()
        outputs = {}
        for name, steps_and_victims in faults.items():
            saved = os.path.join(self.dir, name + ".pt")
            manifest = self.own_optimizer_manifest(name, OWN_OPTIMIZER_STEPS, saved,
                                                   args=self.own_optimizer_args(name))
            self.allow_restarts(manifest, len(steps_and_victims))
            stalls = [step for step, replica, _ in steps_and_victims if replica == STALLED]
            if stalls:
                self.stall_in_save(manifest, stalls[0], os.path.join(self.dir, name + "-stalled"))
            job = self.start(name, manifest)
            for step, replica, sig in steps_and_victims:
                if replica == STALLED:
                    job.wait_for_line(r"^\[worker-0/trainer\] stalled in the save of step %d$"
                                      % step, timeout=120)
                    self.wait_for_the_servers_checkpoint(job, step)
                else:
                    job.wait_for_line(r"^\[worker-0/trainer\] step %d/" % step, timeout=120)
                victims = ([worker_process(job, "program")] if replica in (program, STALLED)
                           else replica_pids(job.run_dir, replica))
                self.assertEqual(len(victims), 1, job.output())
                os.kill(victims[0], sig)
            self.assert_succeeded(job, job.wait(180))
            outputs[name] = output = job.output()
            self.assertNotIn("no copy of its state", output)
            self.assertEqual(differing_parameters(clean, saved), [], output)
        kills = outputs["own-optimizer-kills"]
        self.assertIn("scheduler-0 exited with code 143; restarting it", kills)
        self.assertIn("worker-0's program (container trainer) exited with code 137", kills)
        self.assertRegex(kills, r"recovery: generation \d+ rolls every shard and worker "
                                r"back to step 100, .*\(worker-0 restarted")
        self.assertRegex(kills, r"\[worker-0/trainer\] resumed at step 100 from")
        self.assertIn("server-1 exited with code 137; restarting it", kills)
        self.assertRegex(kills, r"recovery: generation \d+ rolls every shard and worker back to "
                                r"step \d+, the newest checkpoint every shard holds \(server-1 "
                                r"restarted\)")
        killed_in_save = outputs["own-optimizer-kill-worker-in-its-save"]
        self.assertRegex(killed_in_save, r"recovery: generation \d rolls every shard and worker "
                                         r"back to step 50: worker-0's program holds")
        self.assertRegex(killed_in_save, r"\[worker-0/trainer\] resumed at step 50 from")
        print("\nworker-0's program SIGKILLed in its save of step 100:\n" + "\n".join(
            line for line in killed_in_save.splitlines() if "recovery: generation" in line))

    def allow_restarts(self, manifest, faults):
        """One restart a fault, and one more: the example allows 3 (runPolicy.backoffLimit)."""
        with open(manifest) as f:
            text = f.read()
        self.assertIn("backoffLimit: 3\n", text)
        with open(manifest, "w") as f:
            f.write(text.replace("backoffLimit: 3\n", "backoffLimit: %d\n" % max(3, faults + 1)))

    def stall_in_save(self, manifest, step, marker):
        """Makes worker-0's program's first life stall in its save of `step`
        (stall_in_save.py)."""
        with open(manifest) as f:
            text = f.read()
        for old, new in [("command: [python3, train.py]",
                          "command: [python3, %s]" % STALL_IN_SAVE),
                         ('args: ["', 'args: ["%d", "%s", "train.py", "' % (step, marker))]:
            self.assertIn(old, text)
            text = text.replace(old, new)
        with open(manifest, "w") as f:
            f.write(text)

    def wait_for_the_servers_checkpoint(self, job, step, timeout=60):
        """Until the scheduler says that every server holds a checkpoint of `step`
        (kubeps_scheduler_common_checkpoint_step)."""
        deadline = time.time() + timeout
        while True:
            ports = read_ports(job.run_dir, "scheduler-0")
            try:  # a restarting scheduler answers on its new port once it wrote it
                common = metric(scrape(ports[1]), "kubeps_scheduler_common_checkpoint_step")
            except (OSError, TypeError):
                common = None
            if common == step:
                return
            self.assertLess(time.time(), deadline, "the scheduler's newest common checkpoint "
                            "is %s, not %d; output:\n%s" % (common, step, job.output()))
            time.sleep(0.05)

    def test_a_program_whose_model_diverges_fails_the_job_saying_why(self):
        # SGD with learning rate 1e10 on the servers: within a few steps the
        # program pushes NaN gradients, which the shards refuse. The program
        # dies of the exception with exit 1, which alone would be restarted
        # until the backoffLimit; its agent says why.
        path = example_manifest(self.dir, "diverge", 200)
        with open(path) as f:
            text = f.read()
        self.assertIn(ADAM_ON_THE_SERVERS, text)
        with open(path, "w") as f:
            f.write(text.replace(ADAM_ON_THE_SERVERS, "    name: sgd\n    learningRate: 1e10\n"))
        job = self.start("diverge", path)
        code = job.wait(180)
        out = job.output()
        self.assertNotEqual(code, 0, out)
        self.assertRegex(out, r"job pytorch-mlp failed.*NonFiniteGradient", out)
        self.assertRegex(out, r"worker-\d failed and is not restarted \(a rerun would fail the "
                         r"same way\): .*is not finite \(NaN or Inf\)", out)
        self.assertNotIn("restarting it", out)
        # The program saw why, in the exception the client raised.
        self.assertRegex(out, r"kubeps\.errors\.InvalidArgument: InvalidArgument: wait: .*is "
                         r"not finite", out)


class UserCodeValidationTest(unittest.TestCase):
    def test_a_job_with_neither_a_model_nor_a_program_is_invalid(self):
        directory = tempfile.mkdtemp(prefix="kubeps-user-code-")
        path = write_manifest(directory, "apiVersion: kubeps.io/v1alpha1\nkind: TrainingJob\n"
                                         "metadata: {name: nothing}\nspec:\n  replicaSpecs:\n"
                                         "    worker: {replicas: 2}\n")
        result = subprocess.run([KUBEPS, "validate", path], capture_output=True, text=True)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn(path + ": spec.model: required unless the job brings its own training "
                             "program: name a built-in model (softmax, mlp or cnn) with "
                             "spec.dataset.path, or give the worker's pod template a container "
                             "that runs your program", result.stderr)

    def test_the_built_in_trainer_as_the_program_needs_the_servers_optimizer(self):
        # Valid as a manifest (the program could run its own optimizer), but
        # `kubeps-agent --connect` trains a built-in model, which has none.
        directory = tempfile.mkdtemp(prefix="kubeps-user-code-")
        trainer = ('{name: trainer, image: kubeps/agent:0.1.0, command: [%s, --connect, '
                   '--model=mlp, "--dataset=%s"]}' % (os.path.join(BIN_DIR, "kubeps-agent"),
                                                     DATASET))
        path = write_manifest(directory, "apiVersion: kubeps.io/v1alpha1\nkind: TrainingJob\n"
                              "metadata: {name: connected}\nspec:\n  optimizer: {name: none}\n"
                              "  runPolicy: {restartPolicy: OnFailure, backoffLimit: 3}\n"
                              "  replicaSpecs:\n    ps: {replicas: 1}\n    worker:\n"
                              "      replicas: 1\n      template: {spec: {containers: [%s]}}\n"
                              % trainer)
        code, job = run_job(path, timeout=120)
        out = job.output()
        self.assertNotEqual(code, 0, out)
        self.assertIn("kubeps-agent --connect: the built-in model \"mlp\" runs no optimizer of "
                      "its own, so it needs the servers' (spec.optimizer.name is none", out)
        self.assertRegex(out, r"job connected failed .*InvalidConfig: kubeps-agent --connect")

    def test_the_example_is_valid(self):
        result = subprocess.run([KUBEPS, "validate", EXAMPLE], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('valid TrainingJob "pytorch-mlp"', result.stdout)


if __name__ == "__main__":
    unittest.main()
