"""A worker restarted on a node whose clock is behind the old one's (a pod
rescheduled to another node, an NTP step). Before, incarnations were
wall-clock nanoseconds and a shard kept the highest one it had seen: the new
life's pushes were taken for late duplicates of the dead one, answered OK
and never applied, and the sync job hung. Incarnations are now random and
the scheduler's view says which life is current: the job completes with the
parameters of a run without the restart.

The restarted worker runs under libfaketime (Debian's faketime) with its
wall clock an hour behind: the test fails on the old code with the issue's
"still waiting for version N ... (a peer is slow or restarting)"."""
import glob
import os
import shutil
import signal
import stat
import tempfile
import time
import unittest

from jobtools import (BIN_DIR, PACED_FOR_KILLS, RunningJob, read_floats, run_job,
                      wait_for_replica_pid, wait_for_steps, write_manifest)
from test_scheduler_restart import STEPS, job_text

LIBFAKETIME = (glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + [None])[0]

# worker-1's lives after the marker file exists run an hour behind (only the
# wall clock: the monotonic one drives no identity, and stays). The library
# is preloaded by hand, as the faketime command would, so that the agent
# stays the one process of its replica.
AGENT_WRAPPER = """#!/bin/sh
if [ "$KUBEPS_NODE_ID" = worker-1 ] && [ -e "%(marker)s" ]; then
  export LD_PRELOAD="%(library)s" FAKETIME=-1h DONT_FAKE_MONOTONIC=1
fi
exec "%(agent)s" "$@"
"""


def environment_after_exec(pid, binary, timeout=30):
    """The environment of process `pid` once it runs `binary`. Until the
    wrapper execs the agent, /proc's environ is the shell's, without the
    variables it exports (the test once read it in that window and failed).
    Inside exec, /proc's exe already names the new binary while the new
    memory's environment is not yet laid out, and environ reads empty (the
    test failed so once under load): it is read until it is not."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if os.readlink("/proc/%d/exe" % pid) == os.path.realpath(binary):
                with open("/proc/%d/environ" % pid, "rb") as f:
                    variables = [v for v in f.read().split(b"\0") if v]
                if variables:
                    return variables
        except OSError:
            pass
        time.sleep(0.01)
    raise AssertionError("process %d never ran %s with an environment" % (pid, binary))


@unittest.skipUnless(LIBFAKETIME, "needs libfaketime (scripts/install-deps.sh installs faketime)")
class ClockBehindTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-clock-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def bin_dir_with_wrapped_agent(self, marker):
        """kubeps runs the replicas' binaries from its own folder: a copy of
        it beside the real server and the wrapped agent."""
        bin_dir = os.path.join(self.dir, "bin")
        os.mkdir(bin_dir)
        shutil.copy2(os.path.join(BIN_DIR, "kubeps"), bin_dir)
        os.symlink(os.path.join(BIN_DIR, "kubeps-server"), os.path.join(bin_dir, "kubeps-server"))
        agent = os.path.join(bin_dir, "kubeps-agent")
        with open(agent, "w") as f:
            f.write(AGENT_WRAPPER % {"marker": marker, "library": LIBFAKETIME,
                                     "agent": os.path.join(BIN_DIR, "kubeps-agent")})
        os.chmod(agent, stat.S_IRWXU)
        return bin_dir

    def test_a_worker_restarted_with_its_clock_behind_has_its_pushes_applied(self):
        clean_dump = os.path.join(self.dir, "clean.bin")
        code, clean = run_job(write_manifest(self.dir, job_text("clean"), "clean.yaml"),
                              env={"KUBEPS_DUMP_PARAMS": clean_dump,
                                   "KUBEPS_MAX_STEPS": str(STEPS)})
        self.assertEqual(code, 0, clean.output())

        marker = os.path.join(self.dir, "clock-behind")
        bin_dir = self.bin_dir_with_wrapped_agent(marker)
        dump = os.path.join(self.dir, "behind.bin")
        job = RunningJob(write_manifest(self.dir, job_text("behind"), "behind.yaml"),
                         env=dict(PACED_FOR_KILLS, KUBEPS_DUMP_PARAMS=dump,
                                  KUBEPS_MAX_STEPS=str(STEPS)),
                         kubeps=os.path.join(bin_dir, "kubeps"))
        self.addCleanup(job.close)
        wait_for_steps(job, 1, 150)
        old = wait_for_replica_pid(job, "worker-1")
        open(marker, "w").close()
        os.kill(old, signal.SIGKILL)
        restarted = wait_for_replica_pid(job, "worker-1", exclude=[old])
        self.assertIn(b"FAKETIME=-1h",
                      environment_after_exec(restarted, os.path.join(BIN_DIR, "kubeps-agent")),
                      "the restarted worker does not run an hour behind")

        # Before the fix the job hung here: every push of the new life was
        # answered OK and dropped.
        self.assertEqual(job.wait(180), 0, job.output())
        self.assertIn("worker-1 exited with code 137; restarting it", job.output())
        self.assertEqual(read_floats(dump), read_floats(clean_dump),
                         "parameters differ from the run without the restart")


if __name__ == "__main__":
    unittest.main()
