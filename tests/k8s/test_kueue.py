"""The operator under Kueue, with the test playing Kueue's part. Kueue's
Workload CRD (tests/k8s/crds/, its published v1beta1 schema) is installed
with the real kubectl. A TrainingJob labelled kueue.x-k8s.io/queue-name
gets a Workload with one pod set per role and no pods until Kueue admits
it (moved to another queue meanwhile, the Workload follows); it runs once
admitted; an eviction deletes its pods and holds it
(not Failed) until Kueue admits it again; when it succeeds its Workload is
Finished, so Kueue releases the quota. Admitted to a ResourceFlavor of
tainted nodes, its pods carry the flavor's tolerations and run there, and
the updates of its admission checks. A job suspended by its user has
its Workload deactivated, and resumed with other counts queues again with
a new one. On a cluster without Kueue the job says so and waits; on one
whose Kueue serves only kueue.x-k8s.io/v1beta2 (0.20), the job runs.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_kueue   (from tests/k8s)
"""
import json
import os
import sys
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (OPERATOR_USER, PODS, apply, condition, events_of,  # noqa: E402
                              get_job, job_pods, phase_history, training_job)
from emulator.client import ApiError  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402
from test_quota import with_requests  # noqa: E402

CRD = os.path.join(HERE, "crds", "kueue.x-k8s.io_workloads.yaml")
FLAVOR_CRD = os.path.join(HERE, "crds", "kueue.x-k8s.io_resourceflavors.yaml")
PRIORITY_CRD = os.path.join(HERE, "crds", "kueue.x-k8s.io_workloadpriorityclasses.yaml")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
T0 = "2025-01-01T00:00:00Z"
IN_USE = "kueue.x-k8s.io/resource-in-use"


def queued(job, queue="team-queue"):
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return job


def kueue_condition(ctype, status, reason, message="set by the test as Kueue"):
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def wl_condition(workload, ctype):
    for c in (workload.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def as_v1beta2(crd_path):
    """Kueue's CRD as Kueue 0.20 serves it: kueue.x-k8s.io/v1beta2 only. Of
    what the operator writes, a Workload's priority class alone changed
    shape: priorityClassRef {group, kind, name} where v1beta1 had
    priorityClassName and priorityClassSource (Kueue's apis/kueue/v1beta2);
    the status field whose name had a typo is spelled right. A field left
    in the old shape is pruned, as the API server prunes unknown fields."""
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    version = crd["spec"]["versions"][0]
    version["name"] = "v1beta2"
    if crd["spec"]["names"]["kind"] == "Workload":
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for gone in ("priorityClassName", "priorityClassSource"):
            del spec["properties"][gone]
        name = {"type": "string", "minLength": 1, "maxLength": 253,
                "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"}
        spec["properties"]["priorityClassRef"] = {
            "type": "object", "required": ["group", "kind", "name"], "properties": {
                "group": {"type": "string", "enum": ["kueue.x-k8s.io", "scheduling.k8s.io"]},
                "kind": {"type": "string", "enum": ["WorkloadPriorityClass", "PriorityClass"]},
                "name": name}}
        spec["x-kubernetes-validations"] = [{
            "message": "priority should not be nil when priorityClassRef is set",
            "rule": "!has(self.priorityClassRef) || has(self.priority)"}]
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        status["accumulatedPastExecutionTimeSeconds"] = status.pop(
            "accumulatedPastExexcutionTimeSeconds")
    return json.dumps(crd)


class KueueTest(OwnClusterTestCase):
    V1BETA2_ONLY = "test_a_job_queues_and_runs_where_kueue_serves_only_v1beta2"

    @property
    def kueue_version(self):
        return "v1beta2" if self._testMethodName == self.V1BETA2_ONLY else "v1beta1"

    @property
    def workloads_path(self):
        return "/apis/kueue.x-k8s.io/%s/namespaces/default/workloads" % self.kueue_version

    def prepare_cluster(self):
        """Kueue's kinds are served before the operator starts, as where Kueue
        was installed first, so that the operator watches Workloads from its
        start; not for the test of a cluster without Kueue."""
        if self._testMethodName == "test_without_kueue_a_queued_job_says_so_and_waits":
            return
        for crd, name in ((CRD, "workloads"), (FLAVOR_CRD, "resourceflavors"),
                          (PRIORITY_CRD, "workloadpriorityclasses")):
            if self.kueue_version == "v1beta2":
                self.c.kubectl("create", "-f", "-", input=as_v1beta2(crd))
            else:
                self.c.kubectl("create", "-f", crd)
            self.c.kubectl("wait", "--for=condition=Established", "crd/%s.kueue.x-k8s.io" % name)
        # The flavor admit() assigns unless told another: nodes without
        # labels or taints, as most ClusterQueues start with.
        self.c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kueue.x-k8s.io/" + self.kueue_version, "kind": "ResourceFlavor",
            "metadata": {"name": "default-flavor"}}))

    def workloads(self):
        return self.c.client.get(self.workloads_path)["items"]

    def workload_of(self, uid):
        owned = [w for w in self.workloads()
                 if any(r["uid"] == uid for r in w["metadata"].get("ownerReferences", []))]
        return owned[0] if owned else None

    def event(self, name, reason):
        """The job's first Event with `reason`: posted just after the status
        write it tells of, so waited for."""
        return self.c.wait_for(
            lambda: next((e for e in events_of(self.c, name) if e["reason"] == reason), None),
            timeout=10, what="a %s Event of %s" % (reason, name))

    def write_status(self, workload, status):
        """Kueue writes a Workload's status through its status subresource,
        by server-side apply: its conditions go in by type beside those
        others wrote (the operator's PodsReady), the rest of `status` as
        given; where the Workload changed meanwhile, on the newest."""
        path = self.workloads_path + "/" + workload["metadata"]["name"]
        for _ in range(10):
            current = self.c.client.get(path)
            ours = {c["type"] for c in status.get("conditions", [])}
            others = [c for c in (current.get("status") or {}).get("conditions") or []
                      if c["type"] not in ours]
            merged = dict(status, conditions=others + list(status.get("conditions", [])))
            try:
                return self.c.client.put(path + "/status", dict(current, status=merged))
            except ApiError as e:
                if e.code != 409:
                    raise
        self.fail("the Workload's status kept changing under the test's writes")

    def admit(self, workload, flavor="default-flavor", checks=(), counts=None, topology=None):
        """What Kueue's scheduler writes when the ClusterQueue has the quota:
        the admission, QuotaReserved and Admitted (with `checks`, the states
        of the admission checks that passed; with `counts`, pod set name ->
        the pods it admitted, fewer than asked for where the pod set has
        minCount; with `topology`, pod set name -> its topologyAssignment);
        an Evicted of an earlier round goes False."""
        assignments = [{"name": p["name"], "count": (counts or {}).get(p["name"], p["count"]),
                        "flavors": {"cpu": flavor, "memory": flavor}}
                       for p in workload["spec"]["podSets"]]
        for assignment in assignments:
            if assignment["name"] in (topology or {}):
                assignment["topologyAssignment"] = topology[assignment["name"]]
        conditions = [kueue_condition("QuotaReserved", "True", "QuotaReserved",
                                      "Quota reserved in ClusterQueue cluster-queue"),
                      kueue_condition("Admitted", "True", "Admitted",
                                      "The workload is admitted")]
        if wl_condition(workload, "Evicted"):
            conditions.append(kueue_condition("Evicted", "False", "QuotaReserved",
                                              "Previously: preempted"))
        status = {"admission": {"clusterQueue": "cluster-queue",
                                "podSetAssignments": assignments},
                  "conditions": conditions}
        if checks:
            status["admissionChecks"] = list(checks)
        return self.write_status(workload, status)

    def submit(self, name):
        """A queued job `name` applied: its uid and the Workload the operator
        made for it."""
        c = self.c
        # Long enough to be evicted or suspended mid-run, even with late
        # watch events (the cluster's own cap is 100 steps).
        apply(c, queued(with_requests(training_job(name, epochs=10, max_steps=3000))))
        uid = get_job(c, name)["metadata"]["uid"]
        return uid, c.wait_for(lambda: self.workload_of(uid), timeout=30,
                               what="the Workload of %s" % name)

    def test_a_job_queues_and_runs_where_kueue_serves_only_v1beta2(self):
        """Kueue 0.20 serves kueue.x-k8s.io/v1beta2 alone: the operator finds
        it by discovery and makes the Workload there, its priority class in
        v1beta2's priorityClassRef. Before, it made them in v1beta1, which
        such a cluster does not serve: every queued job waited for good."""
        c, name = self.c, "v1beta2"
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": "batch"}, "value": 10}))
        job = queued(with_requests(training_job(name, max_steps=100)))
        job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "batch"
        apply(c, job)
        uid = get_job(c, name)["metadata"]["uid"]
        try:
            workload = c.wait_for(lambda: self.workload_of(uid), timeout=30,
                                  what="the Workload in v1beta2")
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))
        self.assertEqual(workload["apiVersion"], "kueue.x-k8s.io/v1beta2")
        spec = workload["spec"]
        self.assertEqual((spec.get("priorityClassRef"), spec.get("priority")),
                         ({"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                           "name": "batch"}, 10))
        self.admit(workload)
        job = self.wait_phase(name, "Succeeded", timeout=180)
        self.assertEqual(job["status"]["replicaStatuses"]["worker"]["succeeded"], 2)
        finished = c.wait_for(lambda: wl_condition(self.workload_of(uid), "Finished"),
                              timeout=30, what="the Workload Finished")
        self.assertEqual((finished["status"], finished["reason"]), ("True", "Succeeded"))

    def test_a_job_naming_no_priority_class_queues_at_the_clusters_default(self):
        """The cluster's globalDefault PriorityClass is that of every pod that
        names none (the API server's Priority admission), and Kueue gives
        such a job's Workload its value too: at 0, the job would queue
        behind jobs it is level with, and could be preempted for them."""
        c, name = self.c, "defaulted"
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "cluster-default"}, "value": 1000, "globalDefault": True}))
        uid, workload = self.submit(name)
        spec = workload["spec"]
        self.assertEqual((spec.get("priorityClassName"), spec.get("priority"),
                          spec.get("priorityClassSource")),
                         ("cluster-default", 1000, "scheduling.k8s.io/priorityclass"))
        self.admit(workload)
        pods = c.wait_for(lambda: len(job_pods(c, name)) >= 3 and job_pods(c, name),
                          timeout=30, what="the pods of %s" % name)
        for pod in pods:
            self.assertEqual((pod["spec"].get("priorityClassName"), pod["spec"].get("priority")),
                             ("cluster-default", 1000))

    def test_a_queued_job_runs_only_while_kueue_admits_it(self):
        c, name = self.c, "queued"
        uid, workload = self.submit(name)
        self.assertRegex(workload["metadata"]["name"], r"^trainingjob-queued-[0-9a-f]{5}$")
        owner = workload["metadata"]["ownerReferences"][0]
        self.assertEqual((owner["kind"], owner["controller"], owner["blockOwnerDeletion"]),
                         ("TrainingJob", True, True))
        self.assertEqual(workload["spec"]["queueName"], "team-queue")
        self.assertTrue(workload["spec"]["active"], "the CRD's default")
        pod_sets = {p["name"]: p for p in workload["spec"]["podSets"]}
        self.assertEqual({n: p["count"] for n, p in pod_sets.items()},
                         {"scheduler": 1, "server": 2, "worker": 2})
        for pod_set in pod_sets.values():
            container = pod_set["template"]["spec"]["containers"][0]
            self.assertEqual(container["resources"]["requests"], {"cpu": "100m", "memory": "64Mi"})
        job = c.wait_for(lambda: (get_job(c, name).get("status") or {}).get("phase") ==
                         "Suspended" and get_job(c, name), timeout=30,
                         what="%s to wait for admission" % name)
        self.assertEqual(condition(job, "Suspended")["reason"], "WaitingForAdmission")
        self.assertIn("waits for Kueue", job["status"]["message"])
        path = self.workloads_path + "/" + workload["metadata"]["name"]
        since = max([r["seq"] for r in c.requests()] or [0])
        time.sleep(5)  # nothing starts before the admission...
        self.assertEqual(job_pods(c, name), [], self.diag(name))
        # ...and, the Workload unchanged, it is not read again: the operator
        # watches Workloads. Looking every 2 s, a thousand queued jobs would
        # cost the API server 500 reads a second. (One read may come of the
        # resync of every job.)
        reads = [r for r in c.requests() if r["seq"] > since and r["verb"] == "GET" and
                 r["path"] == path and r["user"] == OPERATOR_USER]
        self.assertLessEqual(len(reads), 1, reads)
        self.event(name, "CreatedWorkload")
        # Moved to another queue while it waits: the same Workload follows
        # (a label change bumps no generation, so only the label says it).
        c.kubectl("label", "trainingjob", name, QUEUE_LABEL + "=night-queue", "--overwrite")
        moved = c.wait_for(lambda: (lambda w: w["spec"]["queueName"] == "night-queue" and w)(
            self.workload_of(uid)), timeout=30, what="the Workload in night-queue")
        self.assertEqual(moved["metadata"]["uid"], workload["metadata"]["uid"])
        self.assertIn("moved from queue team-queue to queue night-queue",
                      self.event(name, "UpdatedWorkload")["message"])

        self.admit(moved)
        self.wait_phase(name, "Running", timeout=90)
        c.wait_for(lambda: len(job_pods(c, name)) == 5, timeout=30, what="5 pods")
        columns = c.kubectl("get", "workloads").stdout.splitlines()
        self.assertEqual(columns[1].split()[1:4], ["night-queue", "cluster-queue", "True"],
                         columns)
        # Kueue's waitForPodsReady evicts a job whose pods are not all ready
        # in time, as its job integrations say on the Workload.
        ready = c.wait_for(lambda: (lambda r: r and r["status"] == "True" and r)(
            wl_condition(self.workload_of(uid), "PodsReady")), timeout=60,
            what="PodsReady on the Workload")
        self.assertEqual(ready["reason"], "Started")

        # Kueue preempts it: Evicted, the admission still there until the
        # job's controller has stopped the job and given the quota back.
        workload = self.workload_of(uid)
        status = dict(workload["status"])
        status["conditions"] = status["conditions"] + [kueue_condition(
            "Evicted", "True", "Preempted", "Preempted to accommodate a higher priority Workload")]
        self.write_status(workload, status)
        c.wait_for(lambda: not job_pods(c, name), timeout=60, what="the pods deleted")
        # the status is written after the deletions: it may land a moment later
        job = c.wait_for(lambda: (lambda j: j["status"]["phase"] == "Suspended" and j)(
            get_job(c, name)), timeout=30, what="%s held after the eviction" % name)
        self.assertEqual(condition(job, "Suspended")["reason"], "Evicted")
        self.assertIn("Preempted", job["status"]["message"])
        self.assertIn("Preempted", self.event(name, "Evicted")["message"])
        workload = c.wait_for(lambda: (lambda w: "admission" not in w["status"] and w)(
            self.workload_of(uid)), timeout=30, what="the quota given back")
        self.assertEqual(wl_condition(workload, "QuotaReserved")["status"], "False")
        self.assertEqual(wl_condition(workload, "Admitted")["status"], "False")
        c.wait_for(lambda: wl_condition(self.workload_of(uid), "PodsReady")["reason"] ==
                   "WaitForStart", timeout=30, what="PodsReady back to WaitForStart")

        self.admit(workload)
        job = self.wait_phase(name, "Succeeded", timeout=240)
        self.assertEqual(job["status"]["replicaStatuses"]["worker"]["succeeded"], 2)
        self.assertNotIn("Failed", phase_history(c).phases(name, uid))
        finished = c.wait_for(lambda: wl_condition(self.workload_of(uid), "Finished"),
                              timeout=30, what="the Workload Finished")
        self.assertEqual((finished["status"], finished["reason"]), ("True", "Succeeded"))

    def test_an_admitted_job_runs_on_its_flavors_tainted_nodes(self):
        """GPU nodes are often tainted so that only pods that ask for them
        land there. A ResourceFlavor of such nodes carries their labels and
        the tolerations of their taints, and Kueue has the controller of an
        admitted job put both into its pods: without the tolerations they
        wait forever for a node."""
        c, name = self.c, "tainted"
        taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
            "metadata": {"name": "gpu"},
            "spec": {"nodeLabels": {"pool": "gpu"}, "nodeTaints": [taint],
                     "tolerations": [toleration]}}))
        c.kubectl("label", "node", "kubeps-node", "pool=gpu")
        c.kubectl("taint", "node", "kubeps-node", "nvidia.com/gpu=present:NoSchedule")
        uid, workload = self.submit(name)
        # A ProvisioningRequest check passed: its update says which request
        # the workers' nodes were provisioned for.
        consume = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
        self.admit(workload, flavor="gpu", checks=[{
            "name": "dws-prov", "state": "Ready", "message": "Provisioned",
            "lastTransitionTime": T0,
            "podSetUpdates": [{"name": "worker", "annotations": {consume: "tainted-1"}}]}])
        self.wait_phase(name, "Running", timeout=90)
        pods = c.wait_for(lambda: len(job_pods(c, name)) == 5 and job_pods(c, name),
                          timeout=30, what="5 pods")
        for pod in pods:
            self.assertEqual(pod["spec"]["nodeSelector"].get("pool"), "gpu", pod["metadata"])
            self.assertIn(toleration, pod["spec"]["tolerations"], pod["metadata"]["name"])
            self.assertEqual(pod["spec"].get("nodeName"), "kubeps-node")
            worker = pod["metadata"]["labels"]["kubeps.io/replica-type"] == "worker"
            self.assertEqual(pod["metadata"]["annotations"].get(consume),
                             "tainted-1" if worker else None, pod["metadata"]["name"])

        # A check's update that sends the workers to another pool than their
        # flavor's: Kueue's own integrations do not start such a job, and
        # mark its Workload Finished, giving the quota back.
        other = "conflicted"
        other_uid, other_workload = self.submit(other)
        self.admit(other_workload, flavor="gpu", checks=[{
            "name": "dws-prov", "state": "Ready", "message": "Provisioned",
            "lastTransitionTime": T0,
            "podSetUpdates": [{"name": "worker", "nodeSelector": {"pool": "spare"}}]}])
        failed = self.wait_phase(other, "Failed", timeout=30)
        self.assertIn('worker: admission check dws-prov: nodeSelector "pool": "gpu" against '
                      '"spare"', failed["status"]["message"])
        finished = c.wait_for(
            lambda: wl_condition(self.workload_of(other_uid), "Finished"), timeout=30,
            what="the conflicted job's Workload Finished")
        self.assertEqual((finished["status"], finished["reason"]), ("True", "FailedToStart"))
        self.assertEqual(job_pods(c, other), [], "no pod of it was made")

    def test_an_elastic_job_partly_admitted_trains_with_the_workers_admitted(self):
        """Where the queue has quota for fewer workers than an elastic job
        asks for, Kueue admits it with as many as fit, down to its
        minReplicas (partial admission), rather than keep it waiting for
        all: the job trains with those."""
        c, name = self.c, "partial"
        job = queued(with_requests(training_job(name, max_steps=40, servers=1)))
        job["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {"minReplicas": 1,
                                                                   "maxReplicas": 2}
        # And the labels by which Kueue's own integrations take a job's
        # Kueue priority and its time limit.
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
            "metadata": {"name": "research"}, "value": 500}))
        job["metadata"]["labels"].update({"kueue.x-k8s.io/priority-class": "research",
                                          "kueue.x-k8s.io/max-exec-time-seconds": "3600"})
        apply(c, job)
        uid = get_job(c, name)["metadata"]["uid"]
        workload = c.wait_for(lambda: self.workload_of(uid), timeout=30,
                              what="the Workload of %s" % name)
        workers = next(p for p in workload["spec"]["podSets"] if p["name"] == "worker")
        self.assertEqual((workers["count"], workers["minCount"]), (2, 1))
        self.assertEqual({k: workload["spec"].get(k) for k in (
            "priorityClassName", "priority", "priorityClassSource", "maximumExecutionTimeSeconds")},
            {"priorityClassName": "research", "priority": 500, "maximumExecutionTimeSeconds": 3600,
             "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass"})
        self.admit(workload, counts={"worker": 1})
        self.wait_phase(name, "Succeeded", timeout=90)
        started = [p for p in job_pods(c, name)
                   if p["metadata"]["labels"]["kubeps.io/replica-type"] == "worker"]
        self.assertEqual([p["metadata"]["name"] for p in started], ["partial-worker-0"])
        self.assertIn("Kueue admitted 1 of the 2 workers",
                      self.event(name, "PartiallyAdmitted")["message"])
        finished = c.wait_for(lambda: wl_condition(self.workload_of(uid), "Finished"),
                              timeout=30, what="the Workload Finished")
        self.assertEqual(finished["reason"], "Succeeded")

    def test_workers_assigned_a_topology_wait_for_kueue_to_place_each(self):
        """Topology Aware Scheduling: a worker template annotated with a
        topology level asks Kueue for one domain of it (a block of nodes with
        short links between them). Kueue's admission assigns domains; the
        workers wait behind its scheduling gate until its ungater gives each
        the node labels of its domain, by replica index."""
        c, name = self.c, "placed"
        block = "cloud.google.com/gce-topology-block"
        c.kubectl("label", "node", "kubeps-node", block + "=block-a")
        job = queued(with_requests(training_job(name, max_steps=40, servers=1)))
        job["spec"]["replicaSpecs"]["worker"]["template"]["metadata"] = {
            "annotations": {"kueue.x-k8s.io/podset-required-topology": block}}
        apply(c, job)
        uid = get_job(c, name)["metadata"]["uid"]
        workload = c.wait_for(lambda: self.workload_of(uid), timeout=30,
                              what="the Workload of %s" % name)
        workers = next(p for p in workload["spec"]["podSets"] if p["name"] == "worker")
        self.assertEqual(workers["topologyRequest"],
                         {"required": block, "podIndexLabel": "kubeps.io/replica-index"})
        self.admit(workload, topology={"worker": {
            "levels": [block], "domains": [{"values": ["block-a"], "count": 2}]}})

        def gated():
            pods = [p for p in job_pods(c, name)
                    if p["metadata"]["labels"]["kubeps.io/replica-type"] == "worker"]
            return len(pods) == 2 and pods
        pods = c.wait_for(gated, timeout=30, what="the gated workers")
        time.sleep(2)  # the node fits them: only the gate holds them
        for pod in pods:
            pod = c.client.get(PODS + "/" + pod["metadata"]["name"])
            self.assertEqual(pod["spec"]["schedulingGates"], [{"name": "kueue.x-k8s.io/topology"}])
            self.assertEqual(pod["metadata"]["labels"]["kueue.x-k8s.io/tas"], "true")
            self.assertEqual(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], "worker")
            self.assertEqual(pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"],
                             workload["metadata"]["name"])
            self.assertIsNone(pod["spec"].get("nodeName"))
            self.assertEqual(condition(pod, "PodScheduled")["reason"], "SchedulingGated")
        # A gate may only be taken away (Kubernetes 1.30's pod update rule).
        with self.assertRaises(ApiError) as refused:
            c.client.patch(PODS + "/" + pods[0]["metadata"]["name"], {"spec": {"schedulingGates": [
                {"name": "kueue.x-k8s.io/topology"}, {"name": "example.com/more"}]}},
                kind="merge")
        self.assertIn("only deletion is allowed, but found new scheduling gate 'example.com/more'",
                      str(refused.exception))
        # Kueue's ungater: the domain's node labels in, the gate out.
        for pod in pods:
            c.kubectl("patch", "pod", pod["metadata"]["name"], "--type", "merge", "-p",
                      json.dumps({"spec": {"schedulingGates": [],
                                           "nodeSelector": {block: "block-a"}}}))
        self.wait_phase(name, "Succeeded", timeout=90)
        for pod in pods:
            placed = c.client.get(PODS + "/" + pod["metadata"]["name"])
            self.assertEqual(placed["metadata"]["uid"], pod["metadata"]["uid"],
                             "the operator keeps the pod Kueue placed")
            self.assertEqual(placed["spec"]["nodeSelector"][block], "block-a")

    def test_a_job_suspended_gives_its_quota_back_and_queues_again_with_new_counts(self):
        """A user's suspend frees the job's quota: once its pods are gone its
        Workload is deactivated (Kueue's way to stop a job) and its
        reservation cleared. Resumed with 3 workers instead of 2, the
        Workload no longer fits: it is deleted, Kueue's finalizer lifted,
        and a new one asks for 3, which run once admitted. Before, the old
        Workload's admission for 2 started 3 worker pods."""
        c, name = self.c, "resized"
        uid, first = self.submit(name)
        first = self.hold_in_use(first)
        self.admit(first)
        self.wait_phase(name, "Running", timeout=90)
        c.wait_for(lambda: len(job_pods(c, name)) == 5, timeout=30, what="5 pods")

        c.kubectl("patch", "tj", name, "--type=merge", "-p", json.dumps(
            {"spec": {"runPolicy": {"suspend": True}, "replicaSpecs": {"worker": {"replicas": 3}}}}))
        c.wait_for(lambda: not job_pods(c, name), timeout=60, what="the pods deleted")
        inactive = c.wait_for(lambda: (lambda w: w and w["spec"]["active"] is False and
                                       "admission" not in w["status"] and w)(
            self.workload_of(uid)), timeout=30, what="the Workload deactivated, its quota back")
        self.assertEqual(inactive["metadata"]["uid"], first["metadata"]["uid"])
        self.assertIn("suspended", self.event(name, "DeactivatedWorkload")["message"])
        job = get_job(c, name)
        self.assertEqual(condition(job, "Suspended")["reason"], "JobSuspended")
        self.assertIn("quota", job["status"]["message"])

        c.kubectl("patch", "tj", name, "--type=merge", "-p",
                  json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
        second = c.wait_for(lambda: (lambda w: w and w["metadata"]["uid"] != first["metadata"][
            "uid"] and w)(self.workload_of(uid)), timeout=30, what="a new Workload")
        self.assertEqual({p["name"]: p["count"] for p in second["spec"]["podSets"]},
                         {"scheduler": 1, "server": 2, "worker": 3})
        self.assertIn("worker: 3 pods, was 2", self.event(name, "DeletedWorkload")["message"])
        job = c.wait_for(lambda: (lambda j: (condition(j, "Suspended") or {}).get("reason") ==
                                  "WaitingForAdmission" and j)(get_job(c, name)),
                         timeout=30, what="%s to wait for its new admission" % name)
        time.sleep(1.5)  # nothing starts before the admission
        self.assertEqual(job_pods(c, name), [], self.diag(name))

        self.admit(second)
        c.wait_for(lambda: len(job_pods(c, name)) == 6, timeout=60, what="6 pods")
        job = self.wait_phase(name, "Succeeded", timeout=240)
        self.assertEqual(job["status"]["replicaStatuses"]["worker"]["succeeded"], 3)

    def hold_in_use(self, workload):
        """The finalizer Kueue's jobframework puts on the Workloads it makes
        (some Kueue version may on the operator's), lifted by whoever
        deletes the Workload."""
        path = self.workloads_path + "/" + workload["metadata"]["name"]
        return self.c.client.patch(path, {"metadata": {"finalizers": [IN_USE]}})

    def test_without_kueue_a_queued_job_says_so_and_waits(self):
        c, name = self.c, "no-kueue"
        apply(c, queued(training_job(name)))
        job = c.wait_for(lambda: (lambda j: condition(j, "Suspended") and j)(get_job(c, name)),
                         timeout=30, what="%s to say Kueue is missing" % name)
        self.assertEqual(condition(job, "Suspended")["reason"], "KueueNotInstalled")
        self.assertIn("is Kueue installed?", job["status"]["message"])
        self.event(name, "KueueNotInstalled")
        time.sleep(2)  # no pods, and it does not spin
        self.assertEqual(job_pods(c, name), [])
        self.assertEqual(len([e for e in events_of(c, name)
                              if e["reason"] == "KueueNotInstalled"]), 1)


if __name__ == "__main__":
    unittest.main()
