"""Tests of the Kubernetes emulator's pods that cannot start, as a real
cluster has them: an image no registry has (ErrImagePull, then
ImagePullBackOff), a reference that does not parse (InvalidImageName), a pod
no node can take (PodScheduled False, Unschedulable), and
terminationMessagePolicy FallbackToLogsOnError.

    python3 -m unittest -v test_emulator_pod_start      (from tests/k8s)
"""
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import Cluster  # noqa: E402
from emulator.kubelet.images import pull_error  # noqa: E402
from emulator.kubelet.scheduling import pod_requests, unschedulable_message  # noqa: E402


def pod(name, image="busybox:1.36", script="sleep 30", **spec):
    body = {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": image, "command": ["/bin/sh", "-c", script]}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def waiting(p):
    return p["status"]["containerStatuses"][0]["state"].get("waiting", {})


class EmulatorPodStartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(backoff=0.3, missing_images=["kubeps/agent:gone*"]).start()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def apply(self, obj):
        self.c.kubectl("apply", "-f", "-", input=json.dumps(obj))
        self.addCleanup(self.c.kubectl, "delete", "pod", obj["metadata"]["name"], "--wait=false",
                        "--ignore-not-found")

    def test_an_image_no_registry_has_fails_to_pull_then_backs_off(self):
        c = self.c
        self.apply(pod("no-image", image="registry.invalid/team/agent:1"))
        def in_state(reason):   # one read: the pod may move on between two
            p = c.pod("no-image")
            return waiting(p).get("reason") == reason and p
        first = c.wait_for(lambda: in_state("ErrImagePull"), what="ErrImagePull")
        self.assertIn('"registry.invalid/team/agent:1"', waiting(first)["message"])
        self.assertIn("no such host", waiting(first)["message"])
        then = c.wait_for(lambda: in_state("ImagePullBackOff"), what="ImagePullBackOff")
        self.assertEqual(waiting(then)["message"],
                         'Back-off pulling image "registry.invalid/team/agent:1"')
        self.assertEqual(then["status"]["phase"], "Pending")
        line = c.kubectl("get", "pod", "no-image").stdout.splitlines()[1].split()
        self.assertIn(line[2], ("ErrImagePull", "ImagePullBackOff"))

    def test_a_missing_image_setting_and_an_invalid_reference(self):
        c = self.c
        self.apply(pod("gone-image", image="kubeps/agent:gone-1"))
        self.apply(pod("bad-name", image="Kubeps/Agent:1"))
        c.wait_for(lambda: waiting(c.pod("gone-image")).get("reason") in (
            "ErrImagePull", "ImagePullBackOff"), what="a failed pull")
        bad = c.wait_for(lambda: waiting(c.pod("bad-name")).get("reason") == "InvalidImageName"
                         and c.pod("bad-name"), what="InvalidImageName")
        self.assertIn('couldn\'t parse image name "Kubeps/Agent:1"', waiting(bad)["message"])
        self.assertIsNone(pull_error("kubeps/agent:0.1.0", ["kubeps/agent:gone*"]))
        self.assertIsNone(pull_error("localhost:5000/x/y@sha256:" + "a" * 64, []))

    def test_a_pod_no_node_can_take_stays_pending_unschedulable(self):
        c = self.c
        self.apply(pod("no-node", nodeSelector={"accelerator": "tpu-v5"}))
        self.apply(pod("too-big", containers=[{
            "name": "main", "image": "busybox", "command": ["/bin/sh", "-c", "sleep 30"],
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]))

        def unschedulable(name):
            conditions = c.pod(name)["status"].get("conditions", [])
            return [x for x in conditions if x["type"] == "PodScheduled" and
                    x["status"] == "False" and x["reason"] == "Unschedulable"]
        condition = c.wait_for(lambda: unschedulable("no-node"), what="Unschedulable")[0]
        self.assertIn("0/1 nodes are available: 1 node(s) didn't match Pod's node "
                      "affinity/selector.", condition["message"])
        condition = c.wait_for(lambda: unschedulable("too-big"), what="Unschedulable")[0]
        self.assertIn("1 Insufficient nvidia.com/gpu", condition["message"])
        self.assertNotIn("nodeName", c.pod("no-node")["spec"])
        self.assertEqual(c.pod("no-node")["status"]["phase"], "Pending")
        # The node gains the label: the scheduler's retry binds the pod.
        c.kubectl("label", "node", "kubeps-node", "accelerator=tpu-v5")
        self.addCleanup(c.kubectl, "label", "node", "kubeps-node", "accelerator-")
        c.wait_for(lambda: c.pod("no-node")["status"]["phase"] == "Running", timeout=30,
                   what="Running once the node has the label")

    def test_requests_are_summed_as_the_scheduler_does(self):
        spec = {"containers": [{"resources": {"requests": {"cpu": "500m"}}},
                               {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
                "initContainers": [{"resources": {"requests": {"cpu": "2"}}},
                                   {"restartPolicy": "Always",
                                    "resources": {"requests": {"cpu": "250m"}}}]}
        self.assertEqual(pod_requests(spec), {"cpu": 2.0, "memory": 2 ** 30})
        node = {"metadata": {"labels": {}}, "status": {"allocatable": {"cpu": "2"}}}
        self.assertIsNone(unschedulable_message({"containers": [{}]}, node))
        self.assertIn("1 Insufficient memory", unschedulable_message(spec, node))

    def test_fallback_to_logs_on_error_makes_the_logs_tail_the_message(self):
        c = self.c
        script = ("for i in $(seq 1 100); do echo line $i; done; "
                  "echo 'FileNotFoundError: /x'; exit 2")
        failing = pod("fallback", script=script)
        failing["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
        quiet = pod("no-fallback", script=script)
        ok = pod("fallback-ok", script="echo fine")
        ok["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
        for p in (failing, quiet, ok):
            self.apply(p)

        def terminated(name):
            p = c.pod(name)
            return p["status"]["phase"] in ("Succeeded", "Failed") and \
                p["status"]["containerStatuses"][0]["state"]["terminated"]
        message = c.wait_for(lambda: terminated("fallback"), what="ended")["message"]
        lines = message.splitlines()
        self.assertEqual(lines[-1], "FileNotFoundError: /x")
        self.assertEqual(len(lines), 80)
        self.assertEqual(lines[0], "line 22")
        self.assertLessEqual(len(message.encode()), 2048)
        self.assertNotIn("message", c.wait_for(lambda: terminated("no-fallback"), what="ended"))
        self.assertNotIn("message", c.wait_for(lambda: terminated("fallback-ok"), what="ended"))


class PodDeletedBeforeTheNodeSawItTest(unittest.TestCase):
    """A bound pod marked for deletion before the kubelet first lists it (the
    kubelet was down, or relisted after losing its watch) is deleted without
    running: no later event tells the kubelet, which once started it and left
    it with its deletionTimestamp for good (Pending, ContainerCreating, when
    its secret had gone with its job)."""

    def test_it_is_deleted_and_never_runs(self):
        c = Cluster(kubelet=False).start()
        self.addCleanup(c.stop)
        ran = os.path.join(c.dir, "ran")
        c.client.post("/api/v1/namespaces/default/pods",
                      pod("early", script="touch %s; sleep 30" % ran, nodeName="kubeps-node"))
        # bound and not finished: the API server only marks it, the node deletes it
        c.client.delete("/api/v1/namespaces/default/pods/early")
        self.assertTrue(c.pod("early")["metadata"].get("deletionTimestamp"))
        c.start_kubelet()
        c.wait_for(lambda: not any(p["metadata"]["name"] == "early" for p in c.client.get(
            "/api/v1/namespaces/default/pods")["items"]), timeout=20, what="the pod deleted")
        self.assertFalse(os.path.exists(ran), "the container of a deleted pod ran")


if __name__ == "__main__":
    unittest.main()
