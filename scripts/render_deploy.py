#!/usr/bin/env python3
"""deploy/'s plain manifests, rendered from the Helm chart (helm/kubeps) with
its default values, as `helm template kubeps helm/kubeps --namespace
kubeps-system --include-crds` would print them, split into the folders a user
applies:

    kubectl apply -f deploy/crd/ -f deploy/rbac/ -f deploy/operator/

The chart is the source; deploy/crd, deploy/rbac, deploy/operator and the
chart's monitoring files in deploy/monitoring are its output, never edited by
hand. The chart's CRD is itself generated from the TrainingJob's field table
(scripts/generate-crd.sh, which ends by running this).

    scripts/render-deploy.sh            rewrites the files
    scripts/render-deploy.sh --check    exits 1 naming every file that differs

tests/k8s/test_manifests_in_step.py runs the check. The chart is rendered by
tests/tools/helm_render (Go's text/template and sprig, as Helm does), which
needs Go and Debian's sprig packages.
"""
import argparse
import os
import re
import sys

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "tools", "helm_render"))
import helmrender  # noqa: E402

CHART = os.path.join(SOURCE_DIR, "helm", "kubeps")
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
RELEASE = "kubeps"
NAMESPACE = "kubeps-system"

# Which deploy/ file each rendered template goes to. A template that renders
# with the default values and is not listed here is an error: a new one must
# be given a place on purpose.
PLACES = {
    "kubeps/crds/trainingjobs.yaml": "crd/trainingjobs.yaml",
    "kubeps/templates/serviceaccount.yaml": "rbac/rbac.yaml",
    "kubeps/templates/clusterrole.yaml": "rbac/rbac.yaml",
    "kubeps/templates/clusterrolebinding.yaml": "rbac/rbac.yaml",
    "kubeps/templates/service.yaml": "operator/deployment.yaml",
    "kubeps/templates/deployment.yaml": "operator/deployment.yaml",
}
WHAT = {
    "crd/trainingjobs.yaml": "The TrainingJob custom resource.",
    "rbac/rbac.yaml": "What the kubeps operator may do, and nothing more.",
    "operator/deployment.yaml": ("The kubeps operator: two replicas, one active at a time (leader\n"
                                 "# election on a Lease in %s), and its metrics Service." % NAMESPACE),
}
# `helm install --create-namespace` creates the namespace; the chart does
# not render it. The plain manifests carry it in each folder that puts
# something there, so that folder applies on its own.
NAMESPACE_DOC = """apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    app.kubernetes.io/name: kubeps
""" % NAMESPACE
NEEDS_NAMESPACE = ("rbac/rbac.yaml", "operator/deployment.yaml")
# Files that Helm can only read inside the chart, copied out unchanged.
COPIES = {
    "monitoring/grafana-dashboard.json": "files/grafana-dashboard.json",
    "monitoring/prometheus-rules.yaml": "files/prometheus-rules.yaml",
}
HEADER = """# Rendered from the Helm chart helm/kubeps (default values, release "%s" in
# namespace %s) by scripts/render-deploy.sh: do not edit; change the chart
# and run the script again.
#
#   kubectl apply -f deploy/crd/ -f deploy/rbac/ -f deploy/operator/
#
# %s
""" % (RELEASE, NAMESPACE, "%s")


def split_documents(text):
    """[(source template, document text)] of helm-render's output."""
    documents = []
    for chunk in re.split(r"^---\n", text, flags=re.M):
        if not chunk.strip():
            continue
        m = re.match(r"# Source: (\S+)\n", chunk)
        if not m:
            raise ValueError("a rendered document without its # Source line:\n" + chunk[:200])
        documents.append((m.group(1), chunk))
    return documents


def render():
    """{path under deploy/: its content (bytes)} for every generated file."""
    exe = helmrender.build()
    text = helmrender.render(exe, CHART, name=RELEASE, namespace=NAMESPACE, include_crds=True)
    grouped = {}
    for source, document in split_documents(text):
        if source not in PLACES:
            raise ValueError("%s renders with the default values but has no place in deploy/: "
                             "add it to PLACES in scripts/render_deploy.py" % source)
        grouped.setdefault(PLACES[source], []).append(document)
    files = {}
    for path, documents in grouped.items():
        if path in NEEDS_NAMESPACE:
            documents = [NAMESPACE_DOC] + documents
        files[path] = (HEADER % WHAT[path] + "---\n".join(documents)).encode()
    for path, chart_file in COPIES.items():
        with open(os.path.join(CHART, chart_file), "rb") as f:
            files[path] = f.read()
    return files


def differences(files):
    """The deploy/ paths whose committed content is not `files`'."""
    stale = []
    for path, content in sorted(files.items()):
        try:
            with open(os.path.join(DEPLOY, path), "rb") as f:
                committed = f.read()
        except FileNotFoundError:
            committed = None
        if committed != content:
            stale.append("deploy/" + path)
    return stale


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from the rendering")
    args = parser.parse_args()
    files = render()
    if args.check:
        stale = differences(files)
        if stale:
            print("deploy/ differs from the chart's rendering (%s); run scripts/render-deploy.sh"
                  % ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    for path, content in files.items():
        os.makedirs(os.path.dirname(os.path.join(DEPLOY, path)), exist_ok=True)
        with open(os.path.join(DEPLOY, path), "wb") as f:
            f.write(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
