"""Tests of kubeps-operator against the emulated cluster (emulator/): the real operator binary, the
real kubectl, real kubeps-server/kubeps-agent pods training on the real Fashion-MNIST files.
KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_operator   (from tests/k8s)
Jobs are kept short: the cluster passes KUBEPS_MAX_STEPS=100 to every pod, and jobs that must
run longer set KUBEPS_MAX_STEPS in their worker pod template."""
import json
import os
import re
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.client import ApiError  # noqa: E402
from operator_harness import (DEPLOY, OPERATOR_USER, PODS, TJ, Operator,  # noqa: E402
                              apply, condition, events_of, job_pods, kubelet_output, live,
                              metric, phase_of, replica_key, replica_pids, slowed_down,
                              training_job)
from operator_test_case import OperatorTestCase, SharedClusterTestCase, new_cluster  # noqa: E402

JOBS_LIST = "/apis/kubeps.io/v1alpha1/trainingjobs"
PODS_LIST = "/api/v1/pods?"
ROLES = {"scheduler": "scheduler", "server": "ps", "worker": "worker"}


def exit_code(pod):
    for cs in pod.get("status", {}).get("containerStatuses", []):
        term = cs.get("state", {}).get("terminated")
        if term:
            return term.get("exitCode")
    return None


class OperatorTest(SharedClusterTestCase):
    pass

    # -- 1. the documented user path

    def test_user_path_with_kubectl(self):
        c = self.c
        out = c.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/").stdout
        self.assertIn("customresourcedefinition.apiextensions.k8s.io/trainingjobs.kubeps.io", out)
        out = c.kubectl("apply", "-f", os.path.join(DEPLOY, "examples", "fashion-mnist.yaml"))
        self.assertIn("trainingjob.kubeps.io/fashion-mnist created", out.stdout)
        self.wait_phase("fashion-mnist", ("Running", "Succeeded"), timeout=90)
        job = self.wait_phase("fashion-mnist", "Succeeded", timeout=120)
        uid = job["metadata"]["uid"]

        # kubectl get tj: the printer columns
        lines = c.kubectl("get", "tj").stdout.splitlines()
        self.assertEqual(lines[0].split()[:4], ["NAME", "PHASE", "WORKERS", "STEP"])  # and more
        row = [line.split() for line in lines[1:] if line.split()[0] == "fashion-mnist"]
        self.assertEqual(len(row), 1, lines)
        self.assertEqual(row[0][1:3], ["Succeeded", "2/2"], lines)

        # status
        st = job["status"]
        self.assertTrue(st.get("startTime"), st)
        self.assertTrue(st.get("completionTime"), st)
        self.assertGreaterEqual(st["completionTime"], st["startTime"])
        self.assertEqual(st.get("observedGeneration"), job["metadata"]["generation"], st)
        self.assertEqual(st["workers"], "2/2")
        cond = condition(job, "Succeeded")
        self.assertIsNotNone(cond, st)
        self.assertEqual(cond["status"], "True", st)
        running = condition(job, "Running")
        self.assertTrue(running is None or running["status"] == "False", st)
        self.assertEqual(st["replicaStatuses"]["worker"],
                         {"active": 0, "succeeded": 2, "failed": 0, "restarts": 0}, st)
        self.assertEqual(st["replicaStatuses"]["ps"]["failed"], 0, st)

        # the pods: names, labels, annotation, owner, all Completed
        pods = {p["metadata"]["name"]: p for p in job_pods(c, "fashion-mnist")}
        expected = ["fashion-mnist-scheduler-0", "fashion-mnist-server-0",
                    "fashion-mnist-server-1", "fashion-mnist-worker-0", "fashion-mnist-worker-1"]
        self.assertEqual(sorted(pods), expected, self.diag())
        for name, pod in pods.items():
            meta = pod["metadata"]
            role, index = name.split("-")[-2:]
            self.assertEqual(meta["labels"]["kubeps.io/replica-type"], role)
            self.assertEqual(meta["labels"]["kubeps.io/replica-index"], index)
            self.assertEqual(meta["annotations"]["kubeps.io/restarts"], "0")
            self.assertEqual([(r["kind"], r["uid"], r.get("controller")) for r in
                              meta["ownerReferences"]], [("TrainingJob", uid, True)])
            self.assertEqual(pod["spec"]["restartPolicy"], "Never")
        for name in ("fashion-mnist-worker-0", "fashion-mnist-worker-1"):
            self.assertEqual(pods[name]["status"]["phase"], "Succeeded", name)
        pod_lines = c.kubectl("get", "pods", "-l", "kubeps.io/job-name=fashion-mnist").stdout
        self.assertEqual(pod_lines.count("Completed"), 5, pod_lines)

        # the worker trained and evaluated
        logs = c.kubectl("logs", "fashion-mnist-worker-0").stdout
        self.assertIn("test accuracy", logs)
        # The example's workers ask for no CPU: one thread each.
        self.assertIn("computing on 1 thread (the container requested no CPU)", logs)
        self.assertIn("[fashion-mnist-worker-0/worker] [worker 0] test accuracy",
                      kubelet_output(c))

        # events, through kubectl describe
        desc = c.kubectl("describe", "tj", "fashion-mnist").stdout
        for word in ("CreatedPod", "JobSucceeded", "Created pod fashion-mnist-worker-0"):
            self.assertIn(word, desc)
        events = events_of(c, "fashion-mnist", uid)
        created = sorted(e["message"] for e in events if e["reason"] == "CreatedPod")
        self.assertEqual(sorted(set(created)), ["Created pod " + n for n in expected])
        succeeded = [e for e in events if e["reason"] == "JobSucceeded"]
        self.assertEqual([e["type"] for e in succeeded], ["Normal"])
        for e in events:
            self.assertEqual(e["source"]["component"], "kubeps-operator")

        # the objects the job owns
        owned = {
            "secrets/fashion-mnist-token": c.client.get(
                "/api/v1/namespaces/default/secrets/fashion-mnist-token"),
            "services/fashion-mnist": c.client.get(
                "/api/v1/namespaces/default/services/fashion-mnist"),
            "services/fashion-mnist-scheduler": c.client.get(
                "/api/v1/namespaces/default/services/fashion-mnist-scheduler"),
        }
        for what, obj in owned.items():
            refs = obj["metadata"].get("ownerReferences", [])
            self.assertEqual([(r["kind"], r["name"], r["uid"]) for r in refs],
                             [("TrainingJob", "fashion-mnist", uid)], what)
        self.assertTrue(owned["secrets/fashion-mnist-token"]["data"]["token"])
        self.assertEqual(owned["services/fashion-mnist"]["spec"]["clusterIP"], "None")

        # kubectl delete cascades
        c.kubectl("delete", "tj", "fashion-mnist")

        def all_gone():
            left = [p["metadata"]["name"] for p in job_pods(c, "fashion-mnist")]
            for kind, name in (("secrets", "fashion-mnist-token"), ("services", "fashion-mnist"),
                               ("services", "fashion-mnist-scheduler")):
                try:
                    c.client.get("/api/v1/namespaces/default/%s/%s" % (kind, name))
                    left.append(kind + "/" + name)
                except ApiError as e:
                    if e.code != 404:
                        raise
            return not left
        c.wait_for(all_gone, timeout=90, what="the job's pods, services and secret to go")
        self.assertEqual(c.kubectl("get", "tj").stdout.count("fashion-mnist"), 0)

    # -- 4. a killed worker under OnFailure and under Never

    def test_killed_worker_restarts_under_on_failure(self):
        c, name = self.c, "onfail"
        before = metric(self.op.metrics(), "kubeps_operator_replica_restarts_total",
                        job=name, namespace="default") or 0
        apply(c, training_job(name, epochs=5, max_steps=2000, restart_policy="OnFailure",
                              backoff_limit=3))
        self.wait_phase(name, "Running", timeout=90)
        pid = self.wait_running_pid(name, "worker-0")
        time.sleep(1.0)   # let it train a little: 2000 steps last long past the kill, even late
        os.kill(pid, signal.SIGKILL)

        r1 = c.wait_for(lambda: c.pod(name + "-worker-0-r1"), timeout=60,
                        what="the replacement pod %s-worker-0-r1" % name)
        self.assertEqual(r1["metadata"]["annotations"]["kubeps.io/restarts"], "1")
        self.assertEqual(r1["metadata"]["labels"]["kubeps.io/replica-type"], "worker")
        self.assertEqual(r1["metadata"]["labels"]["kubeps.io/replica-index"], "0")
        self.assertEqual(r1["spec"]["hostname"], name + "-worker-0")
        job = self.wait_phase(name, "Succeeded", timeout=120)
        st = job["status"]
        self.assertEqual(st["replicaStatuses"]["worker"]["restarts"], 1, st)
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        # the failed pod is replaced, not kept next to its successor
        c.wait_for(lambda: name + "-worker-0" not in
                   [p["metadata"]["name"] for p in job_pods(c, name)], timeout=30,
                   what="the failed pod %s-worker-0 deleted" % name)
        names = sorted(p["metadata"]["name"] for p in job_pods(c, name))
        self.assertNotIn(name + "-worker-0-r2", names)
        self.assertEqual(c.pod(name + "-worker-0-r1")["status"]["phase"], "Succeeded")
        # a Warning event says which replica failed and how
        events = events_of(c, name, job["metadata"]["uid"])
        warnings = [e for e in events if e["type"] == "Warning"]
        self.assertTrue(any(e["reason"] == "ReplicaRestarted" and "worker-0" in e["message"] and
                            "137" in e["message"] for e in warnings),
                        [(e["type"], e["reason"], e["message"]) for e in events])
        self.assertTrue(any(e["reason"] == "CreatedPod" and
                            e["message"] == "Created pod %s-worker-0-r1" % name for e in events))
        after = metric(self.op.metrics(), "kubeps_operator_replica_restarts_total",
                       job=name, namespace="default")
        self.assertEqual(after, before + 1)
        self.assertIn("test accuracy", c.kubectl("logs", name + "-worker-0-r1").stdout)
        self.delete_job(name)

    def test_killed_worker_fails_job_under_never(self):
        c, name = self.c, "never"
        apply(c, training_job(name, epochs=20, max_steps=5000, restart_policy="Never"))
        self.wait_phase(name, "Running", timeout=90)
        pid = self.wait_running_pid(name, "worker-0")
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        job = self.wait_phase(name, "Failed", timeout=90)
        st = job["status"]
        failed = condition(job, "Failed")
        self.assertIsNotNone(failed, st)
        self.assertEqual((failed["status"], failed["reason"]), ("True", "RestartPolicyNever"), st)
        self.assertIn("worker-0", st["message"])
        self.assertIn("137", st["message"])
        self.assertTrue(st.get("completionTime"), st)
        # no replacement; cleanPodPolicy Running (the default) deletes what still runs
        # and keeps the failed pod
        def cleaned():
            pods = job_pods(c, name)
            return all(p["metadata"]["name"] == name + "-worker-0" for p in pods) and pods
        pods = c.wait_for(cleaned, timeout=90, what="the running pods of %s deleted" % name)
        self.assertEqual(len(pods), 1, [p["metadata"]["name"] for p in pods])
        self.assertEqual(pods[0]["status"]["phase"], "Failed")
        self.assertEqual(exit_code(pods[0]), 137)
        # Events are posted apart from the status (as on a real cluster, one may
        # be seen later): under load the Failed phase and the cleanup came first.
        def warned():
            return any(e["type"] == "Warning" and e["reason"] == "RestartPolicyNever"
                       for e in events_of(c, name, job["metadata"]["uid"]))
        c.wait_for(warned, timeout=30, what="the RestartPolicyNever warning of %s" % name)
        self.assertFalse(replica_pids(c, name, "worker-1"), "worker-1 still runs")
        # a failed job stays failed
        time.sleep(1)
        self.assertEqual(phase_of(c, name), "Failed")
        self.delete_job(name)

    def test_backoff_limit_counts_every_restart(self):
        c, name = self.c, "backoff"
        apply(c, training_job(name, epochs=20, max_steps=5000, restart_policy="OnFailure",
                              backoff_limit=1))
        self.wait_phase(name, "Running", timeout=90)
        first = self.wait_running_pid(name, "worker-1")
        time.sleep(0.5)
        os.kill(first, signal.SIGKILL)       # restart 1 of at most 1
        c.wait_for(lambda: c.pod(name + "-worker-1-r1")["status"]["phase"] == "Running",
                   timeout=60, what="%s-worker-1-r1 running" % name)
        c.wait_for(lambda: [p for p in replica_pids(c, name, "worker-1") if p != first],
                   timeout=60, what="the new worker-1 process")
        os.kill(self.wait_running_pid(name, "worker-0"), signal.SIGKILL)   # one too many
        job = self.wait_phase(name, "Failed", timeout=90)
        st = job["status"]
        failed = condition(job, "Failed")
        self.assertEqual((failed["status"], failed["reason"]), ("True", "BackoffLimitExceeded"),
                         st)
        self.assertIn("worker-0 exited with code 137", st["message"])
        self.assertIn("backoffLimit 1", st["message"])
        names = sorted(p["metadata"]["name"] for p in job_pods(c, name))
        self.assertNotIn(name + "-worker-0-r1", names)
        m = self.op.metrics()
        self.assertEqual(metric(m, "kubeps_operator_replica_restarts_total", job=name,
                                namespace="default"), 1)
        # the job restarted one replica once: its status says so, also after
        # the cleanup deleted the restarted pod that was still running
        self.assertEqual(st["replicaStatuses"]["worker"]["restarts"], 1,
                         "status.replicaStatuses.worker: %s" % st["replicaStatuses"]["worker"])
        self.delete_job(name)

    def test_ttl_after_finished_deletes_the_job(self):
        c, name = self.c, "ttl"
        apply(c, training_job(name, ttl=1))
        job = self.wait_phase(name, "Succeeded", timeout=120)
        uid = job["metadata"]["uid"]
        try:
            c.wait_for(lambda: phase_of(c, name) is None, timeout=30,
                       what="%s deleted after ttlSecondsAfterFinished" % name)
        except AssertionError as e:
            deletes = [(r["path"], r["code"]) for r in c.requests() if r["verb"] == "DELETE" and
                       r["user"] == OPERATOR_USER and r["path"].startswith(TJ + "/" + name)]
            self.fail("%s; the operator's DELETEs of the job: %s\n%s" % (e, deletes, self.diag()))
        c.wait_for(lambda: not job_pods(c, name), timeout=45, what="its pods collected")
        self.assertTrue(any(e["reason"] == "JobSucceeded" for e in events_of(c, name, uid)))

    def test_clean_pod_policy_all_keeps_the_final_counts(self):
        c, name = self.c, "cleanall"
        apply(c, training_job(name, clean_pod_policy="All"))
        job = self.wait_phase(name, "Succeeded", timeout=120)
        c.wait_for(lambda: not job_pods(c, name), timeout=90,
                   what="every pod of %s deleted (cleanPodPolicy All)" % name)
        st = job["status"]
        # the pods are gone, what they did is not
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.assertEqual(st["workers"], "2/2", st)
        self.delete_job(name)

    def test_two_jobs_in_two_namespaces_at_once(self):
        # Same job name in two namespaces: names, Services and Secrets must
        # not collide, and each job finds its own scheduler.
        c, name = self.c, "twin"
        c.kubectl("create", "namespace", "team-b")
        first = training_job(name)
        second = training_job(name)
        second["metadata"]["namespace"] = "team-b"
        apply(c, first)
        apply(c, second)
        self.wait_phase(name, "Succeeded", timeout=180)
        other = c.wait_for(
            lambda: (c.client.get("/apis/kubeps.io/v1alpha1/namespaces/team-b/trainingjobs/" + name)
                     .get("status", {}).get("phase") == "Succeeded"),
            timeout=180, what="%s in team-b Succeeded" % name)
        self.assertTrue(other)
        pods = c.client.get("/api/v1/namespaces/team-b/pods?labelSelector=kubeps.io%2Fjob-name%3D" + name)["items"]
        self.assertEqual(len(pods), 5)
        env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
        self.assertEqual(env["KUBEPS_SCHEDULER_ADDR"], "twin-scheduler.team-b.svc:7000")
        # The run whose checkpoints its servers keep (spec.checkpoint.resume
        # false deletes another run's): this job's, by UID, not by name.
        uid = c.client.get("/apis/kubeps.io/v1alpha1/namespaces/team-b/trainingjobs/" +
                           name)["metadata"]["uid"]
        self.assertEqual(env["KUBEPS_RUN_ID"], uid)
        self.delete_job(name)
        c.kubectl("delete", "tj", name, "-n", "team-b")

    # -- 6. activeDeadlineSeconds and suspend

    def test_active_deadline_fails_the_job(self):
        c, name = self.c, "deadline"
        # 0 = no step cap: 50 epochs run far longer than the deadline (the 2 x 2
        # MLP job makes some 600 steps a second: 5 epochs could end within it)
        apply(c, training_job(name, epochs=50, max_steps=0, active_deadline=2))
        t0 = time.time()
        job = self.wait_phase(name, "Failed", timeout=90)
        elapsed = time.time() - t0
        st = job["status"]
        failed = condition(job, "Failed")
        self.assertIsNotNone(failed, st)
        self.assertEqual((failed["status"], failed["reason"]), ("True", "DeadlineExceeded"), st)
        self.assertIn("activeDeadlineSeconds", st["message"])
        # startTime has whole seconds: a job that started at 10.9 s has its
        # deadline at 12 s, 1.1 s later. More than one second must pass.
        self.assertGreaterEqual(elapsed, 1)
        self.assertLess(elapsed, 10, "the deadline of 2 s was acted on after %.1f s" % elapsed)
        # the pods that were running are deleted
        c.wait_for(lambda: not any(live(p) or p["metadata"].get("deletionTimestamp")
                                   for p in job_pods(c, name)), timeout=90,
                   what="no running pod of %s" % name)
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 0, st)
        self.delete_job(name)

    def test_suspend_and_resume(self):
        c, name = self.c, "suspended"
        apply(c, training_job(name, suspend=True))
        job = self.wait_phase(name, "Suspended", timeout=60)
        cond = condition(job, "Suspended")
        self.assertIsNotNone(cond, job["status"])
        self.assertEqual(cond["status"], "True")
        time.sleep(1.5)   # nothing starts while it is suspended
        self.assertEqual(job_pods(c, name), [])
        self.assertEqual(phase_of(c, name), "Suspended")
        lines = c.kubectl("get", "tj", name).stdout.splitlines()
        self.assertEqual(lines[1].split()[1], "Suspended")

        c.kubectl("patch", "tj", name, "--type=merge", "-p",
                  json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
        c.wait_for(lambda: len(job_pods(c, name)) == 5, timeout=60,
                   what="the pods of %s after resuming" % name)
        job = self.wait_phase(name, "Succeeded", timeout=120)
        st = job["status"]
        self.assertEqual(st["observedGeneration"], job["metadata"]["generation"], st)
        self.assertEqual(job["metadata"]["generation"], 2)
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        # a resumed, finished job is no longer suspended
        cond = condition(job, "Suspended")
        self.assertTrue(cond is None or cond["status"] == "False",
                        "the Suspended condition is still True on a %s job: %s" % (
                            st["phase"], json.dumps(st["conditions"])))
        self.delete_job(name)

    # -- 7. the operator's own endpoints

    def test_health_ready_and_metrics(self):
        c, op, name = self.c, self.op, "metrics"
        self.assertEqual(op.http("/healthz")[0], 200)
        c.wait_for(lambda: op.http("/readyz")[0] == 200, timeout=30, what="/readyz 200")
        self.assertIn("caches synced", op.log())
        apply(c, training_job(name))
        self.wait_phase(name, "Succeeded", timeout=120)

        def scraped():
            m = op.metrics()
            ok = (metric(m, "kubeps_operator_jobs", phase="Succeeded") or 0) >= 1
            return ok and m
        m = c.wait_for(scraped, timeout=30, what='kubeps_operator_jobs{phase="Succeeded"} >= 1')
        self.assertGreater(metric(m, "kubeps_operator_reconciles_total"), 0)
        self.assertIsNotNone(metric(m, "kubeps_operator_reconcile_errors_total"))
        self.assertIsNotNone(metric(m, "kubeps_operator_queue_depth"))
        self.assertGreaterEqual(metric(m, "kubeps_operator_job_startup_seconds_count"), 1)
        for phase in ("Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"):
            self.assertIsNotNone(metric(m, "kubeps_operator_jobs", phase=phase), phase)
        # the gauge counts the jobs as they are
        jobs = c.client.get(TJ)["items"]
        succeeded = sum(1 for j in jobs if j.get("status", {}).get("phase") == "Succeeded")
        c.wait_for(lambda: metric(op.metrics(), "kubeps_operator_jobs", phase="Succeeded") ==
                   succeeded, timeout=30, what="jobs{phase=Succeeded} == %d" % succeeded)
        self.assertEqual(op.http("/readyz")[0], 200)
        self.delete_job(name)


class OperatorRestartTest(OperatorTestCase):
    """2. Killing the operator mid-job creates no second pod for a replica."""

    def setUp(self):
        self.c = new_cluster()
        self.op = None

    def tearDown(self):
        if self.op is not None:
            self.op.stop()
        self.c.stop()

    def test_operator_restart_mid_job_creates_no_duplicate_pods(self):
        c, name = self.c, "restart"
        violations, seen, stop = [], set(), threading.Event()

        def watch_pods():
            while not stop.is_set():
                try:
                    pods = job_pods(c, name)
                except Exception:   # the cluster is going away
                    return
                per_replica = {}
                for p in pods:
                    seen.add(p["metadata"]["name"])
                    if live(p):
                        per_replica.setdefault(replica_key(p), []).append(p["metadata"]["name"])
                for key, names in per_replica.items():
                    if len(names) > 1:
                        violations.append(names)
                time.sleep(0.05)
        # The poller lists 20 times a second for as long as the job lasts: on a
        # loaded machine that alone could overflow the default log of 2000.
        c.settings(request_log_size=50000)
        poller = threading.Thread(target=watch_pods, daemon=True)
        poller.start()
        try:
            self.op = Operator(c, name="operator-1")
            # Some 100 steps a second (each request held up to 10 ms): the job
            # still runs after the second kill, however long the test took to
            # get there on a loaded machine (650 a second would end it in 3 s).
            apply(c, slowed_down(training_job(name, epochs=4, max_steps=1800), most_ms=10))
            # kill it first while it creates the job's objects...
            c.wait_for(lambda: job_pods(c, name), timeout=60, what="a first pod")
            kills = [time.time()]
            self.op.signal(signal.SIGKILL)
            self.op.wait()
            self.op.stop()
            self.op = Operator(c, name="operator-2")
            # ...then while the job runs
            self.wait_phase(name, "Running", timeout=90)
            self.wait_running_pid(name, "worker-1")
            time.sleep(1.0)
            kills.append(time.time())
            self.op.signal(signal.SIGKILL)
            self.op.wait()
            self.op.stop()
            self.assertEqual(phase_of(c, name), "Running", "ended before the 2nd kill\n" + self.diag(name))
            time.sleep(0.5)
            self.op = Operator(c, name="operator-3")
            job = self.wait_phase(name, "Succeeded", timeout=120)
        finally:
            stop.set()
            poller.join(5)
        self.assertEqual(violations, [], "two live pods for one replica")
        self.assertEqual(sorted(seen), sorted("%s-%s" % (name, r) for r in (
            "scheduler-0", "server-0", "server-1", "worker-0", "worker-1")))
        st = job["status"]
        self.assertEqual(st["replicaStatuses"]["worker"],
                         {"active": 0, "succeeded": 2, "failed": 0, "restarts": 0}, st)
        requests = c.requests()
        self.assertLess(len(requests), 50000, "the request log overflowed; cannot count")
        posts = [r for r in requests if r["verb"] == "POST" and
                 r["path"].split("?")[0] == PODS and r["user"] == OPERATOR_USER]
        codes = [r["code"] for r in posts]
        # A POST the kill cut (0) may have made its pod before the cut: then
        # that pod has no 201 of its own, and no second POST either.
        self.assertLessEqual(codes.count(201), 5, codes)
        self.assertGreaterEqual(codes.count(201) + codes.count(0), 5, codes)
        # 0: a POST whose connection the kill cut (the stand-in logs when it noticed)
        self.assertEqual([r for r in posts if r["code"] not in (201, 409) and not (
            r["code"] == 0 and any(0 <= r["time"] - k < 5 for k in kills))], [], codes)


class WatchRecoveryTest(OperatorTestCase):
    """3. Watches cut and their history compacted (410 Gone) while the
    operator is not looking: it lists again and misses nothing."""

    def setUp(self):
        # no periodic bookmarks: the operator's resourceVersion stays behind
        self.c = new_cluster(bookmark_interval=3600)
        self.op = None

    def tearDown(self):
        if self.op is not None:
            self.op.signal(signal.SIGCONT)
            self.op.stop()
        self.c.stop()

    def test_watch_cut_and_410_gone(self):
        c, name = self.c, "watchcut"
        self.op = Operator(c)
        # Some 10 s at 100 steps a second (each request held up to 10 ms): long
        # enough to outlast a relist on a loaded machine too.
        apply(c, slowed_down(training_job(name, epochs=6, max_steps=1000), most_ms=10))
        self.wait_phase(name, "Running", timeout=90)
        # the connections dropped while it runs: it lists and watches again
        cut = c.hook("cut-watches", mode="abort")
        self.assertGreaterEqual(cut["cut"], 2)

        cut_seq = max(r["seq"] for r in c.requests()
                      if r["path"].startswith("/_emulator/cut-watches"))

        def relisted():
            lists = [r["path"] for r in c.requests() if r["seq"] > cut_seq and
                     r["user"] == OPERATOR_USER and r["verb"] == "GET" and "watch=" not in r["path"]]
            return (any(p.startswith(JOBS_LIST) for p in lists) and
                    any(p.startswith(PODS_LIST) for p in lists))

        def watching_again():
            watches = [w["path"] for w in c.watches()
                       if w["user"] == OPERATOR_USER and w["openedAfter"] > cut_seq]
            return (any(p.startswith(JOBS_LIST) for p in watches) and
                    any(p.startswith(PODS_LIST) for p in watches))
        c.wait_for(relisted, timeout=30, what="the operator to list again after the cut")
        c.wait_for(watching_again, timeout=30, what="the operator to watch again after its list")
        # now the operator stops looking; the job's pods all finish meanwhile,
        # the history is compacted and the streams end cleanly, so that its
        # next watch from where it stopped gets 410 Gone
        self.assertEqual(phase_of(c, name), "Running")
        self.op.signal(signal.SIGSTOP)
        try:
            c.wait_for(lambda: [p["status"].get("phase") for p in job_pods(c, name)] ==
                       ["Succeeded"] * 5, timeout=120, what="every pod of the job Succeeded")
            c.client.post("/api/v1/namespaces/default/configmaps",
                          {"metadata": {"name": "bump"}})
            compacted = int(c.hook("compact")["compactedResourceVersion"])
            c.hook("cut-watches")
            self.assertEqual(phase_of(c, name), "Running")
        finally:
            self.op.signal(signal.SIGCONT)
        job = self.wait_phase(name, "Succeeded", timeout=90)
        # the status agrees with the pods as they ended
        pods = job_pods(c, name)
        st = job["status"]
        for role, key in ROLES.items():
            mine = [p for p in pods if replica_key(p)[0] == role]
            counted = st["replicaStatuses"][key]
            self.assertEqual(counted["succeeded"],
                             sum(p["status"]["phase"] == "Succeeded" for p in mine), (role, st))
            self.assertEqual(counted["failed"], 0, (role, st))
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.assertEqual(st["workers"], "2/2")
        # after the compaction, for jobs and pods: a watch from where the operator stopped
        # (410 Gone), then a fresh list; the cut watch first, if one was open (one that had
        # failed, e.g. on a rotated token, was still waiting to be opened again)
        def requests_after_compaction(collection):
            requests = c.requests()
            at = max(i for i, r in enumerate(requests)
                     if r["path"].startswith("/_emulator/compact"))
            return [r["path"] for r in requests[at + 1:] if r["user"] == OPERATOR_USER and
                    r["verb"] == "GET" and r["path"].startswith(collection)]

        def relisted_after_gone(collection):
            mine = requests_after_compaction(collection)
            stale = [i for i, p in enumerate(mine) if "watch=1" in p and
                     int(re.search(r"resourceVersion=(\d+)", p).group(1)) < compacted]
            return bool(stale) and any("watch=" not in p and i > stale[0]
                                       for i, p in enumerate(mine))
        for collection in (JOBS_LIST, PODS_LIST):
            try:
                c.wait_for(lambda: relisted_after_gone(collection), timeout=30,
                           what="a list of %s after the 410" % collection)
            except AssertionError as e:
                self.fail("%s: %s (compacted at %d)\n%s" % (
                    e, requests_after_compaction(collection), compacted, self.diag()))
        self.assertEqual(self.op.proc.poll(), None, "the operator died")


if __name__ == "__main__":
    unittest.main()
