"""A TrainingJob isolated by the NetworkPolicy the operator gives it, shown
end to end on the emulated cluster, whose kubelet enforces NetworkPolicy as
a CNI plugin does (emulator/kubelet/network_policy.py, policy_enforcer.py).

The operator runs with --network-policy --tls and admits Prometheus (pods
labelled app.kubernetes.io/name=prometheus in namespace `monitoring`) to the
metrics port. With the job `isolated` (mlp, sync, 1 server x 2 workers,
1000 epochs: deleted at the end) running in namespace default:

  1. the operator made the NetworkPolicy `isolated`, owned by the job (by
     uid): its own pods, any port; the Prometheus peers, TCP 9090 only; and
     the job's pods still reach each other: the job is Running and its
     workers' step goes up;
  2. a pod of another job (kubeps.io/job-name=other, namespace default)
     cannot connect to server-0's pod IP on 7000 (gRPC) nor on 9090
     (metrics), nor to the scheduler's ClusterIP Service `isolated-scheduler`
     on 7000: every attempt times out (dropped);
  3. a pod labelled kubeps.io/job-name=isolated in another namespace
     (team-b) cannot either: the own-pods rule is namespace-scoped;
  4. a pod labelled as the job's own, in namespace default, does connect to
     all three; the job's mutual TLS then stops it: a TLS handshake without
     a client certificate gets no HTTP/2 answer, where one with the
     certificate of worker 0 gets the server's HTTP/2 SETTINGS;
  5. a real Prometheus (/usr/bin/prometheus) in a pod of namespace
     `monitoring` scrapes server-0 and worker-0 on :9090 (up == 1, read
     through its HTTP API from the node), and the same Prometheus in
     namespace `other-team` never does: every scrape of the same targets
     times out (up == 0).

Probe pods run python3 and log one line per connection attempt (2 s connect
timeout); a connection counts as refused only from such lines: the pod ran,
tried at least three times, and every attempt timed out. Everything is
waited for with deadlines, none is a fixed sleep.

Enforcement needs root, nft and the net_cls cgroup: where the node says it
is unavailable (annotation kubeps.io/network-policy), the class skips with
its reason.

    cd tests/k8s && python3 -m unittest -v test_network_isolation
    (KUBEPS_BIN_DIR defaults to build/bin)
"""
import glob
import json
import os
import shutil
import sys
import tempfile
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (Operator, apply, get_job, live_pod, slowed_down,  # noqa: E402
                              training_job)
from operator_test_case import OperatorTestCase, new_cluster  # noqa: E402

NODE = "kubeps-node"
JOB = "isolated"
PEERS = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
NETPOL = "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/" + JOB
PROMETHEUS = "/usr/bin/prometheus"
DEADLINE = 120      # seconds, for anything that waits on pods starting under load
MIN_ATTEMPTS = 3    # connection attempts a probe makes before a refusal counts

# One thread per target, one line per attempt: "TARGET RESULT". A target
# "tls://HOST:PORT" tries a TLS handshake (ALPN h2, the server's certificate
# not checked) and the HTTP/2 preface; with a second argument "CERTDIR" it
# presents CERTDIR/tls.crt and checks the server against CERTDIR/ca.crt.
PROBE = r"""
import os, socket, ssl, sys, threading, time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"

def tcp(host, port):
    socket.create_connection((host, port), timeout=2).close()
    return "OK"

def tls(host, port, certs):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if certs:
        ctx.load_verify_locations(os.path.join(certs, "ca.crt"))
        ctx.load_cert_chain(os.path.join(certs, "tls.crt"), os.path.join(certs, "tls.key"))
    else:
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection((host, port), timeout=2)
    raw.settimeout(10)
    try:
        s = ctx.wrap_socket(raw)
        s.sendall(PREFACE)
        head = s.recv(9)
        if len(head) >= 4 and head[3] == 4:   # a SETTINGS frame
            return "H2"
        return "NO-H2 %s" % (head[:9].hex() or "closed")
    except ssl.SSLError as e:
        return "NO-H2 %s" % (e.reason or e.__class__.__name__)
    except socket.timeout:
        return "NO-H2 no-answer"
    except OSError as e:
        return "NO-H2 %s" % e.__class__.__name__
    finally:
        raw.close()

def probe(target, certs):
    plain = target.replace("tls://", "")
    host, port = plain.rsplit(":", 1)
    while True:
        try:
            if target.startswith("tls://"):
                result = tls(host, int(port), certs)
            else:
                result = tcp(host, int(port))
        except socket.timeout:
            result = "TIMEOUT"
        except OSError as e:
            result = "ERROR %s" % e.__class__.__name__
        print(target, result, flush=True)
        time.sleep(0.5)

targets = sys.argv[1].split(",")
certs = sys.argv[2] if len(sys.argv) > 2 else None
print("probing", targets, flush=True)
for t in targets:
    threading.Thread(target=probe, args=(t, certs), daemon=True).start()
threading.Event().wait()
"""


def pod_ip_env():
    return [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def http_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


class NetworkIsolationTest(OperatorTestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = new_cluster()
        cls.op = None
        cls.tmp = tempfile.mkdtemp(prefix="kubeps-netiso-")
        try:
            node = cls.c.wait_for(
                lambda: (lambda n: n if "kubeps.io/network-policy" in (
                    n["metadata"].get("annotations") or {}) else None)(
                        cls.c.client.get("/api/v1/nodes/" + NODE)),
                timeout=60, what="the node's kubeps.io/network-policy annotation")
            enforcement = node["metadata"]["annotations"]["kubeps.io/network-policy"]
            if enforcement != "enforced":
                raise unittest.SkipTest("NetworkPolicy enforcement " + enforcement)
            cls.op = Operator(cls.c, "--network-policy", "--tls",
                              "--network-policy-metrics-from=" + json.dumps(PEERS))
            for ns in ("team-b", "monitoring", "other-team"):
                cls.c.client.post("/api/v1/namespaces", {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            # long enough to run through every test: deleted at the end
            # (the tests need its pods talking, not its speed)
            apply(cls.c, slowed_down(training_job(JOB, epochs=1000, max_steps=1000000, servers=1,
                                                  workers=2)))
        except BaseException:
            cls.stop_all()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.c.kubectl("delete", "tj", JOB, "--ignore-not-found", "--wait=false", check=False)
        cls.stop_all()

    @classmethod
    def stop_all(cls):
        if cls.op is not None:
            cls.op.stop()
        cls.c.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.wait_phase(JOB, "Running", timeout=DEADLINE)
        self.server0 = self.pod_ip("server", 0)

    # -- helpers

    def pod_ip(self, role, index):
        pod = self.c.wait_for(
            lambda: (lambda p: p if p and p.get("status", {}).get("podIP") else None)(
                live_pod(self.c, JOB, role, index)),
            timeout=DEADLINE, what="the pod of %s %s %d\n%s" % (JOB, role, index, self.diag(JOB)))
        return pod["status"]["podIP"]

    def scheduler_service(self):
        svc = self.c.client.get("/api/v1/namespaces/default/services/%s-scheduler" % JOB)
        self.assertEqual([p["port"] for p in svc["spec"]["ports"]], [7000], svc["spec"])
        return svc["spec"]["clusterIP"]

    def probe(self, ns, name, labels, targets, secret=None):
        container = {"name": "probe", "image": "python:3", "command": ["python3", "-c", PROBE],
                     "args": [",".join(targets)]}
        spec = {"containers": [container], "terminationGracePeriodSeconds": 1}
        if secret:
            certs = "/etc/probe-tls"
            container["args"].append(certs)
            container["volumeMounts"] = [{"name": "tls", "mountPath": certs, "readOnly": True}]
            spec["volumes"] = [{"name": "tls", "secret": {"secretName": secret}}]
        self.c.client.post("/api/v1/namespaces/%s/pods" % ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels}, "spec": spec})
        self.addCleanup(self.c.client.delete, "/api/v1/namespaces/%s/pods/%s" % (ns, name))

    def results(self, ns, name, target):
        """Every result the probe pod logged for `target`, in order."""
        pod = self.c.pod(name, ns)
        logs = sorted(glob.glob(os.path.join(self.c.dir, "node", "logs", "%s_%s_%s" % (
            ns, name, pod["metadata"]["uid"]), "probe.*.log")))
        out = []
        for path in logs:
            with open(path) as f:
                for line in f:
                    parts = line.split(None, 1)
                    if len(parts) == 2 and parts[0] == target:
                        out.append(parts[1].strip())
        return out

    def assert_refused(self, ns, name, target):
        """The probe ran, tried `target` MIN_ATTEMPTS times at least, and every
        attempt timed out: the packets were dropped."""
        seen = self.c.wait_for(
            lambda: (lambda r: r if len(r) >= MIN_ATTEMPTS else None)(
                self.results(ns, name, target)),
            timeout=DEADLINE, what="%d attempts of %s/%s -> %s\n%s" % (
                MIN_ATTEMPTS, ns, name, target, self.diag()))
        self.assertEqual(set(seen), {"TIMEOUT"}, "%s/%s -> %s: %s" % (ns, name, target, seen))

    def assert_eventually(self, ns, name, target, wanted):
        """The probe's latest attempt at `target` had the result `wanted`."""
        self.c.wait_for(
            lambda: (self.results(ns, name, target) or [None])[-1] == wanted,
            timeout=DEADLINE, interval=0.3, what="%s/%s -> %s: %s (results: %s)\n%s" % (
                ns, name, target, wanted, self.results(ns, name, target)[-5:], self.diag()))

    def prometheus(self, ns, targets):
        """A real Prometheus in a pod of `ns`, labelled as the policy's peers
        are, scraping `targets` every second; returns its API's base URL."""
        folder = os.path.join(self.tmp, ns)
        os.makedirs(os.path.join(folder, "data"))
        config = os.path.join(folder, "prometheus.yml")
        with open(config, "w") as f:   # JSON is YAML
            json.dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                                  "evaluation_interval": "1s"},
                       "scrape_configs": [{"job_name": "kubeps",
                                           "static_configs": [{"targets": targets}]}]}, f)
        self.c.client.post("/api/v1/namespaces/%s/pods" % ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": "prometheus", "labels": {"app.kubernetes.io/name": "prometheus"}},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                "name": "prometheus", "image": "prom/prometheus:v2.42.0",
                "command": [PROMETHEUS], "args": [
                    "--config.file=" + config,
                    "--storage.tsdb.path=" + os.path.join(folder, "data"),
                    "--web.listen-address=$(POD_IP):9090", "--log.level=warn"],
                "env": pod_ip_env(),
                "ports": [{"name": "web", "containerPort": 9090}],
                "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090},
                                   "periodSeconds": 1}}]}})
        self.addCleanup(self.c.client.delete, "/api/v1/namespaces/%s/pods/prometheus" % ns)
        return ns

    def prometheus_url(self, ns):
        def ready():
            pod = self.c.pod("prometheus", ns)
            ok = any(c["type"] == "Ready" and c["status"] == "True"
                     for c in pod.get("status", {}).get("conditions", []))
            return pod if ok else None
        pod = self.c.wait_for(ready, timeout=DEADLINE, what="Prometheus in %s Ready\n%s" % (
            ns, self.c.kubectl("get", "pods", "-A", "-o", "wide").stdout))
        return "http://%s:9090" % pod["status"]["podIP"]

    def query(self, url, promql):
        """{instance: value} of an instant query."""
        answer = http_json(url + "/api/v1/query?query=" + urllib.parse.quote(promql))
        self.assertEqual(answer["status"], "success", answer)
        return {r["metric"].get("instance"): float(r["value"][1])
                for r in answer["data"]["result"]}

    # -- the tests

    def test_1_the_policy_is_the_jobs_and_its_pods_reach_each_other(self):
        job = get_job(self.c, JOB)
        pol = self.c.wait_for(lambda: self.c.client.get(NETPOL), timeout=DEADLINE,
                              what="the NetworkPolicy " + JOB)
        owners = pol["metadata"].get("ownerReferences", [])
        self.assertEqual([(o["kind"], o["name"], o["uid"]) for o in owners],
                         [("TrainingJob", JOB, job["metadata"]["uid"])], owners)
        spec = pol["spec"]
        own = {"matchLabels": {"kubeps.io/job-name": JOB}}
        self.assertEqual(spec["podSelector"], own)
        self.assertEqual(spec["policyTypes"], ["Ingress"])
        self.assertEqual(len(spec["ingress"]), 2, spec)
        self.assertEqual(spec["ingress"][0], {"from": [{"podSelector": own}]})
        self.assertEqual(spec["ingress"][1]["from"], PEERS)
        self.assertEqual([(p["protocol"], p["port"]) for p in spec["ingress"][1]["ports"]],
                         [("TCP", 9090)])
        # Training in sync mode goes through the servers and the scheduler:
        # the step going up shows the job's pods reach each other.
        first = self.c.wait_for(lambda: get_job(self.c, JOB).get("status", {}).get("step"),
                                timeout=DEADLINE, what="a first step\n" + self.diag(JOB))
        self.c.wait_for(lambda: (get_job(self.c, JOB)["status"].get("step") or 0) > first,
                        timeout=DEADLINE, what="the step past %s\n%s" % (first, self.diag(JOB)))
        self.assertEqual(get_job(self.c, JOB)["status"]["phase"], "Running")

    def test_2_a_pod_of_another_job_is_refused(self):
        targets = ["%s:7000" % self.server0, "%s:9090" % self.server0,
                   "%s:7000" % self.scheduler_service()]
        self.probe("default", "other-probe", {"kubeps.io/job-name": "other"}, targets)
        for target in targets:
            self.assert_refused("default", "other-probe", target)

    def test_3_the_jobs_label_in_another_namespace_is_refused(self):
        targets = ["%s:7000" % self.server0, "%s:9090" % self.server0]
        self.probe("team-b", "impostor", {"kubeps.io/job-name": JOB}, targets)
        for target in targets:
            self.assert_refused("team-b", "impostor", target)

    def test_4_the_jobs_own_pods_connect_and_tls_wants_a_certificate(self):
        tls = "tls://%s:7000" % self.server0
        targets = ["%s:7000" % self.server0, "%s:9090" % self.server0,
                   "%s:7000" % self.scheduler_service()]
        labels = {"kubeps.io/job-name": JOB}
        self.probe("default", "own-probe", labels, targets + [tls])
        for target in targets:
            self.assert_eventually("default", "own-probe", target, "OK")
        self.c.wait_for(lambda: len([r for r in self.results("default", "own-probe", tls)
                                     if r.startswith("NO-H2")]) >= MIN_ATTEMPTS,
                        timeout=DEADLINE, what="TLS attempts without a certificate")
        results = self.results("default", "own-probe", tls)
        self.assertNotIn("H2", results)
        self.assertTrue(results[-1].startswith("NO-H2"), results)
        # the control: with the certificate of worker 0, HTTP/2 answers
        self.probe("default", "own-probe-cert", labels, [tls], secret=JOB + "-worker-0-tls")
        self.assert_eventually("default", "own-probe-cert", tls, "H2")

    def test_5_only_prometheus_in_monitoring_scrapes_the_metrics(self):
        targets = ["%s:9090" % self.server0, "%s:9090" % self.pod_ip("worker", 0)]
        allowed = self.prometheus("monitoring", targets)
        denied = self.prometheus("other-team", targets)
        url = self.prometheus_url(allowed)
        self.c.wait_for(lambda: all(self.query(url, "up").get(t) == 1 for t in targets),
                        timeout=DEADLINE, interval=0.5,
                        what="up == 1 for %s in monitoring (last: %s)" % (
                            targets, self.query(url, "up")))
        url = self.prometheus_url(denied)
        window = "up[10m]"
        self.c.wait_for(
            lambda: all((self.query(url, "count_over_time(%s)" % window).get(t) or 0) >=
                        MIN_ATTEMPTS for t in targets),
            timeout=DEADLINE, interval=0.5,
            what="%d scrapes of %s by other-team" % (MIN_ATTEMPTS, targets))
        self.assertEqual(self.query(url, "max_over_time(%s)" % window),
                         {t: 0.0 for t in targets})
        answer = http_json(url + "/api/v1/targets")
        errors = {t["labels"]["instance"]: t.get("lastError", "")
                  for t in answer["data"]["activeTargets"]}
        self.assertEqual(sorted(errors), sorted(targets), errors)
        for target, error in errors.items():   # a dial that timed out, not a refusal
            self.assertRegex(error, r"i/o timeout|deadline exceeded", target)


if __name__ == "__main__":
    unittest.main()
