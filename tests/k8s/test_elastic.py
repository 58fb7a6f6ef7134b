"""An elastic TrainingJob on the Kubernetes stand-in, scaled as a user scales
it: `kubectl scale` through the CRD's scale subresource. The operator tells
the job's scheduler through its pod's annotation (a downwardAPI volume the
kubelet rewrites), creates the pods a scale-up needs and deletes those a
scale-down leaves behind once their workers have left; `kubectl get tj` shows
the workers as ready/requested.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_elastic   (from tests/k8s)
"""
import json
import os
import sys
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (DEPLOY, apply, checkpoints_on_host, events_of, job_pods,  # noqa: E402
                              live, live_pod, metric, parse_metrics, phase_history, replica_key,
                              slowed_down, training_job)
from operator_test_case import SharedClusterTestCase  # noqa: E402

NODE = "kubeps-node"


def worker_pods(cluster, job):
    return sorted(p["metadata"]["name"] for p in job_pods(cluster, job)
                  if replica_key(p)[0] == "worker")


class ElasticJobTest(SharedClusterTestCase):
    def workers_column(self, job):
        out = self.c.kubectl("get", "tj", job, "--no-headers").stdout.split()
        return out[2]

    def logs(self, pod):
        done = self.c.kubectl("logs", pod, check=False)
        return done.stdout if done.returncode == 0 else ""

    def start_training(self, job):
        """Applies `job` and waits until its worker 0 trains."""
        name = job["metadata"]["name"]
        apply(self.c, job)
        self.wait_phase(name, "Running", timeout=90)
        self.c.wait_for(lambda: " step " in self.logs(name + "-worker-0"), timeout=60,
                        what="worker-0 training")

    def test_kubectl_scale_up_and_down_changes_the_workers_of_the_running_job(self):
        c = self.c
        # Both scales take some 7 s from the start, about 200 steps slowed
        # down (which paces the job alike on any machine): 700 leaves room
        # for a cluster three times as slow.
        job = slowed_down(training_job("elastic", epochs=40, max_steps=700))
        job["spec"]["progressIntervalMs"] = 200
        job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {"minReplicas": 1,
                                                                  "maxReplicas": 3}
        # Mutual TLS, as the Helm chart's operator gives every job: the
        # joiner's pod mounts a certificate issued before the scale.
        job["spec"]["security"] = {"tls": "Enabled"}
        self.start_training(job)

        out = c.kubectl("scale", "trainingjob/elastic", "--replicas=3").stdout
        self.assertIn("trainingjob.kubeps.io/elastic scaled", out)
        joiner = c.wait_for(lambda: live_pod(c, "elastic", "worker", 2), timeout=60,
                            what="worker-2's pod")["metadata"]["name"]
        self.assertEqual(joiner, "elastic-worker-2", worker_pods(c, "elastic"))
        c.wait_for(lambda: "joined the job at step" in self.logs(joiner), timeout=90,
                   what="worker-2 taken in")
        c.wait_for(lambda: self.workers_column("elastic") == "3/3", timeout=30,
                   what="kubectl get tj showing 3/3")
        scheduler = live_pod(c, "elastic", "scheduler")
        self.assertEqual(scheduler["metadata"]["annotations"]["kubeps.io/desired-workers"], "3")
        scale = c.client.get("/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs/elastic/scale")
        self.assertEqual(scale["spec"]["replicas"], 3)
        self.assertEqual(scale["status"]["selector"],
                         "kubeps.io/job-name=elastic,kubeps.io/replica-type=worker")

        c.kubectl("scale", "tj", "elastic", "--replicas=1")
        # Workers 1 and 2 push their last step, leave, and their pods go.
        c.wait_for(lambda: worker_pods(c, "elastic") == ["elastic-worker-0"], timeout=90,
                   what="only worker-0's pod left")
        said = self.logs("elastic-scheduler-0")
        for rank in (1, 2):
            self.assertIn("worker %d (worker-%d) left the job: it was scaled away"
                          % (rank, rank), said)
        # The ranks that compute, as the operator reads them from the
        # scheduler pod before it deletes a worker scaled away that has not
        # left: 30 s after it stopped computing, not after the scale.
        ip = live_pod(c, "elastic", "scheduler")["status"]["podIP"]
        with urllib.request.urlopen("http://%s:9090/metrics" % ip, timeout=10) as page:
            computing = parse_metrics(page.read().decode())
        self.assertEqual([metric(computing, "kubeps_job_worker_computing", rank=str(r))
                          for r in range(3)], [1, 0, 0])
        done = self.wait_phase("elastic", "Succeeded", timeout=180)
        self.assertEqual(done["status"]["workers"].split("/")[1], "1")
        # It trained while worker-2's pod started: Running throughout, not
        # Created again ("starting replicas") as if it were new.
        phases = phase_history(c).phases("elastic", done["metadata"]["uid"])
        self.assertEqual(phases[phases.index("Running"):], ["Running", "Succeeded"], phases)

        reasons = [e["reason"] for e in events_of(c, "elastic")]
        self.assertEqual(reasons.count("Scaled"), 2, reasons)
        created = sorted(e["message"] for e in events_of(c, "elastic") if e["reason"] == "CreatedPod"
                         and "worker" in e["message"])
        self.assertEqual(created, ["Created pod elastic-worker-0", "Created pod elastic-worker-1",
                                   "Created pod elastic-worker-2"],
                         "exactly the pods the changes needed, none restarted")
        self.assertFalse([p for p in job_pods(c, "elastic") if live(p)])

    def test_a_worker_whose_pod_cannot_be_replaced_is_dropped_and_taken_in_again_later(self):
        c = self.c
        job = training_job("lost", epochs=40, max_steps=8000)
        job["spec"]["progressIntervalMs"] = 200
        job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {
            "minReplicas": 1, "maxReplicas": 2, "replaceTimeoutSeconds": 3}
        checkpoints_on_host(self, job)
        self.start_training(job)
        # No node for its replacement: the only one is cordoned.
        self.addCleanup(c.kubectl, "uncordon", NODE)
        c.kubectl("cordon", NODE)
        c.kubectl("delete", "pod", "lost-worker-1", "--wait=false")
        deleted = time.time()
        c.wait_for(lambda: any(x.get("reason") == "Unschedulable" for x in (
            live_pod(c, "lost", "worker", 1) or {}).get("status", {}).get("conditions", [])),
            timeout=30, what="worker-1's replacement unschedulable")

        def trains_again():
            log = self.logs("lost-worker-0")
            at = log.rfind("rolled back to step")
            return at >= 0 and " step " in log[at:].split("\n", 1)[-1]
        c.wait_for(trains_again, timeout=30, interval=0.05, what="worker 0 training without it")
        went_on = time.time() - deleted
        print("\nworker pod deleted, its replacement unschedulable: the job trained on %.2f s "
              "later (replaceTimeoutSeconds 3)" % went_on)
        self.assertLess(went_on, 3 + 10)  # a loaded 2-core machine: kubelet, SIGTERM, logs polls
        self.assertIn("worker worker-1 (rank 1) has been gone for 3 s",
                      self.logs("lost-scheduler-0"))

        c.kubectl("uncordon", NODE)  # schedulable again: it comes back and is taken in
        back = c.wait_for(lambda: (live_pod(c, "lost", "worker", 1) or {}).get(
            "status", {}).get("podIP") and live_pod(c, "lost", "worker", 1), timeout=60,
            what="worker-1's replacement running")["metadata"]["name"]
        c.wait_for(lambda: "joined the job at step" in self.logs(back), timeout=60,
                   what="worker-1 taken in again")
        self.wait_phase("lost", "Succeeded", timeout=240)

    def test_a_fixed_job_scaled_keeps_its_workers_and_says_why(self):
        # Every TrainingJob has the scale subresource, so `kubectl scale` (or an
        # autoscaler pointed at the wrong job) reaches one without an
        # elasticPolicy too. Its scheduler knows a fixed number of workers and
        # would refuse a third: the job must go on with its two.
        c = self.c
        job = slowed_down(training_job("fixed", epochs=40, max_steps=500))
        job["spec"]["progressIntervalMs"] = 200
        self.start_training(job)
        # The CRD's rule refuses it at the API server.
        refused = c.kubectl("scale", "trainingjob/fixed", "--replicas=3", check=False)
        self.assertIn("cannot change from 2 to 3 while the job runs", refused.stderr)
        # A CRD without the rule (Helm leaves the one it installed first in
        # place on an upgrade): the operator must refuse it.
        crd = c.kubectl("get", "crd", "trainingjobs.kubeps.io", "-o", "json", json_output=True)
        self.addCleanup(c.kubectl, "apply", "-f", os.path.join(DEPLOY, "crd") + "/")
        del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "x-kubernetes-validations"]
        c.kubectl("replace", "-f", "-", input=json.dumps(crd))
        out = c.kubectl("scale", "trainingjob/fixed", "--replicas=3").stdout
        self.assertIn("trainingjob.kubeps.io/fixed scaled", out)
        c.wait_for(lambda: any(e["reason"] == "ScaleRefused" for e in events_of(c, "fixed")),
                   timeout=30, what="the ScaleRefused Event")
        time.sleep(3)  # time for a wrong worker pod to appear
        self.assertEqual(worker_pods(c, "fixed"), ["fixed-worker-0", "fixed-worker-1"])
        refusal = [e["message"] for e in events_of(c, "fixed") if e["reason"] == "ScaleRefused"]
        self.assertIn("spec.replicaSpecs.worker.replicas 3: this job has no elasticPolicy; it "
                      "trains on with its 2 workers", refusal[0])
        status = c.client.get("/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs/fixed")
        self.assertEqual(status["status"]["fixedWorkers"], 2)
        done = self.wait_phase("fixed", "Succeeded", timeout=240)
        self.assertEqual(done["status"].get("restarts", 0), 0)
        self.assertEqual(done["status"]["workers"].split("/")[1], "2")


if __name__ == "__main__":
    unittest.main()
