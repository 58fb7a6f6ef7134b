"""The operator in a namespace with a ResourceQuota, which the emulator
enforces as the API server's quota admission does. A pod refused for
exceeded quota is not a failure of the job: quota frees as other jobs end
or an administrator raises it, so the job says which pod waits for which
quota, and goes on when it frees. A quota no pod of the job can ever meet
("must specify requests.cpu") fails the job, saying so.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_quota   (from tests/k8s)
"""
import copy
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (apply, condition, events_of, get_job, job_pods,  # noqa: E402
                              phase_history, training_job)
from own_cluster import OwnClusterTestCase  # noqa: E402

QUOTAS = "/api/v1/namespaces/default/resourcequotas"


def with_requests(job):
    """`job` with cpu and memory requests and limits on every role's pods."""
    job = copy.deepcopy(job)
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"},
                 "limits": {"cpu": "1", "memory": "512Mi"}}
    specs = job["spec"]["replicaSpecs"]
    for role, container in (("scheduler", "scheduler"), ("ps", "server"), ("worker", "worker")):
        spec = specs.setdefault(role, {})
        template = spec.setdefault("template", {"spec": {"containers": [{"name": container}]}})
        template["spec"]["containers"][0]["resources"] = resources
    return job


class ResourceQuotaTest(OwnClusterTestCase):
    def quota(self, name, hard):
        self.c.client.post(QUOTAS, {"metadata": {"name": name}, "spec": {"hard": hard}})

    def test_a_job_over_quota_waits_and_runs_once_the_quota_is_raised(self):
        c, name = self.c, "quota"
        self.quota("pods-quota", {"pods": "3"})   # the job needs 5: scheduler, 2 ps, 2 workers
        apply(c, training_job(name, max_steps=30))
        uid = get_job(c, name)["metadata"]["uid"]

        def waiting():
            created = condition(get_job(c, name), "Created") or {}
            return created if created.get("reason") == "ExceededQuota" else None
        created = c.wait_for(waiting, timeout=60, what="the job to say it waits for quota")
        self.assertIn("exceeded quota: pods-quota", created["message"])
        self.assertIn("waits for quota", created["message"])
        warnings = [e for e in events_of(c, name) if e["reason"] == "ExceededQuota"]
        self.assertTrue(warnings, self.diag(name))
        self.assertIn("pods-quota", warnings[0]["message"])
        self.assertEqual(len(job_pods(c, name)), 3, self.diag(name))
        self.assertEqual(c.client.get(QUOTAS + "/pods-quota")["status"]["used"]["pods"], "3")

        c.client.put(QUOTAS + "/pods-quota", {"metadata": {"name": "pods-quota"},
                                              "spec": {"hard": {"pods": "10"}}})
        self.wait_phase(name, "Succeeded", timeout=240)
        self.assertNotIn("Failed", phase_history(c).phases(name, uid))

    def test_a_job_over_a_services_quota_waits_and_runs_once_it_is_raised(self):
        """A quota on object counts refuses the job's second Service: before,
        that failed the job (CreateFailed) as if the cluster could never run it."""
        c, name = self.c, "svcquota"
        self.quota("objects", {"services": "1", "count/secrets": "10"})   # the job needs 2
        apply(c, training_job(name, max_steps=30))

        def waiting():
            created = condition(get_job(c, name), "Created") or {}
            return created if created.get("reason") == "ExceededQuota" else None
        created = c.wait_for(waiting, timeout=60, what="the job to say it waits for quota\n" +
                             self.diag(name))
        self.assertIn("exceeded quota: objects", created["message"])
        self.assertIn("Service", created["message"])
        self.assertTrue([e for e in events_of(c, name) if e["reason"] == "ExceededQuota"])
        self.assertEqual(job_pods(c, name), [])
        self.assertEqual(c.client.get(QUOTAS + "/objects")["status"]["used"]["services"], "1")

        c.client.put(QUOTAS + "/objects", {"metadata": {"name": "objects"},
                                           "spec": {"hard": {"services": "10"}}})
        self.wait_phase(name, "Succeeded", timeout=240)
        self.assertNotIn("Failed", phase_history(c).phases(name, get_job(c, name)["metadata"]["uid"]))

    def test_requests_quota_admits_a_job_that_sets_requests_and_fails_one_that_cannot(self):
        c = self.c
        self.quota("compute", {"requests.cpu": "4", "requests.memory": "4Gi",
                               "limits.cpu": "20", "limits.memory": "8Gi"})
        apply(c, training_job("bare", max_steps=30))
        apply(c, with_requests(training_job("sized", max_steps=30)))
        failed = self.wait_phase("bare", "Failed", timeout=60)
        self.assertEqual(condition(failed, "Failed")["reason"], "CreateFailed")
        self.assertIn("failed quota: compute: must specify", failed["status"]["message"])
        self.assertIn("requests.cpu", failed["status"]["message"])
        self.wait_phase("sized", "Succeeded", timeout=240)


if __name__ == "__main__":
    unittest.main()
