#!/usr/bin/env python3
"""The plain manifests (deploy/crd, deploy/rbac, deploy/operator,
deploy/monitoring) and the Helm chart (helm/kubeps) say the same thing.

  * the chart's copies of the CRD, the Grafana dashboard and the alert rules
    are byte for byte the files in deploy/ (Helm reads no file outside the
    chart, so the chart carries copies);
  * the ClusterRole the chart renders with its default values has exactly
    deploy/rbac/rbac.yaml's rules, and binds the same service account;
  * the operator Deployments run the same image with the same effective
    flags, declare the port the operator listens on, and probe /healthz and
    /readyz on it (kubeps-operator serves /metrics, /healthz and /readyz on
    its --metrics-port only), with the same timings, security settings and
    resources.

YAML becomes JSON through the real kubectl (`kubectl create --dry-run=client
-o json` against the API server emulator, which kubectl needs for discovery);
the chart is rendered by tests/tools/helm_render (Go), built at test time.

    python3 tests/k8s/test_manifests_in_step.py
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "tools", "helm_render"))
from emulator.cluster import Cluster  # noqa: E402
from operator_harness import BIN  # noqa: E402
import helmrender  # noqa: E402

DEPLOY = os.path.join(SOURCE_DIR, "deploy")
CHART = os.path.join(SOURCE_DIR, "helm", "kubeps")
NAMESPACE = "kubeps-system"   # where deploy/ puts the operator


def read(path):
    with open(path, "rb") as f:
        return f.read()


def operator_defaults():
    """The flag defaults compiled into kubeps-operator, as it prints them."""
    out = subprocess.run([os.path.join(BIN, "kubeps-operator"), "--print-defaults"], check=True,
                         capture_output=True, text=True).stdout
    flags = json.loads(out)
    flags["leader-elect"] = flags["leader-elect"] == "true"
    # the Deployment passes the pod's namespace when the flag is left out
    flags["leader-election-namespace"] = "$(POD_NAMESPACE)"
    return flags


def effective_flags(args):
    """kubeps-operator's flags after its defaults are applied, as it parses
    them (operator_main.cc ParseFlags)."""
    flags = operator_defaults()
    for arg in args:
        if arg == "--leader-elect":
            flags["leader-elect"] = True
            continue
        m = re.match(r"--([a-z-]+)=(.*)$", arg)
        if not m or m.group(1) not in flags or m.group(1) == "leader-elect":
            raise AssertionError("kubeps-operator does not take the argument %r" % arg)
        flags[m.group(1)] = m.group(2)
    return flags


def by_kind(items, kind):
    found = [i for i in items if i["kind"] == kind]
    return found


class ManifestsInStepTest(unittest.TestCase):
    cluster = None
    renderer = None
    render_skip = None

    @classmethod
    def setUpClass(cls):
        try:
            cls.renderer = helmrender.build()
        except helmrender.Unavailable as e:
            cls.render_skip = "cannot render the chart: %s" % e
        # kubectl only (no kubelet, no RBAC): discovery for --dry-run=client.
        cls.cluster = Cluster(kubelet=False).start()
        cls.tmp = tempfile.TemporaryDirectory(prefix="kubeps-in-step-")

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()
        cls.tmp.cleanup()

    def to_json(self, path):
        """Every object in a manifest file, as JSON, through kubectl."""
        return helmrender.json_stream(self.cluster.kubectl("create", "--dry-run=client", "-o", "json",
                                                "-f", path).stdout)

    def chart_objects(self):
        if self.render_skip:
            self.skipTest(self.render_skip)
        text = helmrender.render(self.renderer, CHART, name="kubeps", namespace=NAMESPACE)
        path = os.path.join(self.tmp.name, "chart-default.yaml")
        with open(path, "w") as f:
            f.write(text)
        return self.to_json(path)

    # -- copies

    def test_crd_copy_is_identical(self):
        plain = sorted(os.listdir(os.path.join(DEPLOY, "crd")))
        copies = sorted(os.listdir(os.path.join(CHART, "crds")))
        self.assertEqual(copies, plain, "helm/kubeps/crds/ must hold exactly deploy/crd/'s files")
        for name in plain:
            self.assertEqual(read(os.path.join(CHART, "crds", name)),
                             read(os.path.join(DEPLOY, "crd", name)),
                             "helm/kubeps/crds/%s differs from deploy/crd/%s: copy it again "
                             "(cp deploy/crd/%s helm/kubeps/crds/)" % (name, name, name))

    def test_dashboard_copy_is_identical(self):
        copy = read(os.path.join(CHART, "files", "grafana-dashboard.json"))
        self.assertEqual(copy, read(os.path.join(DEPLOY, "monitoring", "grafana-dashboard.json")),
                         "helm/kubeps/files/grafana-dashboard.json differs from deploy/monitoring/"
                         "grafana-dashboard.json: cp deploy/monitoring/grafana-dashboard.json "
                         "helm/kubeps/files/")
        json.loads(copy)

    def test_alert_rules_copy_is_identical(self):
        self.assertEqual(read(os.path.join(CHART, "files", "prometheus-rules.yaml")),
                         read(os.path.join(DEPLOY, "monitoring", "prometheus-rules.yaml")),
                         "helm/kubeps/files/prometheus-rules.yaml differs from deploy/monitoring/"
                         "prometheus-rules.yaml: cp deploy/monitoring/prometheus-rules.yaml "
                         "helm/kubeps/files/")

    # -- RBAC

    def test_cluster_role_rules_match(self):
        chart = self.chart_objects()
        plain = self.to_json(os.path.join(DEPLOY, "rbac", "rbac.yaml"))
        (chart_role,), (plain_role,) = by_kind(chart, "ClusterRole"), by_kind(plain, "ClusterRole")
        self.assertEqual(chart_role["rules"], plain_role["rules"],
                         "the chart's ClusterRole (helm/kubeps/templates/_helpers.tpl "
                         "kubeps.jobRules + kubeps.leaderElectionRules) and deploy/rbac/rbac.yaml "
                         "grant different permissions")
        self.assertEqual(chart_role["metadata"]["name"], plain_role["metadata"]["name"])
        (chart_binding,) = by_kind(chart, "ClusterRoleBinding")
        (plain_binding,) = by_kind(plain, "ClusterRoleBinding")
        self.assertEqual(chart_binding["roleRef"], plain_binding["roleRef"])
        self.assertEqual(chart_binding["subjects"], plain_binding["subjects"])
        (chart_sa,), plain_sas = by_kind(chart, "ServiceAccount"), by_kind(plain, "ServiceAccount")
        self.assertEqual([(s["metadata"]["name"], s["metadata"]["namespace"]) for s in plain_sas],
                         [(chart_sa["metadata"]["name"], chart_sa["metadata"]["namespace"])])

    # -- the operator Deployment

    def deployments(self):
        chart = self.chart_objects()
        plain = self.to_json(os.path.join(DEPLOY, "operator", "deployment.yaml"))
        (chart_dep,), (plain_dep,) = by_kind(chart, "Deployment"), by_kind(plain, "Deployment")
        return chart_dep, plain_dep

    def test_deployment_runs_the_same_operator(self):
        chart_dep, plain_dep = self.deployments()
        for what, get in (
                ("name", lambda d: d["metadata"]["name"]),
                ("namespace", lambda d: d["metadata"]["namespace"]),
                ("replicas", lambda d: d["spec"]["replicas"]),
                ("strategy", lambda d: d["spec"]["strategy"]),
                ("serviceAccountName", lambda d: d["spec"]["template"]["spec"]["serviceAccountName"]),
                ("terminationGracePeriodSeconds",
                 lambda d: d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]),
                ("pod securityContext", lambda d: d["spec"]["template"]["spec"]["securityContext"])):
            self.assertEqual(get(chart_dep), get(plain_dep), what)
        chart_c = chart_dep["spec"]["template"]["spec"]["containers"]
        plain_c = plain_dep["spec"]["template"]["spec"]["containers"]
        self.assertEqual([c["name"] for c in chart_c], [c["name"] for c in plain_c])
        for key in ("image", "imagePullPolicy", "resources", "securityContext"):
            self.assertEqual(chart_c[0].get(key), plain_c[0].get(key), key)
        self.assertEqual(effective_flags(chart_c[0].get("args", [])),
                         effective_flags(plain_c[0].get("args", [])),
                         "the operators run with different flags")
        env = lambda c: [(e["name"], e.get("valueFrom")) for e in c.get("env", [])]  # noqa: E731
        self.assertEqual(env(chart_c[0]), env(plain_c[0]))

    def check_probes(self, dep, where):
        """Every probe targets the port kubeps-operator listens on."""
        container = dep["spec"]["template"]["spec"]["containers"][0]
        port = int(effective_flags(container.get("args", []))["metrics-port"])
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        self.assertIn(port, ports.values(),
                      "%s: no containerPort for the operator's --metrics-port %d" % (where, port))
        result = {}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            self.assertIn(probe, container, where)
            get = container[probe]["httpGet"]
            self.assertEqual(get["path"], path, "%s: %s" % (where, probe))
            target = get["port"] if isinstance(get["port"], int) else ports.get(get["port"])
            self.assertEqual(target, port,
                             "%s: the %s (%s) targets port %r (%s), but kubeps-operator serves "
                             "/healthz and /readyz only on its --metrics-port %d (port %r)" % (
                                 where, probe, path, get["port"], target, port,
                                 [n for n, p in ports.items() if p == port][0]))
            result[probe] = {k: v for k, v in container[probe].items() if k != "httpGet"}
            result[probe]["path"] = path
        return result, ports

    def test_probes_and_ports_agree(self):
        chart_dep, plain_dep = self.deployments()
        chart_probes, chart_ports = self.check_probes(chart_dep, "helm/kubeps (default values)")
        plain_probes, plain_ports = self.check_probes(plain_dep, "deploy/operator/deployment.yaml")
        self.assertEqual(chart_probes, plain_probes, "probe timings differ")
        self.assertEqual(chart_ports, plain_ports, "the operator containers declare different ports")


if __name__ == "__main__":
    unittest.main()
