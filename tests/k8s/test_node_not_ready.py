"""The node of a running job goes NotReady (the stand-in's
Cluster.node_not_ready: the kubelet is cut off, its processes run on, the
node is tainted unreachable and its pods are deleted a second later, and,
with no kubelet to finish those deletions, stay Terminating). The operator
sees a pod of the job Terminating past its grace period on a NotReady node
and force-deletes it (gracePeriodSeconds=0, uid precondition) with a
ForceDeletedPod Event, so that its replica's pod can be made again; once
the node is back, the replacements run and the job succeeds.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_node_not_ready   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.client import ApiError  # noqa: E402
from operator_harness import apply, checkpoints_on_host, events_of, training_job  # noqa: E402
from operator_test_case import SharedClusterTestCase  # noqa: E402


class NodeNotReadyTest(SharedClusterTestCase):
    def test_pods_stranded_on_a_lost_node_are_force_deleted_and_the_job_recovers(self):
        name = "stranded"
        job = training_job(name, epochs=20, max_steps=6000, restart_policy="OnFailure",
                           backoff_limit=3)
        checkpoints_on_host(self, job)
        specs = job["spec"]["replicaSpecs"]
        for role in ("ps", "worker"):
            specs[role]["template"]["spec"]["terminationGracePeriodSeconds"] = 2
        apply(self.c, job)
        self.wait_phase(name, "Running", timeout=90)
        self.c.wait_for(lambda: "step " in self.c.kubectl("logs", name + "-worker-0").stdout,
                        timeout=60, what="worker-0 training")
        server = self.c.pod(name + "-server-0")
        self.addCleanup(self.c.node_ready)
        self.c.node_not_ready(evict_after=1)

        def force_deleted():
            return [e for e in events_of(self.c, name) if e["reason"] == "ForceDeletedPod" and
                    e["message"].startswith("pod %s-server-0 " % name)]
        try:
            event = self.c.wait_for(force_deleted, timeout=60, what="server-0 force-deleted")[0]
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))
        self.assertIn("node kubeps-node is unreachable (Ready Unknown: NodeStatusUnknown",
                      event["message"])
        # Gone while the node is still cut off: nothing else would have deleted it.
        try:
            current = self.c.pod(name + "-server-0")
            self.assertNotEqual(current["metadata"]["uid"], server["metadata"]["uid"])
        except ApiError as e:
            self.assertEqual(e.code, 404)
        self.c.node_ready()
        st = self.wait_phase(name, "Succeeded", timeout=240)["status"]
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
