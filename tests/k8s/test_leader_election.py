"""Two kubeps-operators with --leader-elect on the emulated cluster: one
leads, the other waits; SIGTERM hands the Lease over at once. Its own ctest
entry, apart from test_operator: it mostly waits on the Lease's timers, so it
runs beside a test that computes (tests/CMakeLists.txt).
KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_leader_election   (from tests/k8s)"""
import os
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.client import ApiError  # noqa: E402
from operator_harness import LEASE, Operator, apply, metric, phase_of, training_job  # noqa: E402
from operator_test_case import OperatorTestCase, new_cluster  # noqa: E402


class LeaderElectionTest(OperatorTestCase):
    """Two operators with --leader-elect: one leads, the other waits; SIGTERM
    hands the Lease over at once."""

    def setUp(self):
        self.c = new_cluster()
        self.ops = []
        self.op = None

    def tearDown(self):
        for op in self.ops:
            op.stop()
        self.c.stop()

    def start(self, identity):
        op = Operator(self.c, "--leader-elect", "--leader-election-namespace=kubeps-system",
                      "--identity=" + identity, name=identity)
        self.ops.append(op)
        return op

    def holder(self):
        try:
            return self.c.client.get(LEASE)["spec"].get("holderIdentity")
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def test_one_leader_and_handover(self):
        c = self.c
        a = self.op = self.start("op-a")
        c.wait_for(lambda: self.holder() == "op-a", timeout=45, what="op-a holds the lease")
        b = self.start("op-b")
        c.wait_for(lambda: a.http("/readyz")[0] == 200, timeout=30, what="the leader ready")
        time.sleep(3)   # op-b has tried to take the lease at least once
        self.assertEqual(self.holder(), "op-a")
        self.assertEqual(b.http("/healthz")[0], 200)
        # the standby is ready (healthy, waiting); it does not start its informers
        self.assertEqual(b.http("/readyz")[0], 200)
        self.assertNotIn("caches synced", b.log())
        self.assertIn("leading as op-a", a.log())

        apply(c, training_job("led-by-a"))
        self.wait_phase("led-by-a", "Succeeded", timeout=120)
        self.assertGreater(metric(a.metrics(), "kubeps_operator_reconciles_total"), 0)
        self.assertEqual(metric(b.metrics(), "kubeps_operator_reconciles_total"), 0)
        self.assertNotIn("caches synced", b.log())
        transitions = c.client.get(LEASE)["spec"].get("leaseTransitions", 0)

        # SIGTERM: the leader stops, gives the lease up, the standby takes over
        # well before the lease (15 s) would have expired
        t0 = time.time()
        a.signal(signal.SIGTERM)
        self.assertEqual(a.wait(timeout=45), 0, a.log()[-2000:])
        c.wait_for(lambda: self.holder() == "op-b", timeout=10, what="op-b holds the lease")
        self.assertLess(time.time() - t0, 10)
        self.op = b
        # A standby is ready too (it is healthy); leading shows in its log.
        c.wait_for(lambda: "caches synced" in b.log(), timeout=30, what="op-b leading with synced caches")
        self.assertIn("leading as op-b", b.log())
        self.assertEqual(b.http("/readyz")[0], 200)
        lease = c.client.get(LEASE)["spec"]
        self.assertEqual(lease.get("leaseTransitions"), transitions + 1, lease)

        apply(c, training_job("led-by-b"))
        job = self.wait_phase("led-by-b", "Succeeded", timeout=120)
        self.assertEqual(job["status"]["replicaStatuses"]["worker"]["succeeded"], 2)
        self.assertGreater(metric(b.metrics(), "kubeps_operator_reconciles_total"), 0)
        # the first job, finished under op-a, is left as it was
        self.assertEqual(phase_of(c, "led-by-a"), "Succeeded")


if __name__ == "__main__":
    unittest.main()
