"""A TrainingJob that brings its own PyTorch program, through `kubeps run`
(user_code_job.py): examples/pytorch/mlp (train.py and its trainingjob.yaml,
2 servers, 2 workers, sync, Adam on the servers, 500 steps), each worker's
program beside its kubeps-agent. It trains to the accuracy measured for it; a
SIGKILL of a worker's program or of its agent mid-job is repaired by the run
policy, the worker keeps its rank and the job ends at the same accuracy; a
SIGKILL of a parameter server rolls the job back to its checkpoint and it ends
with the same parameters, bit for bit, as without it (and so under injected
faults: test_user_code_faults); a manifest with neither a model nor a program
fails `kubeps validate`, saying so.
"""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from jobtools import KUBEPS, replica_pids, write_manifest
from user_code_job import (EXAMPLE, KILL_AFTER_STEP, MIN_ACCURACY, RANK, STEPS, UserCodeJobCase,
                           accuracy_of, differing_parameters, example_manifest, worker_process)


class UserCodeTest(UserCodeJobCase):
    clean_accuracy = None

    def clean_run_accuracy(self):
        """The accuracy of the example without faults (run once per test class)."""
        if UserCodeTest.clean_accuracy is None:
            job = self.start("clean")
            self.assert_succeeded(job, job.wait(180))
            UserCodeTest.clean_accuracy = accuracy_of(job)
        return UserCodeTest.clean_accuracy

    def test_example_trains_with_its_program_beside_each_agent(self):
        job = self.start("example")
        code = job.wait(180)
        self.assert_succeeded(job, code)
        output = job.output()
        # Each worker's program ran, with the replica's tag on its lines.
        for worker in ("worker-0", "worker-1"):
            self.assertIn("[%s/trainer] step %d/%d loss " % (worker, STEPS, STEPS), output)
        # The agents beside the programs compute nothing, so say no thread count.
        self.assertNotIn("computing on", output)
        self.assertRegex(output, r"running job pytorch-mlp: 1 scheduler, 2 servers, 2 workers "
                                 r"\(sync, container trainer: python3 train.py --steps 500 ")
        accuracy = accuracy_of(job)
        seconds = float(re.search(r"succeeded in ([\d.]+) s", output).group(1))
        print("\nexamples/pytorch/mlp through kubeps run: test accuracy %.4f after %d steps, "
              "job %.1f s" % (accuracy, STEPS, seconds))
        self.assertGreaterEqual(accuracy, MIN_ACCURACY, output)
        if UserCodeTest.clean_accuracy is None:
            UserCodeTest.clean_accuracy = accuracy

    def kill_mid_job(self, name, which):
        """Kills worker-0's program or agent after step KILL_AFTER_STEP; the job's
        (kill time, job, rank before, rank after)."""
        job = self.start(name)
        job.wait_for_line(r"^\[worker-0/trainer\] step %d/" % KILL_AFTER_STEP, timeout=120)
        rank_before = [m.group(1) for m in (RANK.match(line) for _, line in job.lines) if m]
        pid = worker_process(job, which)
        killed_at = time.time() - job.start
        os.kill(pid, signal.SIGKILL)
        self.assert_succeeded(job, job.wait(180))
        ranks = [(t, m.group(1)) for t, m in ((t, RANK.match(line)) for t, line in job.lines) if m]
        self.assertEqual(len(ranks), 2, "worker-0's program ran twice; output:\n" + job.output())
        self.assertEqual(ranks[0][1], rank_before[0])
        self.assertEqual(ranks[1][1], ranks[0][1], "the restarted worker keeps its rank")
        # The restarted program's first progress line (every 50 steps).
        progress = [t for t, line in job.lines if t > killed_at and
                    re.match(r"^\[worker-0/trainer\] step \d+/", line)]
        self.assertTrue(progress, job.output())
        return killed_at, job, ranks[0][1], (ranks[1][0] - killed_at, progress[0] - killed_at)

    def test_killed_program_is_restarted_with_its_rank(self):
        clean = self.clean_run_accuracy()
        killed_at, job, rank, resumed = self.kill_mid_job("kill-program", "program")
        self.assertIn("worker-0's program (container trainer) exited with code 137", job.output())
        self.assertIn("job pytorch-mlp Restarting: worker-0 exited with code 137; restarting it "
                      "(restart 1 of at most 3)", job.output())
        accuracy = accuracy_of(job)
        print("\nSIGKILL of worker-0's program (rank %s) %.1f s into the job, after step %d: the "
              "restarted program had rank %s %.1f s after the kill, its next progress line "
              "%.1f s after; accuracy %.4f without the kill, %.4f with it"
              % (rank, killed_at, KILL_AFTER_STEP, rank, resumed[0], resumed[1], clean, accuracy))
        self.assertLess(abs(accuracy - clean), 0.01, job.output())

    def test_killed_agent_is_restarted_and_the_worker_keeps_its_rank(self):
        clean = self.clean_run_accuracy()
        killed_at, job, rank, resumed = self.kill_mid_job("kill-agent", "agent")
        output = job.output()
        self.assertIn("worker-0's agent exited with code 137; restarting it", output)
        # The program saw its connection break, failed, and the run policy
        # restarted the worker's pod.
        self.assertRegex(output, r"job pytorch-mlp Restarting: worker-0 exited with code \d+; "
                                 r"restarting it \(restart 1 of at most 3\)")
        accuracy = accuracy_of(job)
        print("\nSIGKILL of worker-0's agent (rank %s) %.1f s into the job, after step %d: agent "
              "restarted, the program restarted by the run policy had rank %s %.1f s after the "
              "kill, its next progress line %.1f s after; accuracy %.4f without the kill, %.4f "
              "with it" % (rank, killed_at, KILL_AFTER_STEP, rank, resumed[0], resumed[1], clean,
                           accuracy))
        self.assertLess(abs(accuracy - clean), 0.01, output)


    def test_a_killed_parameter_server_costs_no_bit(self):
        spec = {"checkpoint": {"intervalSteps": 50}}
        clean, clean_saved = self.saved_run("server-clean", spec=spec)
        self.assert_succeeded(clean, clean.wait(180))
        job, saved = self.saved_run("kill-server", spec=spec)
        job.wait_for_line(r"^\[worker-0/trainer\] step 150/", timeout=120)
        victims = replica_pids(job.run_dir, "server-1")
        self.assertEqual(len(victims), 1, job.output())
        killed_at = time.time() - job.start
        os.kill(victims[0], signal.SIGKILL)
        self.assert_succeeded(job, job.wait(180))
        output = job.output()
        self.assertIn("server-1 exited with code 137; restarting it", output)
        self.assertIn("loaded checkpoint of step", output)
        resumed = [t for t, line in job.lines if t > killed_at and
                   re.match(r"^\[worker-0/trainer\] step \d+/", line)]
        self.assertTrue(resumed, output)
        print("\nSIGKILL of server-1 %.1f s into the PyTorch job, after step 150: worker-0's next "
              "progress line %.1f s after the kill; accuracy %.4f without the kill, %.4f with it"
              % (killed_at, resumed[0] - killed_at, accuracy_of(clean), accuracy_of(job)))
        self.assertEqual(differing_parameters(clean_saved, saved), [], output)
        self.assertEqual(accuracy_of(job), accuracy_of(clean))

    def test_a_program_whose_model_diverges_fails_the_job_saying_why(self):
        # SGD with learning rate 1e10 on the servers: within a few steps the
        # program pushes NaN gradients, which the shards refuse. The program
        # dies of the exception with exit 1, which alone would be restarted
        # until the backoffLimit; its agent says why.
        path = example_manifest(self.dir, "diverge", 200)
        with open(path) as f:
            text = f.read()
        adam = "    name: adam\n    learningRate: 0.001\n"
        self.assertIn(adam, text)
        with open(path, "w") as f:
            f.write(text.replace(adam, "    name: sgd\n    learningRate: 1e10\n"))
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

    def test_the_example_is_valid(self):
        result = subprocess.run([KUBEPS, "validate", EXAMPLE], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('valid TrainingJob "pytorch-mlp"', result.stdout)


if __name__ == "__main__":
    unittest.main()
