"""The base of the operator's tests against the emulated cluster: a cluster
with the CRD and RBAC applied (new_cluster), and test cases that show the
operator's log, the pods and their output when an assertion fails, one with
a cluster and operator shared by a class's tests. Jobs are kept short: the
cluster passes KUBEPS_MAX_STEPS=100 to every pod, and jobs that must run
longer set KUBEPS_MAX_STEPS in their worker pod template."""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator import realism  # noqa: E402
from emulator.cluster import Cluster  # noqa: E402
from operator_harness import (BIN, DEPLOY, Operator, get_job, kubelet_output,  # noqa: E402
                              replica_pids, wait_phase)

MAX_STEPS = "100"


def new_cluster(**kwargs):
    os.environ["KUBEPS_MAX_STEPS"] = MAX_STEPS
    c = Cluster(bin_dirs=[BIN], rbac=True, stream_logs=True, pass_env=["KUBEPS_MAX_STEPS"],
                backoff=0.3, realism=realism.wanted(), **kwargs).start()
    try:
        c.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/",
                  "-f", os.path.join(DEPLOY, "rbac") + "/")
    except Exception:
        c.stop()
        raise
    return c


class OperatorTestCase(unittest.TestCase):
    c = None
    op = None

    def diag(self, job=None):
        """What a failing assertion should show: the operator's log, the pods,
        and what the containers of `job`'s pods printed."""
        parts = []
        if self.op is not None:
            parts.append("--- operator log (tail)\n" + self.op.log()[-4000:])
        try:
            parts.append("--- pods\n" + self.c.kubectl("get", "pods", "-o", "wide").stdout)
            if job:
                parts.append("--- status of %s\n%s" % (job, json.dumps(
                    get_job(self.c, job).get("status"), indent=1)))
                # Every container's output, also of pods deleted since, less
                # the progress lines.
                lines = [line for line in kubelet_output(self.c).splitlines()
                         if job in line and " epoch " not in line]
                parts.append("--- the pods' output\n" + "\n".join(lines[-80:]))
        except Exception as e:   # diagnostics only
            parts.append("(no more diagnostics: %s)" % e)
        return "\n".join(parts)

    def wait_phase(self, name, phases, timeout=120):
        try:
            return wait_phase(self.c, name, phases, timeout)
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))

    def wait_running_pid(self, job, node_id, timeout=90):
        """Waits until replica `node_id` of `job` runs; returns its process id."""
        try:
            pids = self.c.wait_for(lambda: replica_pids(self.c, job, node_id), timeout=timeout,
                                   what="the process of %s %s" % (job, node_id))
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(job)))
        self.assertEqual(len(pids), 1, pids)
        return pids[0]

    def delete_job(self, name):
        self.c.kubectl("delete", "tj", name, "--ignore-not-found", "--wait=false")


class SharedClusterTestCase(OperatorTestCase):
    """One cluster and one operator (no leader election) for the class's jobs."""
    @classmethod
    def setUpClass(cls):
        cls.c = new_cluster()
        try:
            cls.op = Operator(cls.c)
        except Exception:
            cls.c.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.op.stop()
        cls.c.stop()
