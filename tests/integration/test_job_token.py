"""The job's token as a secret (issue 16), with real binaries: a token file
others can read is refused with a message that names it and its mode, never
its contents; the token file of a running `kubeps run` replaced with a new
token is picked up by every process without a restart, and the job ends as
it would have; neither token appears in the job's output or in any file of
its run folder but the token file."""
import os
import secrets
import signal
import shutil
import subprocess
import tempfile
import unittest

from jobtools import (BIN_DIR, SLOW_NETWORK, RunningJob, manifest, wait_for_replica_pid,
                      wait_for_steps, write_manifest)
from test_scheduler_restart import job_text, scheduler_pid

NAMES = ("scheduler", "server 0", "server 1", "worker 0", "worker 1")


def rotate(token_file):
    """Replaces the token as the kubelet updates a Secret: a new file renamed
    over the old. Returns (old token, new token)."""
    with open(token_file) as f:
        old = f.read().strip()
    new = secrets.token_hex(16)
    tmp = token_file + ".new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (new + "\n").encode())
    os.close(fd)
    os.rename(tmp, token_file)
    return old, new


class JobTokenTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-test-token-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_a_token_file_others_can_read_is_refused(self):
        path = os.path.join(self.dir, "token")
        with open(path, "w") as f:
            f.write("do-not-print-me\n")
        os.chmod(path, 0o644)
        for binary, role in (("kubeps-server", "scheduler"), ("kubeps-server", "server"),
                             ("kubeps-agent", "worker")):
            env = dict(os.environ, KUBEPS_ROLE=role, KUBEPS_TOKEN_FILE=path)
            result = subprocess.run([os.path.join(BIN_DIR, binary)], env=env, capture_output=True,
                                    text=True, timeout=30)
            out = result.stdout + result.stderr
            self.assertNotEqual(result.returncode, 0, out)
            self.assertIn("KUBEPS_TOKEN_FILE: token file %s: mode 0644 lets other users read or "
                          "change the job's token; make it 0600 or 0400" % path, out)
            self.assertNotIn("do-not-print-me", out)

    def test_a_replaced_token_file_reaches_every_process_of_a_running_job(self):
        # 300 steps on a slow network (some 11 s): time for every process
        # to see the new token.
        path = write_manifest(self.dir, manifest("rotate"))
        run_dir = os.path.join(self.dir, "run")
        job = RunningJob(path, run_dir=run_dir, args=["--keep-run-dir"],
                         env=dict(SLOW_NETWORK, KUBEPS_MAX_STEPS="300"))
        try:
            job.wait_for_line(r"\[worker 0\] epoch 1/1 step", timeout=120)
            token_file = os.path.join(run_dir, "token")
            old, new = rotate(token_file)
            self.assertEqual(job.wait(timeout=300), 0, job.output())
        finally:
            job.close()
        out = job.output()
        for name in NAMES:
            self.assertIn("[%s] the job's token changed" % name, out)
        self.assertNotIn("restarting", out.lower())
        self.assertIn("test accuracy", out)
        texts = {"the job's output": out}
        for root, _, files in os.walk(run_dir):
            for f in files:
                path = os.path.join(root, f)
                if path != token_file:
                    with open(path, "rb") as file:
                        texts[path] = file.read().decode(errors="replace")
        for where, text in texts.items():
            self.assertNotIn(old, text, where)
            self.assertNotIn(new, text, where)

    def test_a_rotated_token_holds_through_sigterms_a_scheduler_restart_and_a_second_run(self):
        """What a cluster does around a rotation: the scheduler, then a server, stopped by
        SIGTERM (eviction, drain) and restarted, reading the new token while the others
        still hold the old one too; then the same job run again over its checkpoints."""
        path = write_manifest(self.dir, job_text("rotate-faults"))
        run_dir = os.path.join(self.dir, "run")
        job = RunningJob(path, run_dir=run_dir, args=["--keep-run-dir"],
                         env=dict(SLOW_NETWORK, KUBEPS_MAX_STEPS="300"))
        try:
            wait_for_steps(job, 0, 20)
            rotate(os.path.join(run_dir, "token"))
            for name in NAMES:
                job.wait_for_line(r"\[%s\] the job's token changed" % name, timeout=60)
            scheduler = scheduler_pid(job)
            os.kill(scheduler, signal.SIGTERM)
            job.wait_for_line(r"scheduler-0 exited with code 143; restarting it", timeout=60)
            wait_for_steps(job, 0, 70)
            os.kill(wait_for_replica_pid(job, "server-0"), signal.SIGTERM)
            self.assertEqual(job.wait(timeout=300), 0, job.output())
        finally:
            job.close()
        out = job.output()
        self.assertIn("server-0 exited with code 143; restarting it", out)
        self.assertNotIn("UNAUTHENTICATED", out)
        self.assertNotIn("wrong job token", out)
        # Run again over the same run folder (its checkpoints), with a token of its own.
        again = RunningJob(path, run_dir=run_dir, args=["--keep-run-dir"],
                           env={"KUBEPS_MAX_STEPS": "350"})
        try:
            self.assertEqual(again.wait(timeout=300), 0, again.output())
        finally:
            again.close()
        self.assertIn("test accuracy", again.output())
        self.assertNotIn("wrong job token", again.output())


if __name__ == "__main__":
    unittest.main()
