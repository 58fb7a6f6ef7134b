"""Starts a real `kubeps-agent --serve` for the client's tests: KUBEPS_TEST_AGENT_CMD's command.

A one-worker job on loopback: the scheduler, one parameter server and the
agent, as `kubeps run` would start them, the agent serving in
$KUBEPS_SOCKET_DIR.  The job's optimizer, learning rate and mode come from
$KUBEPS_TEST_OPTIMIZER, $KUBEPS_TEST_LEARNING_RATE, $KUBEPS_TEST_MODE and
$KUBEPS_TEST_NON_FINITE (set by agent_fixture.py); the binaries from
$KUBEPS_BIN_DIR (default build/bin).

    KUBEPS_TEST_AGENT_CMD="python3 tests/python/real_agent.py" \\
        /usr/bin/python3 -m unittest test_client test_torch   # in tests/python

Exits with the agent's exit status (0 after the client's finish); SIGTERM
stops the three processes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from jobtools import read_ports  # noqa: E402  (the ports file's reader of the local runs' tests)
DEFAULT_BIN_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "bin")


def start_scheduler(server, env):
    """Starts the scheduler on a port of the kernel's choosing; (its process,
    that port), read from the ports file it publishes in a run folder (a port
    found free first and passed on could be taken by then)."""
    run_dir = tempfile.mkdtemp(prefix="kubeps-real-agent-")
    scheduler = subprocess.Popen([server, "--role=scheduler", "--node-id=scheduler", "--port=0"],
                                 env=dict(env, KUBEPS_RUN_DIR=run_dir))
    deadline = time.time() + 30
    try:
        while (ports := read_ports(run_dir, "scheduler")) is None:
            if scheduler.poll() is not None or time.time() > deadline:
                scheduler.kill()
                sys.exit("the scheduler published no port (exit status %s)" % scheduler.wait())
            time.sleep(0.02)
        return scheduler, ports[0]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main():
    socket_dir = os.environ["KUBEPS_SOCKET_DIR"]
    bin_dir = os.environ.get("KUBEPS_BIN_DIR", DEFAULT_BIN_DIR)
    job = {
        "apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "pyclient-test"},
        "spec": {
            "mode": os.environ.get("KUBEPS_TEST_MODE", "sync"),
            "optimizer": {"name": os.environ.get("KUBEPS_TEST_OPTIMIZER", "sgd"),
                          "learningRate": float(os.environ.get("KUBEPS_TEST_LEARNING_RATE",
                                                               "0.5"))},
            "nonFinite": os.environ.get("KUBEPS_TEST_NON_FINITE", "Fail"),
            # The job's own program (the client under test), not a built-in model.
            "replicaSpecs": {"ps": {"replicas": 1}, "worker": {"replicas": 1, "template": {
                "spec": {"containers": [{"name": "worker", "image": "the-tests",
                                         "command": ["python3", "-m", "unittest"]}]}}}},
        },
    }
    env = dict(os.environ, KUBEPS_JOB=json.dumps(job), KUBEPS_JOB_NAME="pyclient-test",
               KUBEPS_NUM_SERVERS="1", KUBEPS_NUM_WORKERS="1")
    server = os.path.join(bin_dir, "kubeps-server")
    scheduler, port = start_scheduler(server, env)
    env["KUBEPS_SCHEDULER_ADDR"] = "127.0.0.1:%d" % port
    children = [scheduler, subprocess.Popen([server, "--role=server", "--node-id=ps-0"], env=env)]
    agent = subprocess.Popen([os.path.join(bin_dir, "kubeps-agent"), "--role=worker",
                              "--node-id=worker-0", "--serve", "--socket-dir=%s" % socket_dir],
                             env=env)
    children.append(agent)

    def stop(*unused):
        for child in reversed(children):
            if child.poll() is None:
                child.terminate()
    signal.signal(signal.SIGTERM, stop)
    code = agent.wait()
    stop()
    for child in children:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
    sys.exit(code)


if __name__ == "__main__":
    main()
