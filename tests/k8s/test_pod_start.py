"""A TrainingJob whose pods cannot start, or whose worker fails at once, on
the emulated cluster with the real operator and kubectl: the job's status
says why (a condition naming the pod and the reason, an Event), and under
runPolicy.podStartTimeoutSeconds the job fails instead of staying Created
forever. A pod its node's kubelet rejects before it runs is made again, even
under restartPolicy Never, until the backoffLimit.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_pod_start   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (apply, condition, events_of, get_job,  # noqa: E402
                              training_job)
from operator_test_case import SharedClusterTestCase  # noqa: E402

MISSING_IMAGE = "registry.invalid/kubeps/agent:1"


def small_job(name, start_timeout=None, **kwargs):
    """One server, one worker: enough to show a pod that cannot start."""
    job = training_job(name, max_steps=20, workers=1, servers=1, **kwargs)
    if start_timeout is not None:
        job["spec"].setdefault("runPolicy", {})["podStartTimeoutSeconds"] = start_timeout
    return job


def with_worker_image(job, image):
    template = job["spec"]["replicaSpecs"]["worker"].setdefault("template", {"spec": {
        "containers": [{"name": "worker"}]}})
    template["spec"]["containers"][0]["image"] = image
    return job


class PodStartTest(SharedClusterTestCase):
    def failed_condition(self, name):
        job = self.wait_phase(name, "Failed", timeout=90)
        failed = condition(job, "Failed")
        self.assertIsNotNone(failed, self.diag(name))
        return failed

    def test_an_image_that_cannot_be_pulled_fails_the_job_after_the_timeout(self):
        name = "pull-fails"
        apply(self.c, with_worker_image(small_job(name, start_timeout=3), MISSING_IMAGE))
        failed = self.failed_condition(name)
        self.assertEqual(failed["reason"], "ImagePullFailed", failed)
        self.assertIn("worker-0 (pod %s-worker-0) could not start within podStartTimeoutSeconds "
                      "(3 s)" % name, failed["message"])
        self.assertIn(MISSING_IMAGE, failed["message"])
        # The Failed condition and its Event are two writes: the Event may
        # land a moment after the condition is read.
        def events_once_failed():
            events = events_of(self.c, name)
            return any(e["reason"] == "ImagePullFailed" for e in events) and events
        events = self.c.wait_for(events_once_failed, timeout=30,
                                 what="an ImagePullFailed event on %s" % name)
        pull_events = [e for e in events if e["reason"] in ("ErrImagePull", "ImagePullBackOff")]
        self.assertTrue(pull_events, [e["reason"] for e in events])
        self.assertIn("pod %s-worker-0 (worker-0) cannot start" % name,
                      pull_events[0]["message"])
        self.assertIn("ImagePullFailed", [e["reason"] for e in events])
        described = self.c.kubectl("describe", "tj", name).stdout
        self.assertIn("ImagePullFailed", described)
        self.delete_job(name)

    def test_without_a_timeout_the_job_waits_and_says_why(self):
        name = "pull-waits"
        apply(self.c, with_worker_image(small_job(name), MISSING_IMAGE))

        def created_because_of_the_image():
            created = condition(get_job(self.c, name), "Created")
            return created and created["reason"] in ("ErrImagePull", "ImagePullBackOff") and created
        created = self.c.wait_for(created_because_of_the_image, timeout=60,
                                  what="a Created condition naming the pull")
        self.assertIn("worker-0 (pod %s-worker-0) cannot start" % name, created["message"])
        self.assertIn("podStartTimeoutSeconds is unset", created["message"])
        self.assertEqual(get_job(self.c, name)["status"]["phase"], "Created")
        self.delete_job(name)

    def test_a_node_selector_no_node_matches_fails_the_job_as_unschedulable(self):
        name = "no-node"
        job = small_job(name, start_timeout=3)
        job["spec"]["replicaSpecs"]["ps"]["template"] = {
            "spec": {"nodeSelector": {"kubeps.io/pool": "none-such"}}}
        apply(self.c, job)
        failed = self.failed_condition(name)
        self.assertEqual(failed["reason"], "Unschedulable", failed)
        self.assertIn("server-0 (pod %s-server-0) could not start" % name, failed["message"])
        self.assertIn("didn't match Pod's node affinity/selector", failed["message"])
        self.assertIn("Unschedulable", [e["reason"] for e in events_of(self.c, name)])
        self.delete_job(name)

    def test_a_pod_its_node_rejects_is_made_again_under_never_until_the_backoff_limit(self):
        # Bound to the node by its template (no scheduler), asking for more
        # CPU than the node has: the kubelet's admission refuses it before
        # it runs (OutOfcpu). Never is about the program failing; this one
        # never ran, so it is made again, each try counted.
        name = "rejected"
        job = small_job(name, restart_policy="Never", backoff_limit=1)
        job["spec"]["replicaSpecs"]["worker"]["template"] = {"spec": {
            "nodeName": "kubeps-node", "containers": [
                {"name": "worker", "resources": {"requests": {"cpu": "1000"}}}]}}
        apply(self.c, job)
        failed = self.failed_condition(name)
        self.assertEqual(failed["reason"], "BackoffLimitExceeded", failed)
        self.assertIn("worker-0 was rejected by its node before it ran; backoffLimit 1 reached "
                      "after 1 restarts (OutOfcpu: Pod was rejected: Node didn't have enough "
                      "resource: cpu, requested: 1000000", failed["message"])
        st = get_job(self.c, name)["status"]
        self.assertEqual(st["replicaStatuses"]["worker"]["restarts"], 1, st)
        self.delete_job(name)

    def test_a_data_set_path_that_does_not_exist_fails_the_job_naming_it(self):
        name = "no-data"
        job = small_job(name)
        job["spec"]["dataset"]["path"] = "/no/such/fashion-mnist"
        apply(self.c, job)
        failed = self.failed_condition(name)
        self.assertIn("/no/such/fashion-mnist", failed["message"], failed)
        self.assertIn("does not exist", failed["message"], failed)
        self.assertEqual(failed["reason"], "DatasetNotFound", failed)
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
