"""A node drained mid-job with the real `kubectl drain`: the node is
cordoned, a server's pod is evicted through the Eviction API (the pod gets
the condition DisruptionTarget, then its grace period), and the operator
says so in an Event (PodEvicted) and re-creates the replica, which waits,
unschedulable, while the only node is cordoned, and starts from the
server's checkpoint once it is uncordoned; the job succeeds.

And the node's machine rebooted mid-job, with the kubelet's graceful node
shutdown: every pod ends Failed with DisruptionTarget (TerminationByKubelet)
and is not deleted. Under restartPolicy Never the job goes on: each replica
is made again without counting as a restart, and resumes from the
checkpoints; a worker bound to the node by its template and made again while
the node shuts down is refused (NodeShutdown), and made again once more.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_node_drain   (from tests/k8s)
"""
import glob
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (apply, checkpoints_on_host, events_of, job_pods,  # noqa: E402
                              live_pod, replica_key, training_job)
from operator_test_case import SharedClusterTestCase  # noqa: E402
from test_role_restarts import MAX_STEPS  # noqa: E402

NODE = "kubeps-node"


class NodeDrainTest(SharedClusterTestCase):
    def live_pod(self, job, role, index=0):
        return live_pod(self.c, job, role, index)

    def test_a_drained_server_is_evicted_and_recovered_from_its_checkpoint(self):
        name = "drained"
        job = training_job(name, epochs=20, max_steps=MAX_STEPS, restart_policy="OnFailure",
                           backoff_limit=3)
        checkpoints_on_host(self, job)
        apply(self.c, job)
        self.wait_phase(name, "Running", timeout=90)
        self.c.wait_for(lambda: "step " in self.c.kubectl("logs", name + "-worker-0").stdout,
                        timeout=60, what="worker-0 training")
        old = self.live_pod(name, "server")
        self.addCleanup(self.c.kubectl, "uncordon", NODE)
        out = self.c.kubectl(
            "drain", NODE, "--pod-selector=kubeps.io/job-name=%s,kubeps.io/replica-type=server,"
            "kubeps.io/replica-index=0" % name, "--ignore-daemonsets", "--delete-emptydir-data",
            "--timeout=60s")
        self.assertIn("evicting pod default/%s" % old["metadata"]["name"],
                      out.stdout + out.stderr)
        self.assertIn("node/%s drained" % NODE, out.stdout)
        try:
            evicted = self.c.wait_for(lambda: [e for e in events_of(self.c, name)
                                               if e["reason"] == "PodEvicted"], timeout=20,
                                      what="a PodEvicted event")[0]
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))
        self.assertIn("pod %s (server-0) is being evicted (EvictionByEvictionAPI" %
                      old["metadata"]["name"], evicted["message"])
        # The replacement waits while the only node is cordoned.
        self.c.wait_for(lambda: self.live_pod(name, "server") and any(
            x.get("reason") == "Unschedulable" for x in
            self.live_pod(name, "server")["status"].get("conditions", [])), timeout=30,
            what="the replacement unschedulable on the cordoned node")
        self.c.kubectl("uncordon", NODE)
        new = self.c.wait_for(lambda: (self.live_pod(name, "server") or {}).get(
            "status", {}).get("podIP") and self.live_pod(name, "server"), timeout=60,
            what="the replacement running")
        st = self.wait_phase(name, "Succeeded", timeout=240)["status"]
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.assertIn("rolled back to the checkpoint of step",
                      self.c.kubectl("logs", new["metadata"]["name"]).stdout)
        self.delete_job(name)

    def test_a_node_reboot_ends_every_pod_and_the_job_resumes_under_restart_policy_never(self):
        name = "rebooted"
        job = training_job(name, epochs=20, max_steps=MAX_STEPS, restart_policy="Never",
                           backoff_limit=0)
        folder = checkpoints_on_host(self, job)
        # Bound to the node by their template, the workers made again while
        # it shuts down are refused (NodeShutdown): made again, not counted,
        # once the back-off has passed.
        job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["nodeName"] = NODE
        # A pod slow to stop keeps the shutdown going for its grace period.
        apply(self.c, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow-to-stop"},
                       "spec": {"terminationGracePeriodSeconds": 5, "restartPolicy": "Never",
                                "containers": [{"name": "main", "image": "busybox:1.36",
                                                "command": ["/bin/sh", "-c",
                                                            "trap '' TERM; sleep 600"]}]}})
        self.addCleanup(self.c.kubectl, "delete", "pod", "slow-to-stop", "--wait=false",
                        "--ignore-not-found")
        apply(self.c, job)
        self.wait_phase(name, "Running", timeout=90)
        old = self.live_pod(name, "worker")
        # Both shards past a checkpoint, which the job resumes from.
        self.c.wait_for(lambda: all(any(f != "step-%020d.ckpt" % 0 for f in glob.glob1(
            os.path.join(folder, shard), "step-*.ckpt")) for shard in ("server-0", "server-1")),
            timeout=60, what="a checkpoint of each shard")
        self.c.reboot_node()
        try:
            ended = self.c.wait_for(lambda: [e for e in events_of(self.c, name)
                                             if e["reason"] == "PodEvicted" and
                                             old["metadata"]["name"] in e["message"]],
                                    timeout=30, what="a PodEvicted event for worker-0")[0]
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))
        self.assertIn("pod %s (worker-0) was ended by its node (TerminationByKubelet: Pod was "
                      "terminated in response to imminent node shutdown.); it is made again, "
                      "not counted as a restart" % old["metadata"]["name"], ended["message"])
        refused = self.c.wait_for(lambda: [e for e in events_of(self.c, name)
                                           if e["reason"] == "PodRefused"],
                                  timeout=30, what="a worker refused as the node shut down")[0]
        self.assertRegex(refused["message"], r"\(worker-[01]\) was refused by its node "
                         r"\(NodeShutdown: Pod was rejected: Pod was rejected as the node is "
                         r"shutting down\.\); it is made again, not counted as a restart")
        job = self.wait_phase(name, "Succeeded", timeout=240)
        st = job["status"]
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        for role in ("scheduler", "ps", "worker"):
            self.assertEqual(st["replicaStatuses"][role].get("restarts", 0), 0, st)
        finished = [p for p in job_pods(self.c, name) if replica_key(p) == ("worker", "0")
                    and p["status"]["phase"] == "Succeeded"]
        self.assertEqual(len(finished), 1, [p["metadata"]["name"] for p in finished])
        logs = self.c.kubectl("logs", finished[0]["metadata"]["name"]).stdout
        self.assertRegex(logs, r"resuming from step [1-9]")
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
