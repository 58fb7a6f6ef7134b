"""Every legal job name works (issue: names). A TrainingJob's name is a
DNS-1035 label of at most 63 characters; the names the operator derives from
it (the scheduler's Service, each pod's hostname) must be DNS labels of at
most 63 characters too, or a real API server refuses the Service or the pod.
The emulator validates them as Kubernetes does (emulator/apiserver/validation.py).

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_names   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import apply, job_pods, training_job  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402


class LongJobNameTest(OwnClusterTestCase):
    def test_a_job_named_with_63_characters_succeeds(self):
        c = self.c
        name = "long-" + "n" * 57 + "e"
        self.assertEqual(len(name), 63)
        apply(c, training_job(name, max_steps=30))
        self.wait_phase(name, "Succeeded", timeout=180)
        hostnames = [p["spec"].get("hostname", "") for p in job_pods(c, name)]
        services = [s["metadata"]["name"] for s in c.client.get(
            "/api/v1/namespaces/default/services")["items"]]
        for derived in hostnames + services:
            self.assertLessEqual(len(derived), 63, derived)
        self.assertEqual(len(set(hostnames)), len(hostnames), hostnames)
        self.assertNotIn("is invalid", self.op.log())


if __name__ == "__main__":
    unittest.main()
