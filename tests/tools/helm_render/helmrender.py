"""Builds and runs helm-render (the Go program beside this file) for the chart tests.

    import helmrender
    exe = helmrender.build()            # raises helmrender.Unavailable without Go
    text = helmrender.render(exe, "helm/kubeps", name="kubeps", namespace="kubeps-system",
                             values=["my-values.yaml"])

The program is built in GOPATH mode against Debian's Go packages
(/usr/share/gocode: golang-github-masterminds-sprig-dev and its dependencies,
golang-gopkg-yaml.v2-dev), offline:

    cd tests/tools/helm_render
    GO111MODULE=off GOPATH=/usr/share/gocode GOPROXY=off GOFLAGS= CGO_ENABLED=0 \
        go build -o /tmp/helm-render .
"""
import json
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GOPATH = "/usr/share/gocode"
NEEDED = ("github.com/Masterminds/sprig", "github.com/Masterminds/semver", "gopkg.in/yaml.v2")
PACKAGES = "golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev"

_built = {}


class Unavailable(Exception):
    """Go or the Go packages the renderer needs are not installed."""


class RenderError(Exception):
    def __init__(self, args, result):
        self.result = result
        super().__init__("helm-render %s failed (exit %d):\n%s" % (
            " ".join(args), result.returncode, result.stderr.strip()))


def go_env():
    env = dict(os.environ)
    env.update({"GO111MODULE": "off", "GOPATH": GOPATH, "GOPROXY": "off", "GOFLAGS": "",
                "CGO_ENABLED": "0"})
    if not env.get("GOCACHE"):
        # The compiled sprig packages stay cached between runs: under /tmp, not
        # $TMPDIR, which a test suite's run gives itself and removes.
        env["GOCACHE"] = "/tmp/kubeps-go-build-cache"
    return env


def build():
    """Builds helm-render once per process; returns the executable's path."""
    if "exe" in _built:
        return _built["exe"]
    go = shutil.which("go") or ("/usr/lib/go/bin/go" if os.path.exists("/usr/lib/go/bin/go") else None)
    if go is None:
        raise Unavailable("`go` is not installed (apt-get install %s)" % PACKAGES)
    missing = [p for p in NEEDED if not os.path.isdir(os.path.join(GOPATH, "src", p))]
    if missing:
        raise Unavailable("Go packages missing under %s/src: %s (apt-get install %s)" % (
            GOPATH, ", ".join(missing), PACKAGES))
    build_dir = tempfile.mkdtemp(prefix="kubeps-helm-render-")
    exe = os.path.join(build_dir, "helm-render")
    result = subprocess.run([go, "build", "-o", exe, "."], cwd=HERE, env=go_env(),
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError("building helm-render failed:\n%s%s" % (result.stdout, result.stderr))
    _built["exe"] = exe
    return exe


def run(exe, args, check=True):
    result = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise RenderError(args, result)
    return result


def render(exe, chart, name="kubeps", namespace="kubeps-system", values=(), sets=(),
           api_versions=(), include_crds=False, notes=False, check=True):
    """The chart's manifests as `helm template` prints them (or the
    CompletedProcess when check is False)."""
    args = ["--name", name, "--namespace", namespace]
    for v in values:
        args += ["-f", v]
    for s in sets:
        args += ["--set", s]
    for a in api_versions:
        args += ["--api-versions", a]
    if include_crds:
        args.append("--include-crds")
    if notes:
        args.append("--notes")
    args.append(chart)
    result = run(exe, args, check=check)
    return result.stdout if check else result


def json_stream(text):
    """The objects of kubectl's `-o json` output: the items of a List, or one
    object after another (what `create --dry-run=client` prints for several)."""
    decoder, pos, out = json.JSONDecoder(), 0, []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        obj, pos = decoder.raw_decode(text, pos)
        out.extend(obj["items"] if obj.get("kind") == "List" else [obj])
    return out
