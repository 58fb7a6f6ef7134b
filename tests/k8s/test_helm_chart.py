#!/usr/bin/env python3
"""The Helm chart (helm/kubeps) renders, applies, and its operator runs jobs.

Helm itself is not installable here, so tests/tools/helm_render (Go:
text/template + sprig, as Helm renders) is built at test time and stands in
for `helm template`. The rendered manifests then go to the API server
emulator with the real kubectl, as `helm install` would send them (crds/
first), and the operator Deployment they describe is run on the emulated
node until it has reconciled deploy/examples/fashion-mnist.yaml to
Succeeded: once with the default values (cluster-wide, ClusterRole, leader
election) and once with helm/kubeps/ci/non-default-values.yaml (one watched
namespace, namespaced Roles only, custom images, every monitoring object).

What the emulator lacks, and how the test stands in for it:
  * there is no Deployment controller: run_deployment() does its job once,
    as kube-controller-manager would: a ReplicaSet "<deployment>-<hash>" owned
    by the Deployment, and spec.replicas pods from the pod template owned by
    the ReplicaSet, labelled pod-template-hash (no rollouts, no scaling);
  * the kubelet mounts no service-account token, so the operator is given a
    kubeconfig with its service account's token through the chart's own
    extraVolumes / extraVolumeMounts / extraArgs (--kubeconfig); RBAC is
    enforced (Cluster(rbac=True)) for that token;
  * pods share the host's network, and kubeps-operator listens on 0.0.0.0, so
    one replica runs (replicaCount: 1) on a free port (metrics.port);
  * the prometheus-operator's CRDs (ServiceMonitor, PodMonitor,
    PrometheusRule) are registered as minimal minimal CRDs.

    python3 tests/k8s/test_helm_chart.py     # KUBEPS_BIN_DIR=build/bin by default
"""
import collections
import hashlib
import json
import os
import random
import re
import signal
import socket
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "tools", "helm_render"))
from emulator import realism  # noqa: E402
from emulator.cluster import Cluster  # noqa: E402
import helmrender  # noqa: E402

BIN = os.path.abspath(os.environ.get("KUBEPS_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin")))
CHART = os.path.join(SOURCE_DIR, "helm", "kubeps")
NON_DEFAULT = os.path.join(CHART, "ci", "non-default-values.yaml")
EXAMPLE = os.path.join(SOURCE_DIR, "deploy", "examples", "fashion-mnist.yaml")
RELEASE, NAMESPACE = "kubeps", "kubeps-system"
MAX_STEPS = "100"
JOB_TIMEOUT = 150

MONITORING_KINDS = (("ServiceMonitor", "servicemonitors"), ("PodMonitor", "podmonitors"),
                    ("PrometheusRule", "prometheusrules"))


def monitoring_crds():
    """Minimal prometheus-operator CRDs (monitoring.coreos.com/v1): any spec.
    (The schema names `spec` rather than preserving unknown fields at its
    root: the emulator loses the whole object with a root-level
    x-kubernetes-preserve-unknown-fields.)"""
    items = []
    for kind, plural in MONITORING_KINDS:
        items.append({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": plural + ".monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": kind + "List", "plural": plural,
                               "singular": kind.lower()},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                             "type": "object",
                             "x-kubernetes-preserve-unknown-fields": True}}}}}]}})
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def free_port():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def owner_reference(obj):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def run_deployment(c, namespace, name):
    """The Deployment controller's first rollout, once: a ReplicaSet owned by
    the Deployment, its pods owned by the ReplicaSet. Returns the pod names."""
    dep = c.client.get("/apis/apps/v1/namespaces/%s/deployments/%s" % (namespace, name))
    dep.setdefault("apiVersion", "apps/v1")
    dep.setdefault("kind", "Deployment")
    template = dep["spec"]["template"]
    pod_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
    labels = dict(template["metadata"].get("labels", {}), **{"pod-template-hash": pod_hash})
    meta = dict(template["metadata"], labels=labels)
    selector = dict(dep["spec"]["selector"]["matchLabels"], **{"pod-template-hash": pod_hash})
    replicas = dep["spec"].get("replicas", 1)
    rs = c.client.post("/apis/apps/v1/namespaces/%s/replicasets" % namespace, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "%s-%s" % (name, pod_hash), "namespace": namespace, "labels": labels,
                     "annotations": {"deployment.kubernetes.io/revision": "1"},
                     "ownerReferences": [owner_reference(dep)]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                 "template": {"metadata": meta, "spec": template["spec"]}}})
    rs.setdefault("apiVersion", "apps/v1")
    rs.setdefault("kind", "ReplicaSet")
    names = []
    for _ in range(replicas):
        suffix = "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        pod = c.client.post("/api/v1/namespaces/%s/pods" % namespace, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": dict(meta, name="%s-%s" % (rs["metadata"]["name"], suffix),
                             namespace=namespace, ownerReferences=[owner_reference(rs)]),
            "spec": template["spec"]})
        names.append(pod["metadata"]["name"])
    return names


def kinds_summary(objects):
    counts = collections.Counter(o["kind"] for o in objects)
    return "%d objects: %s" % (len(objects), ", ".join("%s=%d" % kv for kv in sorted(counts.items())))


class HelmChartTest(unittest.TestCase):
    renderer = None

    @classmethod
    def setUpClass(cls):
        try:
            cls.renderer = helmrender.build()
        except helmrender.Unavailable as e:
            raise unittest.SkipTest("cannot render the chart without Helm's template engine: %s" % e)
        cls.tmp = tempfile.TemporaryDirectory(prefix="kubeps-helm-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name, content=None):
        p = os.path.join(self.tmp.name, name)
        if content is not None:
            with open(p, "w") as f:
                f.write(content)
        return p

    def render(self, *values, **kw):
        return helmrender.render(self.renderer, CHART, name=RELEASE, namespace=NAMESPACE,
                                 values=values, **kw)

    def objects(self, c, text, name):
        """The rendered manifests as JSON, through kubectl (client dry-run)."""
        out = c.kubectl("create", "--dry-run=client", "-o", "json", "-f",
                        self.path(name, text)).stdout
        return helmrender.json_stream(out)

    # -- the chart's files

    def test_chart_metadata(self):
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            chart = f.read()
        for line in ("apiVersion: v2", "name: kubeps", "version: 0.1.0", 'appVersion: "0.1.0"'):
            self.assertIn("\n" + line + "\n", "\n" + chart)
        self.assertRegex(chart, r"\nkubeVersion: .+")
        self.assertRegex(chart, r"\ndescription: .+")
        for t in ("_helpers.tpl", "serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml",
                  "role.yaml", "leader-election-role.yaml", "deployment.yaml", "service.yaml",
                  "servicemonitor.yaml", "podmonitor.yaml", "prometheusrule.yaml",
                  "dashboard-configmap.yaml", "NOTES.txt"):
            self.assertTrue(os.path.exists(os.path.join(CHART, "templates", t)), t)

    def test_every_value_is_documented(self):
        """Every key of values.yaml has a comment right above it, or belongs to
        a documented value, or only groups documented keys."""
        with open(os.path.join(CHART, "values.yaml")) as f:
            lines = f.read().split("\n")
        stack = []   # (indent, documented) of the enclosing keys
        undocumented = []
        previous = ""
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if not stripped:
                previous = ""
                continue
            indent = len(line) - len(line.lstrip())
            if stripped.startswith("#"):
                previous = stripped
                continue
            while stack and stack[-1][0] >= indent:
                stack.pop()
            covered = any(documented for _, documented in stack)
            m = re.match(r"([A-Za-z0-9_.-]+):(.*)$", stripped)
            if m and not stripped.startswith("- "):
                documented = previous.startswith("#") or covered
                has_value = m.group(2).strip() != ""
                if has_value and not documented:
                    undocumented.append("line %d: %s" % (number, stripped))
                stack.append((indent, documented))
            elif not covered:
                undocumented.append("line %d: %s" % (number, stripped))
            previous = stripped
        self.assertEqual(undocumented, [], "values.yaml: values without a comment above them")

    def test_required_value_fails_clearly(self):
        r = helmrender.render(self.renderer, CHART, name=RELEASE, namespace=NAMESPACE,
                              sets=["serviceAccount.create=false"], check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("serviceAccount.name is required when serviceAccount.create is false", r.stderr)
        self.assertIn("kubeps/templates/", r.stderr)
        broken = self.path("broken.yaml", json.dumps({"image": {"operator": {"repository": None}}}))
        r = helmrender.render(self.renderer, CHART, values=[broken], check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("image repository is required", r.stderr)
        r = helmrender.render(self.renderer, CHART, check=False,
                              sets=["metrics.serviceMonitor.enabled=true",
                                    "metrics.service.enabled=false"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("metrics.serviceMonitor.enabled needs metrics.service.enabled", r.stderr)

    def test_notes(self):
        notes = self.render(notes=True)
        self.assertIn("kubectl apply -f deploy/examples/fashion-mnist.yaml", notes)
        self.assertIn("kubectl get tj", notes)
        self.assertIn("/metrics", notes)
        self.assertIn("port-forward service/kubeps-operator-metrics 8080:8080", notes)
        notes = self.render(NON_DEFAULT, notes=True)
        self.assertIn("kubectl apply -n team-a -f deploy/examples/fashion-mnist.yaml", notes)
        self.assertIn("PodMonitor ml-kubeps-training-jobs", notes)

    def test_renders_like_helm_template(self):
        text = self.render()
        self.assertTrue(text.startswith("---\n# Source: kubeps/templates/"), text[:80])
        sources = re.findall(r"^# Source: (.+)$", text, re.M)
        self.assertIn("kubeps/templates/deployment.yaml", sources)
        self.assertNotIn("NOTES", text)
        with_crds = self.render(include_crds=True)
        self.assertTrue(with_crds.startswith("---\n# Source: kubeps/crds/trainingjobs.yaml\n"))

    def test_two_releases_of_one_name_share_no_cluster_scoped_object(self):
        # The same release name in two namespaces: before, both rendered a
        # ClusterRole and ClusterRoleBinding "kubeps-operator", and the
        # second install took (or was refused) the first one's.
        def cluster_scoped(namespace):
            text = helmrender.render(self.renderer, CHART, name=RELEASE, namespace=namespace)
            return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(text)
                    if o and o["kind"] in ("ClusterRole", "ClusterRoleBinding")}
        team_a, team_b = cluster_scoped("team-a"), cluster_scoped("team-b")
        self.assertEqual(sorted(kind for kind, _ in team_a),
                         ["ClusterRole", "ClusterRoleBinding"])
        self.assertFalse(set(team_a) & set(team_b), (sorted(team_a), sorted(team_b)))
        for objects, namespace in ((team_a, "team-a"), (team_b, "team-b")):
            binding = next(o for (kind, _), o in objects.items() if kind == "ClusterRoleBinding")
            role = next(name for (kind, name) in objects if kind == "ClusterRole")
            self.assertEqual(binding["roleRef"]["name"], role)
            self.assertEqual(binding["subjects"][0]["namespace"], namespace)

    # -- rendering and applying

    def test_default_values(self):
        """Default values: cluster-wide operator, ClusterRole, leader election;
        the operator runs in the emulated cluster and finishes a job."""
        port = free_port()
        with Cluster(bin_dirs=[BIN], rbac=True, pass_env=["KUBEPS_MAX_STEPS"],
                     realism=realism.wanted(),
                     images={"kubeps/operator": os.path.join(BIN, "kubeps-operator")}) as c:
            c.kubectl("apply", "-f", "-", input=monitoring_crds())
            text = self.render()
            objects = self.objects(c, text, "default.yaml")
            print("\nhelm/kubeps with default values: %s" % kinds_summary(objects), file=sys.stderr)
            kinds = collections.Counter(o["kind"] for o in objects)
            self.assertEqual(kinds, {"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
                                     "Service": 1, "Deployment": 1})
            (dep,) = [o for o in objects if o["kind"] == "Deployment"]
            container = dep["spec"]["template"]["spec"]["containers"][0]
            self.assertEqual(dep["spec"]["replicas"], 2)
            self.assertEqual(container["image"], "kubeps/operator:0.1.0")
            self.assertEqual(container["args"][:4], ["--metrics-port=8080",
                                                     "--server-image=kubeps/server:0.1.0",
                                                     "--agent-image=kubeps/agent:0.1.0",
                                                     "--network-policy"])
            self.assertEqual(container["args"][5:], ["--tls", "--tls-issuer=auto", "--leader-elect"])
            flag, peers = container["args"][4].split("=", 1)
            self.assertEqual(flag, "--network-policy-metrics-from")
            self.assertEqual(json.loads(peers)[1], {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                "podSelector": {"matchLabels": {"app.kubernetes.io/component": "operator",
                                                "app.kubernetes.io/instance": "kubeps",
                                                "app.kubernetes.io/name": "kubeps"}}})
            self.assertIn({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.namespace"}}}, container["env"])

            # The operator as the test runs it (see the module's docstring).
            overrides = self.path("default-test-values.yaml", json.dumps(
                self.emulator_values(c, port, "kubeps-operator")))
            rendered = self.render(overrides)
            try:
                self.install(c, rendered)
                self.run_operator_and_job(c, "kubeps-operator", "default", port, lease=True, tls=True)
                self.uninstall(c, rendered, "default")
            finally:
                self.kill_leftovers(c)

    def test_non_default_values(self):
        """ci/non-default-values.yaml: one watched namespace with namespaced
        Roles only, no leader election, custom images, monitoring objects."""
        port = free_port()
        operator_image = "registry.example.com/ml/kubeps-operator"
        with Cluster(bin_dirs=[BIN], rbac=True, pass_env=["KUBEPS_MAX_STEPS"],
                     realism=realism.wanted(),
                     images={operator_image: os.path.join(BIN, "kubeps-operator")}) as c:
            c.kubectl("apply", "-f", "-", input=monitoring_crds())
            text = self.render(NON_DEFAULT)
            objects = self.objects(c, text, "non-default.yaml")
            print("\nhelm/kubeps with ci/non-default-values.yaml: %s" % kinds_summary(objects),
                  file=sys.stderr)
            kinds = collections.Counter(o["kind"] for o in objects)
            self.assertEqual(kinds, {"ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "Service": 1,
                                     "Deployment": 1, "ConfigMap": 1, "ServiceMonitor": 1,
                                     "PodMonitor": 1, "PrometheusRule": 1})
            by = {o["kind"]: o for o in objects}
            self.assertEqual(by["Role"]["metadata"]["namespace"], "team-a")
            self.assertEqual(by["RoleBinding"]["subjects"], [{
                "kind": "ServiceAccount", "name": "kubeps-controller", "namespace": NAMESPACE}])
            self.assertNotIn("coordination.k8s.io", json.dumps(by["Role"]["rules"]))
            dep = by["Deployment"]
            pod_spec = dep["spec"]["template"]["spec"]
            container = pod_spec["containers"][0]
            self.assertEqual(dep["spec"]["replicas"], 1)
            self.assertEqual(container["image"], "registry.example.com/ml/kubeps-operator:0.1.0-custom")
            operator_peer = {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": NAMESPACE}}, "podSelector": {"matchLabels": {
                    "app.kubernetes.io/component": "operator", "app.kubernetes.io/instance": RELEASE,
                    "app.kubernetes.io/name": "kubeps"}}}
            self.assertEqual(container["args"], [
                "--metrics-port=9443", "--server-image=registry.example.com/ml/kubeps-server:0.1.0-custom",
                "--agent-image=registry.example.com/ml/kubeps-agent:0.1.0-cuda", "--network-policy",
                "--network-policy-metrics-from=" + json.dumps([
                    {"namespaceSelector": {"matchLabels": {"team": "observability"}}},
                    operator_peer], separators=(",", ":"), sort_keys=True),
                "--tls-issuer=operator", "--namespace=team-a", "--identity=$(POD_NAME)"])
            self.assertEqual(container["resources"]["limits"], {"cpu": "1", "memory": "512Mi"})
            self.assertEqual(pod_spec["imagePullSecrets"], [{"name": "regcred"}])
            self.assertEqual(pod_spec["tolerations"][0]["key"], "dedicated")
            self.assertEqual(by["Service"]["spec"]["ports"][0]["port"], 9090)
            sm = by["ServiceMonitor"]
            self.assertEqual(sm["spec"]["selector"]["matchLabels"], by["Service"]["spec"]["selector"])
            for key, value in sm["spec"]["selector"]["matchLabels"].items():
                self.assertEqual(by["Service"]["metadata"]["labels"][key], value)
            self.assertEqual(sm["metadata"]["labels"]["release"], "prometheus")
            self.assertEqual(by["PodMonitor"]["spec"]["namespaceSelector"], {"matchNames": ["team-a"]})
            alerts = [r["alert"] for g in by["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
            self.assertEqual(alerts, ["KubepsJobStalled", "KubepsHighResendRate", "KubepsWorkerRestarts",
                                  "KubepsCheckpointWriteFailures", "KubepsCheckpointFolderHeld"])
            self.assertIn("{{ $labels.job }}", json.dumps(by["PrometheusRule"]))
            cm = by["ConfigMap"]
            self.assertEqual((cm["metadata"]["namespace"], cm["metadata"]["labels"]["grafana_dashboard"]),
                             ("monitoring", "1"))
            with open(os.path.join(SOURCE_DIR, "deploy", "monitoring", "grafana-dashboard.json")) as f:
                self.assertEqual(json.loads(cm["data"]["kubeps.json"]), json.load(f))

            # Its own service account token (the chart names it kubeps-controller).
            values = self.emulator_values(c, port, "kubeps-controller")
            values["extraArgs"] = ["--identity=$(POD_NAME)"] + values["extraArgs"]
            overrides = self.path("non-default-test-values.yaml", json.dumps(values))
            for ns in ("team-a", "monitoring"):
                c.kubectl("create", "namespace", ns)
            rendered = self.render(NON_DEFAULT, overrides)
            try:
                self.install(c, rendered)
                # A job outside the watched namespace is not the operator's.
                c.kubectl("apply", "-n", "default", "-f", EXAMPLE)
                self.run_operator_and_job(c, "ml-kubeps-operator", "team-a", port, lease=False,
                                          tls=False)
                other = c.kubectl("get", "tj", "-n", "default", "fashion-mnist", "-o", "json",
                                  json_output=True)
                self.assertNotIn("phase", other.get("status", {}))
                self.assertEqual(c.client.get("/api/v1/namespaces/default/pods")["items"], [])
                self.uninstall(c, rendered, "team-a")
            finally:
                self.kill_leftovers(c)

    # -- helpers

    def emulator_values(self, c, port, service_account):
        """Values the emulator needs: a kubeconfig for the service account
        (from a Secret), one replica on a free port."""
        with open(c.operator_kubeconfig) as f:
            config = json.load(f)
        token = "sa-%s-%d" % (service_account, random.getrandbits(64))
        c.client.post("/_emulator/token", {
            "token": token, "user": "system:serviceaccount:%s:%s" % (NAMESPACE, service_account),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:" + NAMESPACE,
                       "system:authenticated"]})
        config["users"][0]["user"] = {"token": token}
        kubeconfig = self.path("kubeconfig-" + service_account, json.dumps(config))
        c.kubectl("create", "namespace", NAMESPACE, check=False)
        c.kubectl("create", "secret", "generic", "operator-kubeconfig", "-n", NAMESPACE,
                  "--from-file=kubeconfig=" + kubeconfig)
        mount = os.path.join(c.dir, "operator-kubeconfig")
        return {
            "replicaCount": 1,
            # The Service's port differs: kube-proxy listens on clusterIP:port, and
            # the operator's 0.0.0.0:port would collide with it.
            "metrics": {"port": port, "service": {"port": free_port()}},
            "extraArgs": ["--kubeconfig=%s/kubeconfig" % mount],
            "extraVolumes": [{"name": "kubeconfig", "secret": {"secretName": "operator-kubeconfig"}}],
            "extraVolumeMounts": [{"name": "kubeconfig", "mountPath": mount, "readOnly": True}],
        }

    def install(self, c, text):
        """What `helm install` sends: crds/ first, then the manifests."""
        c.kubectl("apply", "-f", os.path.join(CHART, "crds") + "/")
        # Every namespaced object of the chart names its namespace.
        out = c.kubectl("apply", "-f", self.path("install.yaml", text)).stdout
        self.assertIn("deployment.apps/", out)

    def run_operator_and_job(self, c, deployment, job_namespace, port, lease, tls):
        pods = run_deployment(c, NAMESPACE, deployment)
        self.assertEqual(len(pods), 1)
        pod = pods[0]

        def ready():
            p = c.pod(pod, NAMESPACE)
            self.assertNotEqual(p["status"].get("phase"), "Failed", self.logs(c, pod))
            return any(cond["type"] == "Ready" and cond["status"] == "True"
                       for cond in p["status"].get("conditions", []))
        try:
            c.wait_for(ready, timeout=60, interval=0.5, what="the operator pod to be Ready (/readyz)")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.logs(c, pod)))
        if lease:
            got = c.client.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases/kubeps-operator"
                               % NAMESPACE)
            self.assertTrue(got["spec"].get("holderIdentity"))

        start = time.time()
        c.kubectl("apply", "-n", job_namespace, "-f", EXAMPLE)

        def phase():
            tj = c.kubectl("get", "tj", "-n", job_namespace, "fashion-mnist", "-o", "json",
                           json_output=True)
            got = tj.get("status", {}).get("phase")
            self.assertNotEqual(got, "Failed", json.dumps(tj.get("status"), indent=1))
            return got == "Succeeded"
        try:
            c.wait_for(phase, timeout=JOB_TIMEOUT, interval=1, what="TrainingJob fashion-mnist Succeeded")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.logs(c, pod)))
        print("fashion-mnist (%s steps) Succeeded in %.1f s under the chart's operator" % (
            MAX_STEPS, time.time() - start), file=sys.stderr)
        self.check_job_security(c, job_namespace, tls)

        # The metrics Service reaches the operator (kube-proxy on the clusterIP).
        svc = c.client.get("/api/v1/namespaces/%s/services/%s-metrics" % (NAMESPACE, deployment))
        url = "http://%s:%d/metrics" % (svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"])

        def scraped():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = r.read().decode()
            except OSError:
                return False
            return re.search(r'^kubeps_operator_jobs\{[^}]*phase="Succeeded"[^}]*\} 1$', body, re.M) \
                and "kubeps_operator_reconciles_total" in body
        c.wait_for(scraped, timeout=15, interval=0.5, what="operator metrics through " + url)

    def check_job_security(self, c, namespace, tls):
        """The job got its NetworkPolicy (networkPolicy.enabled in both value
        files) and, where tls.byDefault, a CA and a certificate per replica."""
        base = "/api/v1/namespaces/%s/secrets/" % namespace
        policy = c.client.get("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/"
                              "fashion-mnist" % namespace)
        self.assertEqual(policy["spec"]["podSelector"],
                         {"matchLabels": {"kubeps.io/job-name": "fashion-mnist"}})
        token = c.client.get(base + "fashion-mnist-token")
        self.assertEqual(token["metadata"]["annotations"]["kubeps.io/tls"],
                         "Enabled" if tls else "Disabled")
        names = {s["metadata"]["name"] for s in c.client.get(base)["items"]}
        replicas = {"fashion-mnist-scheduler-0", "fashion-mnist-server-0", "fashion-mnist-server-1",
                    "fashion-mnist-worker-0", "fashion-mnist-worker-1"}
        if tls:
            self.assertLessEqual({r + "-tls" for r in replicas} | {"fashion-mnist-tls-ca"}, names)
            worker = c.client.get(base + "fashion-mnist-worker-0-tls")
            self.assertEqual(worker["type"], "kubernetes.io/tls")
            self.assertEqual(sorted(worker["data"]), ["ca.crt", "tls.crt", "tls.key"])
        else:
            self.assertFalse({n for n in names if n.endswith("-tls") or n.endswith("-tls-ca")})

    def uninstall(self, c, text, job_namespace):
        """`helm uninstall`: the job goes, then the release; the garbage
        collector takes the ReplicaSet and the pods, the kubelet stops them."""
        c.kubectl("delete", "tj", "-n", job_namespace, "fashion-mnist", "--wait=false")
        c.kubectl("delete", "-f", self.path("uninstall.yaml", text), "--wait=false")

        def gone():
            left = [p["metadata"]["name"] for ns in (job_namespace, NAMESPACE)
                    for p in c.client.get("/api/v1/namespaces/%s/pods" % ns)["items"]]
            left += [r["metadata"]["name"] for r in c.client.get(
                "/apis/apps/v1/namespaces/%s/replicasets" % NAMESPACE)["items"]]
            return not left
        c.wait_for(gone, timeout=45, interval=0.5, what="the release's ReplicaSet and pods to go")

    @staticmethod
    def kill_leftovers(c):
        """Ends any operator this test started that is still running (by its
        pid; its --kubeconfig lies in this cluster's own folder)."""
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmdline = f.read().decode(errors="replace")
            except OSError:
                continue
            if "--kubeconfig=" + os.path.join(c.dir, "operator-kubeconfig") in cmdline:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass

    def logs(self, c, pod):
        r = c.kubectl("logs", "-n", NAMESPACE, pod, check=False)
        return "operator logs:\n%s%s" % (r.stdout[-4000:], r.stderr[-1000:])


_saved_max_steps = None


def setUpModule():
    global _saved_max_steps
    if not os.path.exists(os.path.join(BIN, "kubeps-operator")):
        raise unittest.SkipTest("no %s/kubeps-operator: build first (or set KUBEPS_BIN_DIR)" % BIN)
    _saved_max_steps = os.environ.get("KUBEPS_MAX_STEPS")
    os.environ["KUBEPS_MAX_STEPS"] = MAX_STEPS   # the kubelet passes it to every container


def tearDownModule():
    if _saved_max_steps is None:
        os.environ.pop("KUBEPS_MAX_STEPS", None)
    else:
        os.environ["KUBEPS_MAX_STEPS"] = _saved_max_steps


if __name__ == "__main__":
    unittest.main()
