"""The agent under test, as a fixture: the fake agent by default, a real one on request.

Every client test gets its agent from `start_agent(test, **options)`, never
from FakeAgent directly, so the same tests run against the real
`kubeps-agent --serve` once it exists: set KUBEPS_TEST_AGENT_CMD to a shell
command that starts an agent serving in $KUBEPS_SOCKET_DIR for a one-worker
job (one server, the servers' optimizer $KUBEPS_TEST_OPTIMIZER with learning
rate $KUBEPS_TEST_LEARNING_RATE, mode $KUBEPS_TEST_MODE, spec.nonFinite
$KUBEPS_TEST_NON_FINITE) and keeps running
until the session finishes or it is sent SIGTERM (real_agent.py is such a
command: a one-worker job on loopback).  Tests that need what only
the fake can do (read its request log, arm a rollback, hold a barrier, start
from preset server values) are marked @requires_fake and skip there.

Importing this module also makes the source tree's `python/` importable, so
the tests run the tree's kubeps without installing it.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON_SOURCE = os.path.join(SOURCE_ROOT, "python")
if PYTHON_SOURCE not in sys.path:
    sys.path.insert(0, PYTHON_SOURCE)

from fake_agent import FakeAgent  # noqa: E402

AGENT_CMD_ENV = "KUBEPS_TEST_AGENT_CMD"
# The options both kinds of agent take; the rest are the fake's alone.
SHARED_OPTIONS = {"optimizer": "sgd", "learning_rate": 0.5, "mode": "sync", "non_finite": "Fail"}


def using_fake():
    return not os.environ.get(AGENT_CMD_ENV)


def requires_fake(test):
    """For tests that use what only the fake agent offers."""
    return unittest.skipUnless(using_fake(), "needs the fake agent's controls (%s is set)"
                               % AGENT_CMD_ENV)(test)


def make_socket_dir(test):
    # A short path under /tmp: a Unix socket's path is limited to 107 bytes.
    socket_dir = tempfile.mkdtemp(prefix="kubeps-agent-", dir="/tmp")
    test.addCleanup(shutil.rmtree, socket_dir, True)
    return socket_dir


class AgentUnderTest:
    """A running agent: `socket_dir` to connect to, `fake` (the FakeAgent) or None."""

    def __init__(self, socket_dir, fake=None, process=None):
        self.socket_dir = socket_dir
        self.fake = fake
        self.process = process

    def stop(self):
        if self.fake is not None:
            self.fake.stop()
        if self.process is not None and self.process.poll() is None:
            # The command's own process group: the shell and whatever it started.
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_agent(test, **options):
    """Starts the agent under test in a new directory; stopped when the test ends."""
    socket_dir = make_socket_dir(test)
    if using_fake():
        agent = AgentUnderTest(socket_dir, fake=FakeAgent(socket_dir, **options).start())
    else:
        fake_only = set(options) - set(SHARED_OPTIONS)
        if fake_only:
            test.skipTest("options %s need the fake agent" % sorted(fake_only))
        settings = dict(SHARED_OPTIONS, **options)
        env = dict(os.environ, KUBEPS_SOCKET_DIR=socket_dir,
                   KUBEPS_TEST_OPTIMIZER=settings["optimizer"],
                   KUBEPS_TEST_LEARNING_RATE=str(settings["learning_rate"]),
                   KUBEPS_TEST_MODE=settings["mode"],
                   KUBEPS_TEST_NON_FINITE=settings["non_finite"])
        process = subprocess.Popen(os.environ[AGENT_CMD_ENV], shell=True, env=env,
                                   start_new_session=True)
        agent = AgentUnderTest(socket_dir, process=process)
    test.addCleanup(agent.stop)
    return agent


def client_environment(**extra):
    """The environment for a client subprocess: the tree's kubeps on its path."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_SOURCE, HERE,
                                                    env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def reset_kubeps():
    """Ends this process's kubeps session, if any, so the next test starts afresh."""
    import kubeps
    try:
        kubeps.shutdown()
    finally:
        kubeps._finished = False
    if "kubeps.torch" in sys.modules:
        sys.modules["kubeps.torch"]._forget()
