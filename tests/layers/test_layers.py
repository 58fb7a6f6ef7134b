"""The layers of docs/layout.md's drawing, checked against the code: which
folder may include which, no global include directory, no cycle among the
libraries' link edges, and a KV client header that does not expose gRPC.

    python3 -m unittest -v test_layers        (from tests/layers)
"""
import os
import re
import subprocess
import unittest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Bottom to top. A folder may include its own headers and those of the
# folders it lists; the generated protocol headers ("kubeps.pb.h") only where
# "proto" is listed.
ALLOWED = {
    "proto": set(),
    "common": {"proto"},
    "api": {"common"},
    "ps-server": {"proto", "common", "api"},
    "worker-agent": {"proto", "common", "api"},
    "operator": {"common", "api", "operator"},
    # Beside the operator, on top of the servers and the agent: kubeps-reshard.
    "tools": {"proto", "common", "api", "ps-server", "worker-agent"},
}
SOURCE_SUFFIXES = (".h", ".cc", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(folder):
    for root, _, files in os.walk(os.path.join(SOURCE_DIR, folder)):
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(root, name)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def cmake_files():
    """Every CMakeLists.txt, and the *.cmake files they include."""
    for root, dirs, files in os.walk(SOURCE_DIR):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
        for name in files:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                yield os.path.join(root, name)


def link_graph():
    """kubeps library -> the kubeps libraries it links, from every target_link_libraries."""
    graph = {}
    call = re.compile(r"target_link_libraries\(\s*([\w-]+)([^)]*)\)", re.S)
    for path in cmake_files():
        text = re.sub(r"#.*", "", read(path))
        for target, args in call.findall(text):
            deps = {a for a in args.split() if a.startswith("kubeps_")}
            graph.setdefault(target, set()).update(deps)
    return graph


class LayersTest(unittest.TestCase):
    def test_folders_include_only_from_below(self):
        bad = []
        for folder, allowed in ALLOWED.items():
            for path in sources(folder):
                for included in INCLUDE.findall(read(path)):
                    top = included.split("/")[0] if "/" in included else "proto"
                    if "/" not in included and not included.startswith("kubeps."):
                        continue  # a header of the same folder, or a system one in quotes
                    if top != folder and top not in allowed:
                        bad.append("%s includes %s" % (os.path.relpath(path, SOURCE_DIR), included))
        self.assertEqual(bad, [], "includes against the layers (docs/layout.md, Layers):\n" + "\n".join(bad))

    def test_servers_and_agent_never_include_the_operator(self):
        # The rule DESIGN.md states first, checked on its own so that its
        # failure reads plainly.
        offenders = [os.path.relpath(p, SOURCE_DIR) for folder in ("ps-server", "worker-agent")
                     for p in sources(folder) if '#include "operator/' in read(p)]
        self.assertEqual(offenders, [])

    def test_no_global_include_directory(self):
        offenders = [os.path.relpath(p, SOURCE_DIR) for p in cmake_files()
                     if re.search(r"^\s*include_directories\s*\(", read(p), re.M)]
        self.assertEqual(offenders, [], "use target_include_directories on the target that needs it")

    def test_no_link_cycle(self):
        graph = link_graph()
        self.assertIn("kubeps_trainer", graph, "the link graph was not read")
        state = {}

        def visit(node, path):
            state[node] = "open"
            for dep in sorted(graph.get(node, ())):
                if state.get(dep) == "open":
                    self.fail("link cycle: " + " -> ".join(path + [node, dep]))
                if dep not in state:
                    visit(dep, path + [node])
            state[node] = "done"

        for node in sorted(graph):
            if node not in state:
                visit(node, [])

    def test_control_side_libraries_do_not_link_the_kubernetes_client(self):
        graph = link_graph()

        def reaches(start, goal, seen=()):
            return start == goal or any(reaches(d, goal, seen + (start,))
                                        for d in graph.get(start, ()) if d not in seen)
        for library in ("kubeps_controller", "kubeps_local", "kubeps"):
            self.assertFalse(reaches(library, "kubeps_kubeclient"), library + " links the Kubernetes client")

    def test_sidecar_drives_the_kv_client_through_its_public_header(self):
        # The sidecar seam (DESIGN.md): the serving mode reaches the servers
        # only through KVWorker, as the C++ SDK's users do, and links neither
        # the trainer nor the wire protocol.
        folder = os.path.join("worker-agent", "sidecar")
        self.assertTrue(list(sources(folder)), "no sources in " + folder)
        allowed_kv = {"worker-agent/kv/kv_worker.h", "worker-agent/kv/task_pool.h"}
        bad = ["%s includes %s" % (os.path.relpath(path, SOURCE_DIR), included)
               for path in sources(folder) for included in INCLUDE.findall(read(path))
               if (included.startswith("worker-agent/") and not included.startswith(folder + "/")
                   and included not in allowed_kv) or included.startswith("kubeps.")]
        self.assertEqual(bad, [], "the sidecar includes behind the KV client's header")
        graph = link_graph()
        self.assertIn("kubeps_sidecar", graph, "the link graph has no kubeps_sidecar")
        self.assertEqual(graph["kubeps_sidecar"] - {"kubeps_kv", "kubeps_common"}, set(),
                         "kubeps_sidecar links more than the KV client and common/")

    def test_the_sdk_library_holds_the_kv_client_and_nothing_above_it(self):
        # libkubeps.so (worker-agent/kv/sdk.cmake) is what users' programs
        # load: the KV client and what it uses, none of the agent's server,
        # the trainer or the control side.
        graph = link_graph()
        self.assertIn("kubeps_sdk", graph, "the link graph has no kubeps_sdk")
        reached, todo = set(), ["kubeps_sdk"]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in reached:
                    reached.add(dep)
                    todo.append(dep)
        # kubeps_blas comes with kubeps_common; the library links with
        # --as-needed, and the KV client calls no BLAS.
        allowed = {"kubeps_kv_objects", "kubeps_common", "kubeps_proto", "kubeps_scheduler_client",
                   "kubeps_blas"}
        self.assertEqual(reached - allowed, set(), "libkubeps.so links more than the KV client")

    def test_kv_client_header_does_not_expose_grpc(self):
        # The header the C++ SDK installs: preprocessed, it names neither
        # gRPC nor protobuf.
        header = os.path.join(SOURCE_DIR, "worker-agent", "kv", "kv_worker.h")
        out = subprocess.run(["c++", "-std=c++17", "-E", "-I", SOURCE_DIR, header],
                             capture_output=True, text=True, check=True).stdout
        leaks = sorted(set(re.findall(r'^# \d+ "([^"]*(?:grpc|protobuf)[^"]*)"', out, re.M)))
        self.assertEqual(leaks, [])


if __name__ == "__main__":
    unittest.main()
