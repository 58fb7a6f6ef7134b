"""A TrainingJob of its own PyTorch program whose workers change while it
trains: examples/pytorch/mlp/trainingjob-elastic.yaml through `kubeps run`
(user_code_job.py), scaled with `kubeps scale` as a user scales it. Two
workers become three at one step and one at a later step: the worker taken
in starts from the servers' parameters of its first step, the two scaled
away leave their loops and the job, and the run ends at the example's
accuracy. The same schedule run again, with a parameter server killed after
the scale-up (the job rolls back to its checkpoint from before the change,
the worker taken in waits again), ends on the same parameters, bit for bit:
each step's examples are the same whoever computes it, and no gradient of a
step is lost or counted twice across the changes and the rollback.
"""
import json
import os
import re
import signal
import subprocess
import unittest

from jobtools import KUBEPS, PACED_FOR_KILLS, wait_for_replica_pid, write_manifest
from user_code_job import (EXAMPLE_DIR, MIN_ACCURACY, STEPS, UserCodeJobCase, accuracy_of,
                           differing_parameters)

ELASTIC_EXAMPLE = os.path.join(EXAMPLE_DIR, "trainingjob-elastic.yaml")
UP_AT, DOWN_AT = 100, 350  # 2 -> 3 workers, then 3 -> 1
# Checkpoints at 90 and 180: a server killed once worker 2 has computed 10
# steps (its first progress line, at 110) rolls the job back to before UP_AT,
# unless the kill lands past 180 on a very slow machine (the bits must agree
# either way).
CHECKPOINTS = {"checkpoint": {"intervalSteps": 90}}
LOG_EVERY = 10


def elastic_manifest(directory, name, save):
    """The elastic example, named `name`, of STEPS steps, rank 0 saving its final
    parameters to `save`, its folder as the container's workingDir."""
    with open(ELASTIC_EXAMPLE) as f:
        text = f.read()
    for old, new in [
            ("name: pytorch-mlp-elastic\n", "name: %s\n" % name),
            ('args: ["--steps", "2000"]', "args: " + json.dumps(
                ["--steps", str(STEPS), "--save", save, "--log-every", str(LOG_EVERY)])),
            ("  batchSize: 64\n", "  batchSize: 64\n  checkpoint: %s\n"
             % json.dumps(CHECKPOINTS["checkpoint"])),
            ("command: [python3, train.py]\n",
             "command: [python3, train.py]\n              workingDir: %s\n" % EXAMPLE_DIR)]:
        assert old in text, old
        text = text.replace(old, new)
    return write_manifest(directory, text, name + ".yaml")


def scale(name, workers, run_dir, at_step):
    done = subprocess.run([KUBEPS, "scale", name, "--workers=%d" % workers,
                           "--at-step=%d" % at_step, "--run-dir=" + run_dir],
                          capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


class UserCodeElasticTest(UserCodeJobCase):
    def scaled_run(self, name, kill=False):
        """The elastic example scaled 2 -> 3 at UP_AT and 3 -> 1 at DOWN_AT, server-1
        killed once worker 2 computes if `kill`: (job, saved)."""
        saved = os.path.join(self.dir, name + ".pt")
        job = self.start(name, elastic_manifest(self.dir, name, saved),
                         env=PACED_FOR_KILLS if kill else None)
        job.wait_for_line(r"\[worker-0/trainer\] rank 0 of 2", timeout=120)
        code, said = scale(name, 3, job.run_dir, UP_AT)
        self.assertEqual(code, 0, said)
        # The third worker computes past the change before the next one is asked
        # for: the run folder keeps one pending change.
        job.wait_for_line(r"\[worker-2/trainer\] step %d/" % (UP_AT + LOG_EVERY), timeout=120)
        if kill:
            os.kill(wait_for_replica_pid(job, "server-1"), signal.SIGKILL)
        code, said = scale(name, 1, job.run_dir, DOWN_AT)
        self.assertEqual(code, 0, said)
        self.assertEqual(job.wait(300), 0, job.output())
        return job, saved

    def test_a_program_scaled_up_and_down_ends_on_the_same_bits_with_a_server_killed(self):
        job, saved = self.scaled_run("scaled")
        output = job.output()
        self.assertIn("workers from step %d: 3" % UP_AT, output)
        self.assertIn("workers from step %d: 1" % DOWN_AT, output)
        # Each worker's program ran the steps it was a member of, and said so
        # every LOG_EVERY steps: worker 2 from UP_AT, workers 1 and 2 up to DOWN_AT.
        for worker, first, last in ((0, 0, STEPS), (1, 0, DOWN_AT), (2, UP_AT, DOWN_AT)):
            logged = [int(m.group(1)) for m in (
                re.match(r"\[worker-%d/trainer\] step (\d+)/" % worker, line)
                for _, line in job.lines) if m]
            self.assertEqual(logged, list(range(first + LOG_EVERY, last + 1, LOG_EVERY)),
                             "worker %d's steps; output:\n%s" % (worker, output))
        for worker in (1, 2):
            self.assertIn("worker %d (worker-%d) left the job: it was scaled away" % (
                worker, worker), output)
            self.assertRegex(output, r"\[worker %d\] left the job at step %d: it was scaled away"
                             % (worker, DOWN_AT))
        self.assertNotIn("restart", output.lower().replace("restartpolicy", ""))
        accuracy = accuracy_of(job)
        print("\nexamples/pytorch/mlp, elastic, 2 -> 3 workers at step %d, 3 -> 1 at %d: test "
              "accuracy %.4f after %d steps" % (UP_AT, DOWN_AT, accuracy, STEPS))
        self.assertGreaterEqual(accuracy, MIN_ACCURACY, output)

        killed, saved_killed = self.scaled_run("killed", kill=True)
        rollbacks = re.findall(r"\[worker 2\] rolled back to step (\d+)", killed.output())
        self.assertTrue(rollbacks, killed.output())
        print("server-1 killed: worker 2 rolled back to step %s (the change at %d)"
              % (rollbacks[0], UP_AT))
        self.assertEqual(differing_parameters(saved, saved_killed), [],
                         "the same schedule with a server killed ended on other parameters")


if __name__ == "__main__":
    unittest.main()
