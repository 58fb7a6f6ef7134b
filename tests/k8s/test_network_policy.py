"""NetworkPolicy in the emulator: the API server serves
networking.k8s.io/v1 networkpolicies, and the kubelet emulator enforces
their ingress rules as a CNI plugin does (emulator/kubelet/network_policy.py
and policy_enforcer.py), so that a pod of another job can be shown refused.

Probe pods run python3: servers listen on their pod IP, clients try to
connect to their targets again and again (1 s connect timeout) and log each
change of outcome: OK, TIMEOUT (dropped, as Calico and Cilium do) or the
error. Each test has namespaces of its own on one cluster per class, and
waits for the outcome it expects with a deadline (rules follow changes
within a second or so).

Enforcement needs root, nft and the net_cls cgroup: where the node says it
is unavailable (annotation kubeps.io/network-policy), those tests skip with
its reason.

    python3 -m unittest -v test_network_policy      (from tests/k8s)
"""
import glob
import os
import socket
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.client import ApiError  # noqa: E402
from emulator.cluster import Cluster  # noqa: E402
from emulator.kubelet.network_policy import PolicyState, render  # noqa: E402

NODE = "kubeps-node"
NETPOLS = "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies"

SERVER = r"""
import os, socket, sys, threading
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["POD_IP"], port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("listening", sys.argv[1:], flush=True)
threading.Event().wait()
"""

CLIENT = r"""
import socket, sys, threading, time
def probe(target):
    host, port = target.rsplit(":", 1)
    last = None
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            result = "OK"
        except socket.timeout:
            result = "TIMEOUT"
        except OSError as e:
            result = "ERROR %s" % e.__class__.__name__
        if result != last:
            print(target, result, flush=True)
            last = result
        time.sleep(0.2)
for t in sys.argv[1:]:
    threading.Thread(target=probe, args=(t,), daemon=True).start()
threading.Event().wait()
"""


def pod_ip_env():
    return [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


class NetworkPolicyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(backoff=0.3).start()
        node = cls.c.client.get("/api/v1/nodes/" + NODE)
        cls.enforcement = (node["metadata"].get("annotations") or {}).get(
            "kubeps.io/network-policy", "unavailable: the node does not say")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def require_enforcement(self):
        if self.enforcement != "enforced":
            self.skipTest("NetworkPolicy enforcement %s" % self.enforcement)

    # -- helpers

    def namespace(self, name, labels=None):
        self.c.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": name,
                                                               "labels": labels or {}}})

    def pod(self, ns, name, labels, script, args, ports=(), ready_port=None):
        container = {"name": "main", "image": "python:3", "command": ["python3", "-c", script],
                     "args": [str(a) for a in args], "env": pod_ip_env(),
                     "ports": [{"name": n, "containerPort": p} if n else {"containerPort": p}
                               for n, p in ports]}
        if ready_port:
            container["readinessProbe"] = {"tcpSocket": {"port": ready_port},
                                           "periodSeconds": 1}
        self.c.client.post("/api/v1/namespaces/%s/pods" % ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [container], "terminationGracePeriodSeconds": 1}})

    def server(self, ns, name="server", labels=None, ports=((None, 8080),)):
        self.pod(ns, name, labels or {"app": "server"}, SERVER, [p for _, p in ports],
                 ports=ports, ready_port=ports[0][1])
        pod = self.c.wait_for(lambda: self.ready(ns, name), timeout=60, what=name + " Ready")
        return pod["status"]["podIP"]

    def ready(self, ns, name):
        pod = self.c.pod(name, ns)
        if any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", [])):
            return pod
        return None

    def client(self, ns, name, labels, targets):
        self.pod(ns, name, labels, CLIENT, targets)

    def outcome(self, ns, name, target):
        """The client's last logged outcome for `target`, or None."""
        pod = self.c.pod(name, ns)
        uid = pod["metadata"]["uid"]
        logs = sorted(glob.glob(os.path.join(self.c.dir, "node", "logs", "%s_%s_%s" % (
            ns, name, uid), "main.*.log")))
        result = None
        for path in logs[-1:]:
            with open(path) as f:
                for line in f:
                    parts = line.split(None, 1)
                    if len(parts) == 2 and parts[0] == target:
                        result = parts[1].strip()
        return result

    def expect(self, ns, name, target, wanted, timeout=30):
        self.c.wait_for(lambda: self.outcome(ns, name, target) == wanted, timeout=timeout,
                        interval=0.2, what="%s/%s -> %s: %s (last: %s)" % (
                            ns, name, target, wanted, self.outcome(ns, name, target)))

    def policy(self, ns, name, spec):
        self.c.client.post(NETPOLS % ns, {"apiVersion": "networking.k8s.io/v1",
                                          "kind": "NetworkPolicy", "metadata": {"name": name},
                                          "spec": spec})

    def node_connects(self, host, port):
        """The test process (the node) opens a connection, retrying a refusal."""
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection((host, port), timeout=2).close()
                return True
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)

    # -- the API

    def test_the_api_serves_network_policies(self):
        c, ns = self.c, "np-api"
        self.namespace(ns)
        self.policy(ns, "web", {"podSelector": {"matchLabels": {"app": "web"}},
                                "ingress": [{"ports": [{"port": 80}]}]})
        out = c.kubectl("get", "netpol", "-n", ns).stdout
        self.assertRegex(out, r"NAME\s+POD-SELECTOR\s+AGE")
        self.assertRegex(out, r"web\s+app=web\s+")
        got = c.kubectl("get", "networkpolicy", "web", "-n", ns, "-o", "json",
                        json_output=True)
        self.assertEqual(got["spec"]["policyTypes"], ["Ingress"])
        self.assertEqual(got["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP")
        # kubectl apply of the kind, and defaults with egress rules
        c.kubectl("apply", "-n", ns, "-f", "-", input="""
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: all}
spec:
  podSelector: {}
  egress: [{}]
""")
        got = c.kubectl("get", "netpol", "all", "-n", ns, "-o", "json", json_output=True)
        self.assertEqual(got["spec"]["policyTypes"], ["Ingress", "Egress"])
        self.assertRegex(c.kubectl("get", "netpol", "-n", ns).stdout, r"all\s+<none>\s+")
        # collected with its owner
        owner = c.client.post("/api/v1/namespaces/%s/configmaps" % ns, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
        c.client.post(NETPOLS % ns, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {
                "name": "owned", "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": owner["metadata"]["uid"]}]},
            "spec": {"podSelector": {}}})
        c.client.delete("/api/v1/namespaces/%s/configmaps/owner" % ns)

        def collected():
            try:
                c.client.get(NETPOLS % ns + "/owned")
                return False
            except ApiError as e:
                return e.code == 404
        c.wait_for(collected, timeout=30, what="the owned NetworkPolicy collected")

    def test_rendering_without_root(self):
        """The semantics (network_policy.py), where enforcement cannot run too."""
        def pod(ns, name, labels, uid):
            return {"metadata": {"namespace": ns, "name": name, "labels": labels, "uid": uid},
                    "spec": {"containers": [{"name": "m", "ports": [
                        {"name": "http", "containerPort": 8080, "protocol": "TCP"}]}]}}
        pods = [(pod("a", "srv", {"app": "web"}, "1"), "127.9.0.2", 0x10001),
                (pod("a", "cli", {"role": "client"}, "2"), "127.9.0.3", 0x10002),
                (pod("b", "other", {}, "3"), "127.9.0.4", 0x10003)]
        pol = {"metadata": {"namespace": "a", "name": "p"}, "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                         "ports": [{"port": "http"}]}]}}
        text = render("t", PolicyState(pods, {"a": {}, "b": {}}, [pol], [], [0x10001, 0x10002,
                                                                           0x10003]))
        self.assertIn("ip daddr 127.9.0.2 jump pod_127_9_0_2", text)
        self.assertIn("meta l4proto tcp th dport 8080 meta cgroup { 0x00010002 } accept", text)
        self.assertNotIn("127.9.0.3 jump", text)   # no policy selects the client
        deny = dict(pol, spec={"podSelector": {}, "ingress": []})
        text = render("t", PolicyState(pods, {}, [deny], [], []))
        self.assertIn("chain pod_127_9_0_3 {\n    # a/cli\n    drop", text)

    # -- enforcement

    def test_pod_selector_peer_and_the_node(self):
        self.require_enforcement()
        ns = "np-pods"
        self.namespace(ns)
        target = "%s:8080" % self.server(ns)
        self.client(ns, "friend", {"role": "client"}, [target])
        self.client(ns, "stranger", {"role": "other"}, [target])
        self.expect(ns, "friend", target, "OK")     # no policy: everyone
        self.expect(ns, "stranger", target, "OK")
        self.policy(ns, "server", {"podSelector": {"matchLabels": {"app": "server"}},
                                   "ingress": [{"from": [{"podSelector": {
                                       "matchLabels": {"role": "client"}}}]}]})
        self.expect(ns, "stranger", target, "TIMEOUT")
        self.expect(ns, "friend", target, "OK")
        self.assertTrue(self.node_connects(target.split(":")[0], 8080))
        self.c.client.delete(NETPOLS % ns + "/server")
        self.expect(ns, "stranger", target, "OK")

    def test_namespace_selector_peers(self):
        self.require_enforcement()
        self.namespace("np-ns-server")
        self.namespace("np-ns-blue", {"team": "blue"})
        self.namespace("np-ns-red", {"team": "red"})
        target = "%s:8080" % self.server("np-ns-server")
        self.policy("np-ns-server", "server", {"podSelector": {}, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"team": "blue"}}},
            {"namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "In",
                "values": ["np-ns-red"]}]},
             "podSelector": {"matchLabels": {"role": "friend"}}}]}]})
        self.client("np-ns-blue", "blue", {}, [target])
        self.client("np-ns-red", "friend", {"role": "friend"}, [target])
        self.client("np-ns-red", "red", {}, [target])
        self.client("np-ns-server", "neighbour", {}, [target])
        self.expect("np-ns-blue", "blue", target, "OK")
        self.expect("np-ns-red", "friend", target, "OK")
        self.expect("np-ns-red", "red", target, "TIMEOUT")
        self.expect("np-ns-server", "neighbour", target, "TIMEOUT")

    def test_port_rules(self):
        self.require_enforcement()
        ns = "np-ports"
        self.namespace(ns)
        ip = self.server(ns, ports=(("http", 8080), (None, 9090), (None, 7070)))
        targets = ["%s:%d" % (ip, p) for p in (8080, 9090, 7070)]
        # an Egress-only policy does not isolate for ingress
        self.policy(ns, "egress-only", {"podSelector": {}, "policyTypes": ["Egress"]})
        self.policy(ns, "ports", {"podSelector": {}, "ingress": [
            {"ports": [{"port": "http"}]},
            {"ports": [{"protocol": "TCP", "port": 7000, "endPort": 7100}]}]})
        self.client(ns, "client", {}, targets)
        self.expect(ns, "client", targets[1], "TIMEOUT")
        self.expect(ns, "client", targets[0], "OK")
        self.expect(ns, "client", targets[2], "OK")

    def test_deny_all(self):
        self.require_enforcement()
        ns = "np-deny"
        self.namespace(ns)
        ip = self.server(ns)
        self.policy(ns, "deny", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []})
        self.client(ns, "client", {"app": "server"}, ["%s:8080" % ip])
        self.expect(ns, "client", "%s:8080" % ip, "TIMEOUT")
        self.assertTrue(self.node_connects(ip, 8080))

    def test_a_service_is_judged_like_its_endpoints(self):
        self.require_enforcement()
        ns = "np-svc"
        self.namespace(ns)
        self.server(ns, labels={"app": "web"}, ports=(("http", 8080),))
        svc = self.c.client.post("/api/v1/namespaces/%s/services" % ns, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"},
                     "ports": [{"port": 80, "targetPort": "http"}]}})
        target = "%s:80" % svc["spec"]["clusterIP"]
        self.policy(ns, "web", {"podSelector": {"matchLabels": {"app": "web"}},
                                "ingress": [{"from": [{"podSelector": {
                                    "matchLabels": {"role": "client"}}}],
                                    "ports": [{"port": 8080}]}]})
        self.client(ns, "friend", {"role": "client"}, [target])
        self.client(ns, "stranger", {}, [target])
        self.expect(ns, "stranger", target, "TIMEOUT")
        self.expect(ns, "friend", target, "OK")
        self.assertTrue(self.node_connects(svc["spec"]["clusterIP"], 80))


if __name__ == "__main__":
    unittest.main()
