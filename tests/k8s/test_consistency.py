"""The operator against an API server that is only eventually consistent,
as a real one is: watch events arrive after the write's response (and the
job and pod watches are not ordered with each other), and the garbage
collector deletes a deleted job's objects seconds later. The emulator does
both when asked (Cluster.settings).

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_consistency   (from tests/k8s)
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (OPERATOR_USER, PODS, apply, get_job, job_pods,  # noqa: E402
                              phase_history, training_job)
from own_cluster import OwnClusterTestCase  # noqa: E402

SECRETS = "/api/v1/namespaces/default/secrets"
SERVICES = "/api/v1/namespaces/default/services"
REPLICAS = 5   # a scheduler, 2 servers, 2 workers


def owner_uid(obj):
    refs = obj["metadata"].get("ownerReferences") or [{}]
    return refs[0].get("uid")


class EventualConsistencyTest(OwnClusterTestCase):
    def prepare_cluster(self):
        self.c.settings(watch_delay={"trainingjobs": 1.5, "pods": 0.3}, gc_delay=3.0)

    def pod_creations(self):
        return [r for r in self.c.requests() if r["verb"] == "POST" and r["user"] == OPERATOR_USER
                and r["path"].startswith(PODS) and r["code"] in (200, 201)]

    def test_a_finished_job_never_starts_again(self):
        c, name = self.c, "terminal"
        apply(c, training_job(name, max_steps=30, clean_pod_policy="All"))
        uid = get_job(c, name)["metadata"]["uid"]
        self.wait_phase(name, "Succeeded", timeout=180)
        c.wait_for(lambda: not job_pods(c, name), timeout=60, what="the pods deleted")
        time.sleep(5)   # several reconciles, resyncs and delayed events later
        self.assertEqual(get_job(c, name)["status"]["phase"], "Succeeded", self.diag(name))
        self.assertEqual(job_pods(c, name), [], "pods made again for a finished job")
        self.assertEqual(len(self.pod_creations()), REPLICAS, self.diag(name))
        phases = phase_history(c).phases(name, uid)
        self.assertEqual(phases[phases.index("Succeeded"):], ["Succeeded"], phases)

    def test_a_job_deleted_and_applied_again_at_once_adopts_nothing(self):
        c, name = self.c, "again"
        apply(c, training_job(name, max_steps=100000))
        old_uid = get_job(c, name)["metadata"]["uid"]
        self.wait_phase(name, "Running", timeout=120)
        c.kubectl("delete", "tj", name, "--wait=false")
        c.wait_for(lambda: self.gone(name), timeout=30, what="the first job deleted")
        apply(c, training_job(name, max_steps=30))
        uid = get_job(c, name)["metadata"]["uid"]
        self.assertNotEqual(uid, old_uid)
        job = self.wait_phase(name, "Succeeded", timeout=240)
        self.assertEqual(job["metadata"]["uid"], uid)
        # Everything the second job has is its own, and outlives the first's
        # garbage collection.
        time.sleep(4)
        pods = job_pods(c, name)
        self.assertEqual(len(pods), REPLICAS, self.diag(name))
        self.assertEqual({owner_uid(p) for p in pods}, {uid}, self.diag(name))
        owned = [o for path in (SECRETS, SERVICES) for o in c.client.get(path)["items"]
                 if o["metadata"]["name"].startswith(name)]
        self.assertEqual(sorted(o["metadata"]["name"] for o in owned),
                         sorted([name, name + "-scheduler", name + "-token"]), self.diag(name))
        self.assertEqual({owner_uid(o) for o in owned}, {uid})

    def gone(self, name):
        return not any(j["metadata"]["name"] == name for j in self.c.client.get(
            "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs")["items"])


if __name__ == "__main__":
    unittest.main()
