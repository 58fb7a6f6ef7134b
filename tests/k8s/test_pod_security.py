"""A job in a namespace that enforces the restricted Pod Security profile
(issue: the scheduler took no template, and no pod passed the profile). The
emulator's API server enforces Pod Security admission as Kubernetes does on
namespaces labelled pod-security.kubernetes.io/enforce
(emulator/apiserver/pod_security.py).

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_pod_security   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.client import ApiError  # noqa: E402
from operator_harness import apply, training_job  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402

NAMESPACE = "secure"


class RestrictedNamespaceTest(OwnClusterTestCase):
    def prepare_cluster(self):
        self.c.kubectl("create", "namespace", NAMESPACE)
        self.c.kubectl("label", "namespace", NAMESPACE,
                       "pod-security.kubernetes.io/enforce=restricted")

    def test_the_stand_in_refuses_a_pod_that_breaks_the_profile(self):
        with self.assertRaises(ApiError) as e:
            self.c.client.post("/api/v1/namespaces/%s/pods" % NAMESPACE, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "loose"},
                "spec": {"containers": [{"name": "main", "image": "x"}]}})
        self.assertEqual(e.exception.code, 403)
        for check in ("allowPrivilegeEscalation != false", "unrestricted capabilities",
                      "runAsNonRoot != true", "seccompProfile"):
            self.assertIn(check, str(e.exception))

    def test_a_job_with_a_scheduler_template_runs_under_the_restricted_profile(self):
        c, name = self.c, "restricted"
        job = training_job(name, max_steps=30)
        job["metadata"]["namespace"] = NAMESPACE
        job["spec"]["replicaSpecs"]["scheduler"] = {"template": {"spec": {"containers": [{
            "name": "scheduler", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}
        apply(c, job)
        pods = "/api/v1/namespaces/%s/pods" % NAMESPACE
        c.wait_for(lambda: self.phase(name) == "Succeeded", timeout=180,
                   what="%s Succeeded\n%s" % (name, self.op.log()[-3000:]))
        scheduler = c.client.get(pods + "/%s-scheduler-0" % name)
        self.assertEqual(scheduler["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m")

    def phase(self, name):
        job = self.c.client.get("/apis/kubeps.io/v1alpha1/namespaces/%s/trainingjobs/%s" % (
            NAMESPACE, name))
        return job.get("status", {}).get("phase")


if __name__ == "__main__":
    unittest.main()
