"""The operator in a namespace with a LimitRange, which the emulator enforces
as the API server's LimitRanger admission does. A worker whose template asks
for no CPU gets the LimitRange's default request, which its template never
shows, and computes on that many cores. A template over the LimitRange's max
fails the job, saying which limit it breaks.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_limit_range   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import apply, condition, training_job  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402

LIMIT_RANGES = "/api/v1/namespaces/default/limitranges"


class LimitRangeTest(OwnClusterTestCase):
    def limit_range(self, item):
        return self.c.client.post(LIMIT_RANGES, {
            "metadata": {"name": "per-container"}, "spec": {"limits": [
                dict(item, type="Container")]}})

    def test_a_worker_computes_on_the_cores_a_limit_range_requests_for_it(self):
        c, name = self.c, "ranged"
        made = self.limit_range({"default": {"cpu": "2"}, "defaultRequest": {"cpu": "1500m"},
                                 "max": {"memory": "1Gi"}})
        # Defaulted as the API server does: a max is the default limit, a
        # default limit the default request.
        item = made["spec"]["limits"][0]
        self.assertEqual(item["default"], {"cpu": "2", "memory": "1Gi"})
        self.assertEqual(item["defaultRequest"], {"cpu": "1500m", "memory": "1Gi"})

        apply(c, training_job(name, max_steps=30))
        self.wait_phase(name, "Succeeded", timeout=120)
        worker = c.pod(name + "-worker-0")
        container = next(x for x in worker["spec"]["containers"] if x["name"] == "worker")
        self.assertEqual(container["resources"], {
            "requests": {"cpu": "1500m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "1Gi"}})
        self.assertEqual(worker["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
                         "LimitRanger plugin set: cpu, memory request for container worker; "
                         "cpu, memory limit for container worker")
        # 1.5 cores, rounded up by the downward API
        log = c.kubectl("logs", name + "-worker-0").stdout
        self.assertIn("computing on 2 threads (the container's CPU request)", log)

    def test_a_worker_over_the_limit_ranges_max_fails_the_job_saying_which(self):
        c, name = self.c, "toobig"
        self.limit_range({"max": {"cpu": "2"}, "min": {"cpu": "100m"}})
        job = training_job(name, max_steps=30)
        job["spec"]["replicaSpecs"]["worker"]["template"] = {"spec": {"containers": [{
            "name": "worker", "resources": {"limits": {"cpu": "4"}}}]}}
        apply(c, job)
        failed = self.wait_phase(name, "Failed", timeout=60)
        self.assertEqual(condition(failed, "Failed")["reason"], "CreateFailed", failed["status"])
        self.assertIn('pods "%s-worker-0" is forbidden: maximum cpu usage per Container is 2, '
                      'but limit is 4' % name, failed["status"]["message"])


if __name__ == "__main__":
    unittest.main()
