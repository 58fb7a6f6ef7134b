#!/usr/bin/env python3
"""The plain manifests in deploy/ are the Helm chart's rendering, and the
operator the chart deploys can run as configured.

  * deploy/crd, deploy/rbac, deploy/operator and the chart's monitoring files
    in deploy/monitoring are exactly what scripts/render-deploy.sh renders
    from helm/kubeps with its default values (the chart is the source;
    its CRD is generated from the TrainingJob's field table);
  * the operator Deployment passes only flags kubeps-operator takes (their
    defaults as `kubeps-operator --print-defaults` prints them), declares the
    port the operator listens on, and probes /healthz and /readyz on it
    (kubeps-operator serves /metrics, /healthz and /readyz on its
    --metrics-port only).

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
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from emulator.cluster import Cluster  # noqa: E402
from operator_harness import BIN  # noqa: E402
import helmrender  # noqa: E402
import render_deploy  # noqa: E402

DEPLOY = os.path.join(SOURCE_DIR, "deploy")
CHART = os.path.join(SOURCE_DIR, "helm", "kubeps")
NAMESPACE = render_deploy.NAMESPACE   # where deploy/ puts the operator


def operator_defaults():
    """The flag defaults compiled into kubeps-operator, as it prints them."""
    out = subprocess.run([os.path.join(BIN, "kubeps-operator"), "--print-defaults"], check=True,
                         capture_output=True, text=True).stdout
    flags = json.loads(out)
    for name in BOOLEAN_FLAGS:
        flags[name] = flags[name] == "true"
    # the Deployment passes the pod's namespace when the flag is left out
    flags["leader-election-namespace"] = "$(POD_NAMESPACE)"
    return flags


BOOLEAN_FLAGS = ("leader-elect", "network-policy", "tls")   # given alone, without "=value"


def effective_flags(args):
    """kubeps-operator's flags after its defaults are applied, as it parses
    them (operator_main.cc ParseFlags)."""
    flags = operator_defaults()
    for arg in args:
        if arg[2:] in BOOLEAN_FLAGS:
            flags[arg[2:]] = True
            continue
        m = re.match(r"--([a-z-]+)=(.*)$", arg)
        if not m or m.group(1) not in flags or m.group(1) in BOOLEAN_FLAGS:
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

    # -- deploy/ is the rendering

    def test_deploy_is_the_charts_rendering(self):
        if self.render_skip:
            self.skipTest(self.render_skip)
        stale = render_deploy.differences(render_deploy.render())
        self.assertEqual(stale, [], "deploy/ differs from the chart's rendering; "
                                    "run scripts/render-deploy.sh")

    # -- the operator Deployment

    def deployment(self):
        (dep,) = by_kind(self.chart_objects(), "Deployment")
        return dep

    def test_deployment_passes_only_operator_flags(self):
        container = self.deployment()["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual([container["name"]], ["operator"])
        flags = effective_flags(container.get("args", []))   # raises on a flag it does not take
        self.assertTrue(flags["leader-elect"])
        self.assertTrue(flags["network-policy"])
        self.assertTrue(flags["tls"])
        # the Prometheus of the values, and the operator's own pods (its progress probe)
        peers = json.loads(flags["network-policy-metrics-from"])
        self.assertEqual([p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in peers],
                         ["prometheus", "kubeps"])
        env = [(e["name"], e.get("valueFrom")) for e in container.get("env", [])]
        self.assertEqual([name for name, _ in env], ["POD_NAME", "POD_NAMESPACE"])

    def check_probes(self, dep, where):
        """Every probe targets the port kubeps-operator listens on."""
        container = dep["spec"]["template"]["spec"]["containers"][0]
        port = int(effective_flags(container.get("args", []))["metrics-port"])
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        self.assertIn(port, ports.values(),
                      "%s: no containerPort for the operator's --metrics-port %d" % (where, port))
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

    def test_probes_target_the_operators_port(self):
        self.check_probes(self.deployment(), "helm/kubeps (default values)")


if __name__ == "__main__":
    unittest.main()
