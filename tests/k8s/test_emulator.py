"""Tests of the Kubernetes emulator (the emulator package: its API server and
kubelet) driven by the real kubectl and by direct REST calls, and of the
manifests in deploy/.

    python3 -m unittest -v test_emulator      (from tests/k8s)
"""
import json
import os
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import SOURCE_DIR, Cluster, KubectlError  # noqa: E402
from emulator.client import ApiError  # noqa: E402

DEPLOY = os.path.join(SOURCE_DIR, "deploy")
TJ = "/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs"


def job(name, **spec):
    body = {"dataset": {"path": "/data"}}
    body.update(spec)
    return {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name}, "spec": body}


def yaml_of(obj):
    return json.dumps(obj)   # JSON is YAML


class EmulatorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(backoff=0.3).start()
        cls.c.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    # -- CRD and kubectl

    def test_crd_apply_get_describe(self):
        c = self.c
        out = c.kubectl("get", "crd").stdout
        self.assertIn("trainingjobs.kubeps.io", out)
        out = c.kubectl("apply", "-f", os.path.join(DEPLOY, "examples", "fashion-mnist.yaml"))
        self.assertIn("trainingjob.kubeps.io/fashion-mnist created", out.stdout)
        out = c.kubectl("apply", "-f", os.path.join(DEPLOY, "examples", "fashion-mnist.yaml"))
        self.assertIn("unchanged", out.stdout)
        tj = c.kubectl("get", "trainingjob", "fashion-mnist", "-o", "json", json_output=True)
        # defaults of the schema, as the parser's
        self.assertEqual(tj["spec"]["optimizer"]["beta2"], 0.999)
        self.assertEqual(tj["spec"]["runPolicy"], {"restartPolicy": "OnFailure", "backoffLimit": 3})
        self.assertEqual(tj["spec"]["checkpoint"], {"intervalSteps": 100, "resume": True})
        self.assertEqual(tj["spec"]["bigArrayBound"], 1000000)
        # printer columns, from status written by a "controller"
        c.client.patch(TJ + "/fashion-mnist/status", {"status": {
            "phase": "Running", "workers": "2/2", "step": 120, "stepsPerSecond": "40.5"}})
        lines = c.kubectl("get", "tj").stdout.splitlines()
        columns = ["NAME", "PHASE", "WORKERS", "STEP", "STEPS/S", "PROGRESS", "ETA", "LOSS",
                   "ACCURACY", "AGE"]
        self.assertEqual(lines[0].split(), columns)
        # fields not written yet (progress, ...) are empty cells
        self.assertEqual(lines[1].split()[:5], ["fashion-mnist", "Running", "2/2", "120", "40.5"])
        wide = c.kubectl("get", "tj", "-o", "wide").stdout.splitlines()[0]
        self.assertEqual(wide.split(), columns)   # no column of the CRD is wide-only
        # an event about the job shows in describe
        c.client.post("/api/v1/namespaces/default/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "fashion-mnist.1", "namespace": "default"},
            "involvedObject": {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob",
                               "name": "fashion-mnist", "namespace": "default",
                               "uid": tj["metadata"]["uid"]},
            "reason": "CreatedPods", "message": "created 5 pods", "type": "Normal",
            "source": {"component": "kubeps-operator"}, "count": 1,
            "firstTimestamp": tj["metadata"]["creationTimestamp"],
            "lastTimestamp": tj["metadata"]["creationTimestamp"]})
        out = c.kubectl("describe", "tj", "fashion-mnist").stdout
        self.assertIn("CreatedPods", out)
        self.assertIn("created 5 pods", out)
        self.assertIn("Phase:", out)
        # a spec change through kubectl apply bumps the generation
        path = os.path.join(c.dir, "fm.yaml")
        with open(os.path.join(DEPLOY, "examples", "fashion-mnist.yaml")) as f:
            text = f.read().replace("epochs: 3", "epochs: 4")
        with open(path, "w") as f:
            f.write(text)
        self.assertIn("configured", c.kubectl("apply", "-f", path).stdout)
        tj2 = c.client.get(TJ + "/fashion-mnist")
        self.assertEqual(tj2["metadata"]["generation"], 2)
        self.assertEqual(tj2["status"]["phase"], "Running")
        c.kubectl("delete", "-f", path)

    def test_invalid_jobs_rejected_with_field_errors(self):
        c = self.c
        bad = job("bad", replicaSpecs={"worker": {"replicas": -1}}, mode="fast",
                  optimizer={"learningRate": 0, "beta1": 1})
        r = c.kubectl("apply", "-f", "-", input=yaml_of(bad), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('The TrainingJob "bad" is invalid', r.stderr)
        self.assertIn("spec.replicaSpecs.worker.replicas: Invalid value: -1: "
                      "spec.replicaSpecs.worker.replicas in body should be greater than or "
                      "equal to 1", r.stderr)
        self.assertIn('spec.mode: Unsupported value: "fast": supported values: "sync", "async"',
                      r.stderr)
        self.assertIn("spec.optimizer.learningRate in body should be greater than 0", r.stderr)
        self.assertIn("spec.optimizer.beta1 in body should be less than 1", r.stderr)
        # unknown field: kubectl's default field validation is Strict
        r = c.kubectl("apply", "-f", "-", input=yaml_of(job("bad", optimiser={})), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn('strict decoding error: unknown field "spec.optimiser"', r.stderr)
        r = c.kubectl("apply", "-f", "-", input=yaml_of(job("bad", replicaSpecs={
            "scheduler": {"replicas": 1}})), check=False)
        self.assertIn('unknown field "spec.replicaSpecs.scheduler.replicas"', r.stderr)
        # missing dataset.path; a wrong type
        r = c.kubectl("create", "-f", "-", input=yaml_of({
            "apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "bad"},
            "spec": {"dataset": {}, "batchSize": "64"}}), check=False)
        self.assertIn("spec.dataset.path: Required value", r.stderr)
        self.assertIn("spec.batchSize in body must be of type integer", r.stderr)
        # the Status object itself
        with self.assertRaises(ApiError) as e:
            c.client.post(TJ, job("bad", epochs=0))
        st = e.exception.status
        self.assertEqual((st["code"], st["reason"]), (422, "Invalid"))
        self.assertEqual(st["details"]["causes"][0]["field"], "spec.epochs")
        # with --validate=false the unknown field is pruned silently, as upstream
        c.kubectl("apply", "--validate=false", "-f", "-", input=yaml_of(job("pruned", foo=1)))
        self.assertNotIn("foo", c.client.get(TJ + "/pruned")["spec"])
        c.kubectl("delete", "tj", "pruned")

    def test_status_subresource_and_conflicts(self):
        c = self.c
        obj = c.client.post(TJ, job("st"))
        self.assertNotIn("status", obj)
        self.assertEqual(obj["metadata"]["generation"], 1)
        obj["status"] = {"phase": "Running", "step": 7}
        after = c.client.put(TJ + "/st/status", obj)
        self.assertEqual(after["metadata"]["generation"], 1)
        self.assertEqual(after["status"]["step"], 7)
        self.assertGreater(int(after["metadata"]["resourceVersion"]),
                           int(obj["metadata"]["resourceVersion"]))
        # status is ignored on the main resource, and spec on /status
        after["status"]["phase"] = "Failed"
        after["spec"]["epochs"] = 9
        main = c.client.put(TJ + "/st", after)
        self.assertEqual(main["status"]["phase"], "Running")
        self.assertEqual(main["metadata"]["generation"], 2)
        main["spec"]["epochs"] = 11
        main["status"]["phase"] = "Succeeded"
        st = c.client.put(TJ + "/st/status", main)
        self.assertEqual((st["spec"]["epochs"], st["status"]["phase"]), (9, "Succeeded"))
        self.assertEqual(st["metadata"]["generation"], 2)
        # a stale resourceVersion is a 409 Conflict
        with self.assertRaises(ApiError) as e:
            c.client.put(TJ + "/st", after)
        self.assertEqual((e.exception.code, e.exception.reason), (409, "Conflict"))
        self.assertIn("the object has been modified", e.exception.status["message"])
        # unconditional update of a custom resource is refused, as upstream
        del st["metadata"]["resourceVersion"]
        with self.assertRaises(ApiError) as e:
            c.client.put(TJ + "/st", st)
        self.assertEqual(e.exception.code, 422)
        # an update that changes nothing writes nothing
        cur = c.client.get(TJ + "/st")
        same = c.client.put(TJ + "/st", cur)
        self.assertEqual(same["metadata"]["resourceVersion"], cur["metadata"]["resourceVersion"])
        # create twice, get what is not there
        with self.assertRaises(ApiError) as e:
            c.client.post(TJ, job("st"))
        self.assertEqual((e.exception.code, e.exception.reason), (409, "AlreadyExists"))
        self.assertEqual(e.exception.status["details"]["name"], "st")
        with self.assertRaises(ApiError) as e:
            c.client.get(TJ + "/nope")
        self.assertEqual((e.exception.code, e.exception.status["message"]),
                         (404, 'trainingjobs.kubeps.io "nope" not found'))
        # merge patch and json patch on /status
        c.client.patch(TJ + "/st/status", {"status": {"workers": "1/2"}})
        c.client.patch(TJ + "/st/status", [{"op": "replace", "path": "/status/step", "value": 8}],
                       kind="json")
        st = c.client.get(TJ + "/st")
        self.assertEqual((st["status"]["workers"], st["status"]["step"],
                          st["metadata"]["generation"]), ("1/2", 8, 2))
        c.client.delete(TJ + "/st")

    # -- pods through the kubelet

    def test_pod_runs_and_fails_with_exit_code(self):
        c = self.c
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "exit3"}, "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", "echo hi from $(NAME); exit 3"],
                            "env": [{"name": "NAME", "valueFrom": {"fieldRef": {
                                "fieldPath": "metadata.name"}}}]}]}}
        self.assertIn("pod/exit3 created",
                      c.kubectl("apply", "-f", "-", input=yaml_of(pod)).stdout)
        c.wait_for(lambda: c.pod("exit3")["status"]["phase"] == "Failed", what="Failed")
        got = c.kubectl("get", "pod", "exit3", "-o", "json", json_output=True)
        term = got["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual((term["exitCode"], term["reason"]), (3, "Error"))
        self.assertTrue(got["status"]["podIP"].startswith("127."))
        self.assertEqual(c.kubectl("logs", "exit3").stdout, "hi from exit3\n")
        line = c.kubectl("get", "pod", "exit3").stdout.splitlines()[1].split()
        self.assertEqual(line[:4], ["exit3", "0/1", "Error", "0"])
        c.kubectl("delete", "pod", "exit3")

    def test_a_pods_tolerations_may_only_be_added_to(self):
        """Kubernetes' pod update rule: a toleration may be added, but one
        there stays as it is (tolerationSeconds aside)."""
        c = self.c
        gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        spot = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tolerant"}, "spec": {
            "restartPolicy": "Never", "tolerations": [gpu],
            "containers": [{"name": "main", "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", "sleep 30"]}]}}
        c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        c.kubectl("patch", "pod", "tolerant", "--type", "merge", "-p",
                  json.dumps({"spec": {"tolerations": [gpu, spot]}}))
        self.assertEqual(c.pod("tolerant")["spec"]["tolerations"][-1], spot)
        for changed in ([spot], [dict(gpu, effect="NoExecute"), spot]):
            with self.assertRaises(KubectlError) as refused:
                c.kubectl("patch", "pod", "tolerant", "--type", "merge", "-p",
                          json.dumps({"spec": {"tolerations": changed}}))
            self.assertIn("spec.tolerations: Forbidden: existing toleration can not be modified "
                          "except its tolerationSeconds", str(refused.exception))
        c.kubectl("delete", "pod", "tolerant", "--grace-period=0")

    def test_restart_policy_and_graceful_delete(self):
        c = self.c
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crash"}, "spec": {
            "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "image": "x", "command": [
                "/bin/sh", "-c", "trap 'echo term; exit 0' TERM; "
                "if [ -f /tmp/ran-$(UID) ]; then while :; do sleep 0.1; done; fi; "
                "touch /tmp/ran-$(UID); exit 1"],
                "env": [{"name": "UID", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.uid"}}}]}]}}
        c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        marker = "/tmp/ran-" + c.pod("crash")["metadata"]["uid"]
        self.addCleanup(lambda: os.path.exists(marker) and os.unlink(marker))

        def restarted():
            p = c.pod("crash")
            cs = p["status"].get("containerStatuses", [{}])[0]
            return cs.get("restartCount") == 1 and "running" in cs.get("state", {}) and p
        p = c.wait_for(restarted, what="one restart")
        self.assertEqual(p["status"]["phase"], "Running")
        self.assertEqual(p["status"]["containerStatuses"][0]["lastState"]["terminated"]
                         ["exitCode"], 1)
        os.unlink(marker)
        t0 = time.time()
        c.kubectl("delete", "pod", "crash")   # waits until the kubelet has finished
        self.assertLess(time.time() - t0, 5)
        with self.assertRaises(ApiError):
            c.pod("crash")

    # -- native sidecars (Kubernetes 1.29+)

    def sidecar_pod(self, name, sidecar, main, inits=()):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "shared", "emptyDir": {"medium": "Memory"}}],
            "initContainers": list(inits) + [dict(sidecar, name="side", image="x",
                                                  restartPolicy="Always",
                                                  volumeMounts=[{"name": "shared",
                                                                 "mountPath": "/shared"}])],
            "containers": [{"name": "main", "image": "x", "command": ["/bin/sh", "-c", main],
                            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}]}}

    def test_native_sidecar_starts_first_and_ends_after_the_main_container(self):
        c = self.c
        first = {"name": "first", "image": "x", "command": [
            "/bin/sh", "-c", "echo first >> /shared/order"],
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}
        sidecar = {"command": ["/bin/sh", "-c",
                               "trap 'echo got TERM; exit 7' TERM; sleep 1; "
                               "echo side-up >> /shared/order; touch /shared/ready; "
                               "while :; do sleep 0.1; done"],
                   "startupProbe": {"exec": {"command": ["test", "-f", "/shared/ready"]},
                                    "periodSeconds": 1, "failureThreshold": 30}}
        pod = self.sidecar_pod("sidecar-order", sidecar,
                               "echo main >> /shared/order; cat /shared/order; sleep 0.5",
                               inits=[first])
        c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        # the init container, then the sidecar (started once its probe passed)
        # and only then the main container, all seeing one memory volume
        p = c.wait_for(lambda: c.pod("sidecar-order")["status"]["phase"] in (
            "Succeeded", "Failed") and c.pod("sidecar-order"), what="the pod's end")
        self.assertEqual(c.kubectl("logs", "sidecar-order", "-c", "main").stdout,
                         "first\nside-up\nmain\n")
        # the pod's phase is the main container's: the sidecar, stopped by
        # SIGTERM after it, exited 7 and does not count
        self.assertEqual(p["status"]["phase"], "Succeeded")
        inits = {s["name"]: s for s in p["status"]["initContainerStatuses"]}
        self.assertEqual(list(inits), ["first", "side"])
        self.assertEqual(inits["side"]["state"]["terminated"]["exitCode"], 7)
        self.assertEqual(inits["side"]["restartCount"], 0)
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0)
        self.assertIn("got TERM", c.kubectl("logs", "sidecar-order", "-c", "side").stdout)
        # kubectl counts the sidecar among the containers, not its exit
        line = c.kubectl("get", "pod", "sidecar-order").stdout.splitlines()[1].split()
        self.assertEqual(line[:4], ["sidecar-order", "0/2", "Completed", "0"])
        c.kubectl("delete", "pod", "sidecar-order")

    def test_native_sidecar_restarts_when_it_dies_whatever_the_pod_policy(self):
        c = self.c
        sidecar = {"command": ["/bin/sh", "-c",
                               "if [ -f /shared/once ]; then touch /shared/again; "
                               "while :; do sleep 0.1; done; fi; touch /shared/once; exit 1"]}
        pod = self.sidecar_pod("sidecar-restart", sidecar,
                               "while [ ! -f /shared/again ]; do sleep 0.1; done; exit 3")
        c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        p = c.wait_for(lambda: c.pod("sidecar-restart")["status"]["phase"] in (
            "Succeeded", "Failed") and c.pod("sidecar-restart"), what="the pod's end")
        side = p["status"]["initContainerStatuses"][0]
        self.assertGreaterEqual(side["restartCount"], 1)
        self.assertEqual(side["lastState"]["terminated"]["exitCode"], 1)
        self.assertIn("terminated", side["state"])   # stopped once the main one ended
        # restartPolicy Never: the main container's exit 3 fails the pod
        self.assertEqual(p["status"]["phase"], "Failed")
        c.kubectl("delete", "pod", "sidecar-restart")

    def test_restart_policy_only_on_init_containers(self):
        c = self.c
        pod = self.sidecar_pod("bad-policy", {"command": ["true"]}, "true")
        pod["spec"]["containers"][0]["restartPolicy"] = "Always"
        with self.assertRaises(KubectlError) as e:
            c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        self.assertIn("spec.containers[0].restartPolicy: Forbidden: may not be set for "
                      "non-init containers", str(e.exception))
        pod = self.sidecar_pod("bad-policy", {"command": ["true"]}, "true")
        pod["spec"]["initContainers"][0]["restartPolicy"] = "OnFailure"
        with self.assertRaises(KubectlError) as e:
            c.kubectl("apply", "-f", "-", input=yaml_of(pod))
        self.assertIn('spec.initContainers[0].restartPolicy: Unsupported value: "OnFailure"',
                      str(e.exception))

    def test_owner_references_cascade(self):
        c = self.c
        owner = c.client.post(TJ, job("owner"))
        ref = {"apiVersion": "kubeps.io/v1alpha1", "kind": "TrainingJob", "name": "owner",
               "uid": owner["metadata"]["uid"], "controller": True,
               "blockOwnerDeletion": True}
        pod = c.client.post("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "owned", "labels": {"kubeps.io/job-name": "owner"},
                "ownerReferences": [ref]},
            "spec": {"terminationGracePeriodSeconds": 3, "containers": [{
                "name": "main", "image": "x", "command": ["/bin/sh", "-c", "exec sleep 60"]}]}})
        c.client.post("/api/v1/namespaces/default/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {
                "name": "owned", "ownerReferences": [ref]},
            "spec": {"clusterIP": "None", "selector": {"kubeps.io/job-name": "owner"}}})
        c.client.post("/api/v1/namespaces/default/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {
                "name": "owned", "ownerReferences": [ref]}, "stringData": {"token": "t"}})
        c.wait_for(lambda: c.pod("owned")["status"]["phase"] == "Running", what="Running")
        c.kubectl("delete", "tj", "owner")
        for kind in ("services", "secrets", "pods"):
            c.wait_for(lambda: not any(o["metadata"]["name"] == "owned" for o in c.client.get(
                "/api/v1/namespaces/default/" + kind)["items"]), what=kind + " collected")
        del pod

    def test_names_are_validated_as_kubernetes_does(self):
        c, long = self.c, "s" + "x" * 63
        cases = [
            ("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": long},
                          "spec": {"clusterIP": "None"}}, "metadata.name", "no more than 63"),
            ("services", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc"},
                          "spec": {"clusterIP": "None"}}, "metadata.name", "DNS-1035 label"),
            ("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
                "hostname": long, "containers": [{"name": "m", "image": "x"}]}},
             "spec.hostname", "no more than 63"),
            ("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "p", "labels": {"kubeps.io/job-name": long}}, "spec": {
                "containers": [{"name": "m", "image": "x"}]}}, "metadata.labels", "no more than 63"),
        ]
        for kind, obj, field, message in cases:
            with self.assertRaises(ApiError) as e:
                c.client.post("/api/v1/namespaces/default/" + kind, obj)
            self.assertEqual(e.exception.code, 422)
            self.assertIn(field + ": Invalid value", str(e.exception))
            self.assertIn(message, str(e.exception))

    def test_services_resolve_and_proxy(self):
        c = self.c
        server = ("import http.server, os\n"
                  "class H(http.server.BaseHTTPRequestHandler):\n"
                  "    def do_GET(self):\n"
                  "        b = os.environ['HOSTNAME'].encode()\n"
                  "        self.send_response(200); self.send_header('Content-Length', len(b))\n"
                  "        self.end_headers(); self.wfile.write(b)\n"
                  "http.server.HTTPServer((os.environ['POD_IP'], 8000), H).serve_forever()\n")
        c.client.post("/api/v1/namespaces/default/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"clusterIP": "None", "selector": {"app": "web"},
                     "ports": [{"port": 8000}]}})
        c.client.post("/api/v1/namespaces/default/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "webvip"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8000}]}})
        c.client.post("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0",
                                                           "labels": {"app": "web"}},
            "spec": {"hostname": "web-0", "subdomain": "web", "terminationGracePeriodSeconds": 1,
                     "containers": [{
                         "name": "main", "image": "python", "command": [sys.executable, "-c",
                                                                        server],
                         "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {
                             "fieldPath": "status.podIP"}}}],
                         "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1}}]}})
        c.wait_for(lambda: c.pod("web-0")["status"]["containerStatuses"][0]["ready"],
                   what="web-0 ready")
        client = ("import urllib.request, socket\n"
                  "for url in ['http://web-0.web:8000/', 'http://web.default.svc:8000/',"
                  " 'http://webvip/', 'http://webvip.default.svc.cluster.local/']:\n"
                  "    print(url, urllib.request.urlopen(url, timeout=5).read().decode())\n")
        c.client.post("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "python", "command": [sys.executable, "-c", client]}]}})
        p = c.wait_for(lambda: c.pod("probe")["status"]["phase"] in ("Succeeded", "Failed") and
                       c.pod("probe"), what="probe done")
        logs = c.kubectl("logs", "probe").stdout
        self.assertEqual(p["status"]["phase"], "Succeeded", logs)
        self.assertEqual(logs.count("web-0"), 5, logs)
        c.kubectl("delete", "pod", "web-0", "probe")
        c.kubectl("delete", "svc", "web", "webvip")

    def test_secret_env_and_volume(self):
        c = self.c
        c.client.post("/api/v1/namespaces/default/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok"},
            "stringData": {"token": "s3cret"}})
        mount = "/var/run/kubeps-emulator-test/token"
        c.client.post("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sec"},
            "spec": {"restartPolicy": "Never",
                     "volumes": [{"name": "t", "secret": {"secretName": "tok"}}],
                     "containers": [{
                         "name": "main", "image": "x", "command": [
                             "/bin/sh", "-c", "echo $TOKEN; cat %s/token" % mount],
                         "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {
                             "name": "tok", "key": "token"}}}],
                         "volumeMounts": [{"name": "t", "mountPath": mount,
                                           "readOnly": True}]}]}})
        c.wait_for(lambda: c.pod("sec")["status"]["phase"] == "Succeeded", what="Succeeded")
        self.assertEqual(c.kubectl("logs", "sec").stdout, "s3cret\ns3cret")
        c.kubectl("delete", "pod", "sec")
        c.kubectl("delete", "secret", "tok")

    def test_resource_field_refs_round_up_over_their_divisor(self):
        # As the kubelet: 500m of CPU over a divisor of 1 is 1; a missing
        # request is the limit, one with neither is 0.
        c = self.c
        refs = {"HALF": ("requests.cpu", "1"), "LIMIT": ("limits.cpu", "1"),
                "MILLI": ("requests.cpu", "1m"), "MEM": ("limits.memory", "1Mi")}
        c.client.post("/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "res"},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "x",
                 "command": ["/bin/sh", "-c", "echo $HALF $LIMIT $MILLI $MEM"],
                 "resources": {"requests": {"cpu": "500m"},
                               "limits": {"cpu": "1500m", "memory": "1536Ki"}},
                 "env": [{"name": n, "valueFrom": {"resourceFieldRef": {
                     "resource": r, "divisor": d}}} for n, (r, d) in refs.items()]},
                {"name": "bare", "image": "x", "command": ["/bin/sh", "-c", "echo $NONE"],
                 "env": [{"name": "NONE", "valueFrom": {"resourceFieldRef": {
                     "resource": "requests.cpu", "divisor": "1"}}}]}]}})
        c.wait_for(lambda: c.pod("res")["status"]["phase"] == "Succeeded", what="Succeeded")
        self.assertEqual(c.kubectl("logs", "res", "-c", "main").stdout.strip(), "1 2 500 2")
        self.assertEqual(c.kubectl("logs", "res", "-c", "bare").stdout.strip(), "0")
        c.kubectl("delete", "pod", "res")

    # -- list, watch, selectors

    def test_label_and_field_selectors(self):
        c = self.c
        for name, labels in (("a", {"app": "x", "tier": "ps"}), ("b", {"app": "x", "tier": "worker"}),
                             ("d", {"app": "y"})):
            c.client.post("/api/v1/namespaces/default/configmaps", {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "sel-" + name, "labels": labels}})

        def names(selector, field=None):
            path = "/api/v1/namespaces/default/configmaps?labelSelector=" + \
                   __import__("urllib.parse").parse.quote(selector)
            if field:
                path += "&fieldSelector=" + field
            return sorted(o["metadata"]["name"] for o in c.client.get(path)["items"]
                          if o["metadata"]["name"].startswith("sel-"))
        self.assertEqual(names("app=x"), ["sel-a", "sel-b"])
        self.assertEqual(names("app==x,tier!=ps"), ["sel-b"])
        self.assertEqual(names("tier in (ps,worker)"), ["sel-a", "sel-b"])
        self.assertEqual(names("app,tier notin (ps)"), ["sel-b", "sel-d"])
        self.assertEqual(names("!tier"), ["sel-d"])
        self.assertEqual(names("tier"), ["sel-a", "sel-b"])
        self.assertEqual(names("", "metadata.name=sel-d"), ["sel-d"])
        out = c.kubectl("get", "cm", "-l", "app=x", "-o", "name").stdout.split()
        self.assertEqual(out, ["configmap/sel-a", "configmap/sel-b"])
        with self.assertRaises(ApiError) as e:
            c.client.get("/api/v1/configmaps?labelSelector=a%20in%20b")
        self.assertEqual(e.exception.code, 400)
        c.kubectl("delete", "cm", "-l", "app in (x,y)")
        self.assertEqual(names("app"), [])

    def test_watch_bookmarks_gone_and_cut(self):
        c = self.c
        base = "/api/v1/namespaces/default/configmaps"
        lst = c.client.get(base)
        rv = lst["metadata"]["resourceVersion"]
        events = []
        done = threading.Event()

        def watch():
            for ev in c.client.watch(base + "?watch=1&allowWatchBookmarks=true&labelSelector="
                                     "w%3D1&resourceVersion=" + rv):
                events.append(ev)
            done.set()
        threading.Thread(target=watch, daemon=True).start()
        c.client.post(base, {"metadata": {"name": "w1", "labels": {"w": "1"}}})
        c.client.post(base, {"metadata": {"name": "w2"}})   # does not match
        c.client.patch(base + "/w1", {"data": {"k": "v"}})
        c.client.patch(base + "/w1", {"metadata": {"labels": {"w": "2"}}})  # leaves selector
        c.wait_for(lambda: len(events) >= 3, what="3 events")
        c.hook("bookmark")
        c.wait_for(lambda: any(e["type"] == "BOOKMARK" for e in events), what="a bookmark")
        self.assertEqual([e["type"] for e in events[:3]], ["ADDED", "MODIFIED", "DELETED"])
        bm = next(e for e in events if e["type"] == "BOOKMARK")
        self.assertEqual(bm["object"]["kind"], "ConfigMap")
        self.assertGreaterEqual(int(bm["object"]["metadata"]["resourceVersion"]),
                                int(events[2]["object"]["metadata"]["resourceVersion"]))
        # cutting the watches ends the stream
        c.hook("cut-watches")
        self.assertTrue(done.wait(5))
        # resuming from the last resourceVersion replays nothing lost
        c.client.delete(base + "/w2")
        evs = []
        for ev in c.client.watch(base + "?watch=1&timeoutSeconds=1&resourceVersion=" +
                                 events[2]["object"]["metadata"]["resourceVersion"]):
            evs.append(ev)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("DELETED", "w2")])
        # after a compaction the old resourceVersion is gone: 410 in an ERROR event
        c.hook("compact")
        evs = list(c.client.watch(base + "?watch=1&resourceVersion=" + rv))
        self.assertEqual(evs[0]["type"], "ERROR")
        self.assertEqual((evs[0]["object"]["code"], evs[0]["object"]["reason"]), (410, "Expired"))
        with self.assertRaises(ApiError) as e:
            c.client.get(base + "?resourceVersionMatch=Exact&resourceVersion=" + rv)
        self.assertEqual(e.exception.code, 410)
        # a fresh list + watch works again
        fresh = c.client.get(base)["metadata"]["resourceVersion"]
        evs = list(c.client.watch(base + "?watch=1&timeoutSeconds=1&resourceVersion=" + fresh))
        self.assertEqual(evs, [])
        # without a resourceVersion the watch starts with the current objects
        evs = list(c.client.watch(base + "?watch=1&timeoutSeconds=1&fieldSelector="
                                  "metadata.name%3Dw1"))
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", "w1")])
        c.client.delete(base + "/w1")

    def test_strategic_merge_apply_of_builtin(self):
        c = self.c
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {
                   "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
                       {"name": "one", "image": "i:1", "env": [{"name": "A", "value": "1"}]},
                       {"name": "two", "image": "j:1"}]}}}}
        c.kubectl("apply", "-f", "-", input=yaml_of(dep))
        live = c.client.get("/apis/apps/v1/namespaces/default/deployments/d")
        live["spec"]["template"]["spec"]["containers"][1]["imagePullPolicy"] = "Never"
        c.client.put("/apis/apps/v1/namespaces/default/deployments/d", live)  # another writer
        dep["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "B", "value": "2"}]
        dep["spec"]["template"]["spec"]["containers"][1]["image"] = "j:2"
        self.assertIn("configured", c.kubectl("apply", "-f", "-", input=yaml_of(dep)).stdout)
        got = c.client.get("/apis/apps/v1/namespaces/default/deployments/d")
        cs = got["spec"]["template"]["spec"]["containers"]
        self.assertEqual(cs[0]["env"], [{"name": "B", "value": "2"}])
        self.assertEqual((cs[1]["image"], cs[1]["imagePullPolicy"]), ("j:2", "Never"))
        self.assertEqual(got["metadata"]["generation"], 3)
        c.kubectl("delete", "deployment", "d")


class DeployManifestsTest(unittest.TestCase):
    """deploy/ applies as a user types it, and the operator's service account
    can do what the operator needs and no more."""

    def test_rbac(self):
        with Cluster(kubelet=False, rbac=True) as c:
            out = c.kubectl("apply", "-f", os.path.join(DEPLOY, "crd") + "/",
                            "-f", os.path.join(DEPLOY, "rbac") + "/",
                            "-f", os.path.join(DEPLOY, "operator") + "/").stdout
            for what in ("customresourcedefinition.apiextensions.k8s.io/trainingjobs.kubeps.io",
                         "serviceaccount/kubeps-operator", "clusterrole.rbac.authorization.k8s.io"
                         "/kubeps-system-kubeps-operator", "deployment.apps/kubeps-operator"):
                self.assertIn(what, out)
            dep = c.kubectl("get", "deploy", "-n", "kubeps-system", "kubeps-operator", "-o",
                            "json", json_output=True)
            self.assertEqual(dep["spec"]["replicas"], 2)
            self.assertIn("--leader-elect", dep["spec"]["template"]["spec"]["containers"][0]["args"])
            c.kubectl("apply", "-f", os.path.join(DEPLOY, "examples") + "/")
            # what the operator does
            op = lambda *a, **k: c.kubectl(*a, operator=True, **k)  # noqa: E731
            examples = [f for f in os.listdir(os.path.join(DEPLOY, "examples")) if f.endswith(".yaml")]
            self.assertEqual(len(op("get", "tj", "-A", "-o", "json",
                                    json_output=True)["items"]), len(examples))
            op("get", "pods", "-A", "-l", "kubeps.io/job-name")
            op("create", "secret", "generic", "fm-token", "-n", "default",
               "--from-literal=token=x")
            op("create", "service", "clusterip", "fm-ps", "-n", "default", "--clusterip=None")
            op("patch", "tj", "fashion-mnist", "-n", "default", "--subresource=status",
               "--type=merge", "-p", '{"status":{"phase":"Running"}}')
            op("create", "-f", "-", input=yaml_of({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "kubeps-operator", "namespace": "kubeps-system"},
                "spec": {"holderIdentity": "a"}}))
            # and what it may not
            for args in (("get", "configmaps", "-A"), ("delete", "deploy", "-n", "kubeps-system", "kubeps-operator"),
                         ("get", "secrets", "-A"), ("delete", "lease", "-n", "kubeps-system",
                                                    "kubeps-operator")):
                r = op(*args, check=False)
                self.assertNotEqual(r.returncode, 0, args)
                self.assertIn("Forbidden", r.stderr)
            r = op("get", "configmaps", check=False)
            self.assertIn('User "system:serviceaccount:kubeps-system:kubeps-operator" cannot list '
                          'resource "configmaps" in API group "" in the namespace '
                          '"kubeps-system"', r.stderr)


if __name__ == "__main__":
    unittest.main()
