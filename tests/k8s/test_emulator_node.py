"""Tests of the Kubernetes emulator's node troubles, as a real cluster has
them: a volume that cannot be mounted (FailedMount Events, the pod Pending
in ContainerCreating), a claim that does not exist (unschedulable), the
Eviction subresource with PodDisruptionBudgets, `kubectl drain` (cordon,
evict, wait), a node rebooted with the kubelet's graceful node shutdown (its
pods end Failed, not deleted, and a pod bound meanwhile is refused), the
kubelet's admission of a pod bound without the scheduler, and a node that goes NotReady (its pods stay
Terminating);
downwardAPI volumes that follow the pod's labels and annotations; and the
host's mount points, which the pods of every stand-in cluster on the
machine share.

    python3 -m unittest -v test_emulator_node      (from tests/k8s)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import Cluster  # noqa: E402
from emulator.kubelet import mount_points  # noqa: E402
from emulator.kubelet.pod_worker import PodWorker  # noqa: E402
from test_emulator_pod_start import pod, waiting  # noqa: E402

NS_PODS = "/api/v1/namespaces/default/pods"


def failed_mounts(c, name):
    uid = c.pod(name)["metadata"]["uid"]
    return [e for e in c.client.get("/api/v1/namespaces/default/events?fieldSelector="
                                    "involvedObject.uid%3D" + uid)["items"]
            if e["reason"] == "FailedMount"]


class OneClusterTestCase(unittest.TestCase):
    """One stand-in cluster for the class's tests; what a test applies is deleted after it."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(backoff=0.3).start()

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def apply(self, obj):
        self.c.kubectl("apply", "-f", "-", input=json.dumps(obj))
        self.addCleanup(self.c.kubectl, "delete", obj["kind"].lower(), obj["metadata"]["name"],
                        "--wait=false", "--ignore-not-found")


class EmulatorVolumeTest(OneClusterTestCase):
    def test_a_config_map_that_does_not_exist_fails_to_mount_until_it_is_made(self):
        c = self.c
        p = pod("no-cm", volumes=[{"name": "data", "configMap": {"name": "settings"}}])
        p["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/tmp/x"}]
        self.apply(p)
        events = c.wait_for(lambda: failed_mounts(c, "no-cm"), what="a FailedMount event")
        self.assertEqual(events[0]["type"], "Warning")
        self.assertEqual(events[0]["message"],
                         'MountVolume.SetUp failed for volume "data" : configmap "settings" '
                         "not found")
        self.assertEqual(events[0]["source"]["component"], "kubelet")
        current = c.pod("no-cm")
        self.assertEqual(current["status"]["phase"], "Pending")
        self.assertEqual(waiting(current), {"reason": "ContainerCreating"})
        # retried, one Event counting up (as the kubelet's recorder aggregates)
        c.wait_for(lambda: failed_mounts(c, "no-cm")[0]["count"] >= 2, what="a repeated event")
        self.assertEqual(len(failed_mounts(c, "no-cm")), 1)
        self.assertIn("FailedMount", c.kubectl("describe", "pod", "no-cm").stdout)
        # The ConfigMap made later: the next try mounts it.
        self.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                    "data": {"a": "1"}})
        c.wait_for(lambda: c.pod("no-cm")["status"]["phase"] == "Running", timeout=30,
                   what="Running once the ConfigMap exists")

    def test_a_missing_secret_and_a_missing_key(self):
        c = self.c
        self.apply(pod("no-secret", volumes=[{"name": "token", "secret": {"secretName": "tok"}}]))
        self.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keyless"},
                    "data": {"a": "1"}})
        self.apply(pod("no-key", volumes=[{"name": "cfg", "configMap": {
            "name": "keyless", "items": [{"key": "b", "path": "b"}]}}]))
        self.apply(pod("optional", volumes=[{"name": "cfg", "configMap": {
            "name": "none-such", "optional": True}}]))
        event = c.wait_for(lambda: failed_mounts(c, "no-secret"), what="FailedMount")[0]
        self.assertEqual(event["message"], 'MountVolume.SetUp failed for volume "token" : '
                         'secret "tok" not found')
        event = c.wait_for(lambda: failed_mounts(c, "no-key"), what="FailedMount")[0]
        self.assertEqual(event["message"], 'MountVolume.SetUp failed for volume "cfg" : '
                         "configmap references non-existent config key: b")
        c.wait_for(lambda: c.pod("optional")["status"]["phase"] == "Running", what="Running")
        self.assertEqual(failed_mounts(c, "optional"), [])

    def test_a_claim_that_does_not_exist_or_is_not_bound_is_unschedulable(self):
        c = self.c
        self.apply(pod("no-claim", volumes=[{"name": "data", "persistentVolumeClaim": {
            "claimName": "ckpt"}}]))

        def unschedulable():
            return [x for x in c.pod("no-claim")["status"].get("conditions", [])
                    if x["type"] == "PodScheduled" and x["reason"] == "Unschedulable"]
        condition = c.wait_for(unschedulable, what="Unschedulable")[0]
        self.assertIn('0/1 nodes are available: persistentvolumeclaim "ckpt" not found.',
                      condition["message"])
        self.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "ckpt"}, "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}})
        c.wait_for(lambda: "unbound immediate PersistentVolumeClaims" in
                   unschedulable()[0]["message"], what="unbound")
        # a provisioner binds it: the pod is scheduled and mounts it
        c.client.patch("/api/v1/namespaces/default/persistentvolumeclaims/ckpt/status",
                       {"status": {"phase": "Bound"}})
        c.wait_for(lambda: c.pod("no-claim")["status"]["phase"] == "Running", timeout=30,
                   what="Running once the claim is bound")


class EmulatorDownwardApiTest(OneClusterTestCase):
    def volume_dir(self, name, volume):
        uid = self.c.pod(name)["metadata"]["uid"]
        return os.path.join(self.c.dir, "node", "pods", "default_%s_%s" % (name, uid), "volumes",
                            volume)

    def test_downward_api_files_follow_the_pods_annotations_and_labels(self):
        c = self.c
        mount = "/tmp/kubeps-emulator-downward-%d" % os.getpid()
        desired = "metadata.annotations['kubeps.io/desired-workers']"
        # prints the file each time it changes: every value the program saw
        script = ('echo "env=$DESIRED"; last=; while true; do v=$(cat %s/workers); '
                  'if [ "$v" != "$last" ]; then echo "workers=$v"; last=$v; fi; sleep 0.05; '
                  "done" % mount)
        p = pod("elastic", script=script, volumes=[{"name": "elastic", "downwardAPI": {"items": [
            {"path": "workers", "fieldRef": {"fieldPath": desired}},
            {"path": "role", "fieldRef": {"fieldPath": "metadata.labels['role']"}},
            {"path": "none", "fieldRef": {"fieldPath": "metadata.annotations['kubeps.io/x']"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}])
        p["metadata"]["labels"] = {"role": "scheduler", "job": "j"}
        p["metadata"]["annotations"] = {"kubeps.io/desired-workers": "2"}
        main = p["spec"]["containers"][0]
        main["volumeMounts"] = [{"name": "elastic", "mountPath": mount, "readOnly": True}]
        main["env"] = [{"name": "DESIRED", "valueFrom": {"fieldRef": {"fieldPath": desired}}}]
        c.client.post(NS_PODS, p)   # not kubectl apply: no last-applied annotation
        self.addCleanup(c.kubectl, "delete", "pod", "elastic", "--wait=false",
                        "--ignore-not-found")
        c.wait_for(lambda: "workers=2" in c.kubectl("logs", "elastic").stdout, what="workers=2")
        vol = self.volume_dir("elastic", "elastic")

        def read(name):
            with open(os.path.join(vol, name)) as f:
                return f.read()
        self.assertEqual({n: read(n) for n in ("workers", "role", "none", "labels",
                                               "annotations")},
                         {"workers": "2", "role": "scheduler", "none": "",
                          "labels": 'job="j"\nrole="scheduler"',
                          "annotations": 'kubeps.io/desired-workers="2"'})
        first = os.readlink(os.path.join(vol, "..data"))
        self.assertEqual(os.readlink(os.path.join(vol, "workers")), "..data/workers")

        c.kubectl("annotate", "pod", "elastic", "kubeps.io/desired-workers=4", "--overwrite")
        started = time.time()
        c.wait_for(lambda: read("workers") == "4", timeout=5, interval=0.05,
                   what="the file rewritten")
        self.assertLess(time.time() - started, 5)
        # switched atomically: a new timestamped folder behind ..data, the old one gone
        second = os.readlink(os.path.join(vol, "..data"))
        self.assertNotEqual(second, first)
        self.assertTrue(second.startswith(".."), second)
        self.assertFalse(os.path.exists(os.path.join(vol, first)))
        self.assertEqual(os.readlink(os.path.join(vol, "workers")), "..data/workers")
        self.assertEqual(read("annotations"), 'kubeps.io/desired-workers="4"')
        # what the container saw through its mount: 2, then 4, nothing between
        logs = c.wait_for(lambda: "workers=4" in c.kubectl("logs", "elastic").stdout and
                          c.kubectl("logs", "elastic").stdout, what="workers=4 in the pod")
        self.assertEqual(logs.splitlines(), ["env=2", "workers=2", "workers=4"])
        # labels too; the environment is what it was at the start, as upstream
        c.kubectl("label", "pod", "elastic", "role=ps", "--overwrite")
        c.wait_for(lambda: read("role") == "ps", timeout=5, interval=0.05, what="role=ps")
        self.assertEqual(read("labels"), 'job="j"\nrole="ps"')
        self.assertNotEqual(os.readlink(os.path.join(vol, "..data")), second)
        # a change of something else (the status) rewrites nothing
        third = os.readlink(os.path.join(vol, "..data"))
        c.kubectl("annotate", "pod", "elastic", "kubeps.io/desired-workers=4", "--overwrite")
        c.client.patch(NS_PODS + "/elastic", {"spec": {"activeDeadlineSeconds": 600}})
        time.sleep(0.5)
        self.assertEqual(os.readlink(os.path.join(vol, "..data")), third)


class EmulatorEvictionTest(OneClusterTestCase):
    def running(self, name, labels):
        p = pod(name, script="trap 'exit 0' TERM; echo trapped; sleep 60 & wait")
        p["metadata"]["labels"] = labels
        self.apply(p)
        self.c.wait_for(lambda: any(x["type"] == "Ready" and x["status"] == "True" for x in
                                    self.c.pod(name)["status"].get("conditions", [])),
                        what="%s ready" % name)
        self.wait_trapped(name)

    def wait_trapped(self, name):
        """Until the pod's shell has set its SIGTERM trap: a container is
        Running once its process started, and under load a SIGTERM sent
        then met the shell before its trap (exit 143, not the trap's)."""
        self.c.wait_for(lambda: "trapped" in self.c.kubectl("logs", name, check=False).stdout,
                        what="%s's trap set" % name)

    def evict(self, name):
        return self.c.client.post(NS_PODS + "/%s/eviction" % name, {
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": "default"}})

    def test_an_eviction_honours_the_disruption_budget(self):
        c = self.c
        self.running("shard-a", {"app": "shards"})
        self.running("shard-b", {"app": "shards"})
        self.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "shards"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "shards"}}}})
        self.evict("shard-a")
        self.assertTrue(c.pod("shard-a")["metadata"].get("deletionTimestamp"))
        with self.assertRaises(Exception) as refused:
            self.evict("shard-b")
        self.assertEqual(refused.exception.code, 429)
        self.assertIn("Cannot evict pod as it would violate the pod's disruption budget.",
                      str(refused.exception))
        pdb = c.client.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/shards")
        self.assertEqual(pdb["status"]["disruptionsAllowed"], 0)
        self.assertEqual(pdb["status"]["desiredHealthy"], 1)
        self.assertFalse(c.pod("shard-b")["metadata"].get("deletionTimestamp"))

    def test_kubectl_drain_cordons_evicts_and_the_cordoned_node_takes_no_pod(self):
        c = self.c
        self.running("drained", {"app": "drain-me"})
        self.addCleanup(c.kubectl, "uncordon", "kubeps-node")
        out = c.kubectl("drain", "kubeps-node", "--pod-selector=app=drain-me",
                        "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                        "--timeout=60s")
        self.assertIn("node/kubeps-node cordoned", out.stdout)
        self.assertIn("evicting pod default/drained", out.stdout + out.stderr)
        self.assertIn("node/kubeps-node drained", out.stdout)
        self.assertTrue(c.client.get("/api/v1/nodes/kubeps-node")["spec"]["unschedulable"])
        self.apply(pod("after-cordon"))
        condition = c.wait_for(lambda: [x for x in c.pod("after-cordon")["status"].get(
            "conditions", []) if x["reason"] == "Unschedulable"], what="Unschedulable")[0]
        self.assertIn("1 node(s) were unschedulable", condition["message"])
        c.kubectl("uncordon", "kubeps-node")
        c.wait_for(lambda: c.pod("after-cordon")["status"]["phase"] == "Running", timeout=30,
                   what="Running after the uncordon")

    def test_a_node_reboot_ends_its_pods_failed_with_disruption_target_not_deleted(self):
        c = self.c
        self.running("rebooted", {"app": "reboot-me"})
        c.reboot_node()
        node = c.wait_for(lambda: [n for n in [c.client.get("/api/v1/nodes/kubeps-node")]
                                   if n["spec"].get("taints")], what="the not-ready taint")[0]
        self.assertEqual([(t["key"], t["effect"]) for t in node["spec"]["taints"]],
                         [("node.kubernetes.io/not-ready", "NoSchedule")])
        ready = [x for x in node["status"]["conditions"] if x["type"] == "Ready"][0]
        self.assertEqual((ready["status"], ready["message"]), ("False", "node is shutting down"))
        ended = c.wait_for(lambda: [p for p in [c.pod("rebooted")]
                                    if p["status"]["phase"] == "Failed"], what="Failed")[0]
        message = "Pod was terminated in response to imminent node shutdown."
        self.assertEqual((ended["status"]["reason"], ended["status"]["message"]),
                         ("Terminated", message))
        disruption = [x for x in ended["status"]["conditions"] if x["type"] == "DisruptionTarget"]
        self.assertEqual([(x["status"], x["reason"], x["message"]) for x in disruption],
                         [("True", "TerminationByKubelet", message)])
        self.assertEqual(ended["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
                         0, "it exited on SIGTERM; the pod failed all the same")
        self.assertNotIn("deletionTimestamp", ended["metadata"])
        c.wait_for(lambda: not c.client.get("/api/v1/nodes/kubeps-node")["spec"].get("taints"),
                   timeout=30, what="the node back")
        time.sleep(1)
        self.assertEqual(c.pod("rebooted")["status"]["phase"], "Failed", "started again")
        self.apply(pod("after-reboot"))
        c.wait_for(lambda: c.pod("after-reboot")["status"]["phase"] == "Running", timeout=30,
                   what="a new pod running on the booted node")

    def test_a_pod_bound_to_a_node_shutting_down_is_refused(self):
        c = self.c
        # It ignores SIGTERM, so the shutdown waits out its grace period.
        self.apply(pod("stubborn", script="trap '' TERM; echo trapped; sleep 60",
                       terminationGracePeriodSeconds=5))
        c.wait_for(lambda: c.pod("stubborn")["status"]["phase"] == "Running", what="Running")
        self.wait_trapped("stubborn")
        c.reboot_node()
        c.wait_for(lambda: c.client.get("/api/v1/nodes/kubeps-node")["spec"].get("taints"),
                   what="the node shutting down")
        self.apply(pod("bound-late", nodeName="kubeps-node"))
        refused = c.wait_for(lambda: [x for x in [c.pod("bound-late")]
                                      if x["status"].get("phase") == "Failed"], what="Failed")[0]
        self.assertEqual((refused["status"]["reason"], refused["status"]["message"]),
                         ("NodeShutdown",
                          "Pod was rejected: Pod was rejected as the node is shutting down."))
        self.assertNotIn("containerStatuses", refused["status"], "none of it ever ran")
        self.assertEqual(c.pod("stubborn")["status"]["phase"], "Running",
                         "refused before the shutdown ended")
        c.wait_for(lambda: not c.client.get("/api/v1/nodes/kubeps-node")["spec"].get("taints"),
                   timeout=30, what="the node back")

    def test_a_pod_bound_without_the_scheduler_that_does_not_fit_is_rejected(self):
        c = self.c
        p = pod("too-big", nodeName="kubeps-node")
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
        self.apply(p)
        rejected = c.wait_for(lambda: [x for x in [c.pod("too-big")]
                                       if x["status"].get("phase") == "Failed"], what="Failed")[0]
        self.assertEqual(rejected["status"]["reason"], "OutOfcpu")
        self.assertRegex(rejected["status"]["message"],
                         r"^Pod was rejected: Node didn't have enough resource: cpu, "
                         r"requested: 1000000, used: 0, capacity: [0-9]+$")
        self.assertNotIn("containerStatuses", rejected["status"], "none of it ever ran")


class EmulatorNodeNotReadyTest(unittest.TestCase):
    def test_a_node_that_stops_reporting_leaves_its_pods_terminating(self):
        c = Cluster(backoff=0.3).start()
        self.addCleanup(c.stop)
        alive = os.path.join(c.dir, "alive")
        p = pod("stranded", script="while true; do date > %s; sleep 0.2; done" % alive,
                terminationGracePeriodSeconds=1)
        c.client.post(NS_PODS, p)
        c.wait_for(lambda: c.pod("stranded")["status"]["phase"] == "Running", what="Running")
        c.node_not_ready(evict_after=1)
        node = c.client.get("/api/v1/nodes/kubeps-node")
        ready = [x for x in node["status"]["conditions"] if x["type"] == "Ready"][0]
        self.assertEqual((ready["status"], ready["reason"]), ("Unknown", "NodeStatusUnknown"))
        self.assertIn({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                      [{k: t[k] for k in ("key", "effect")} for t in node["spec"]["taints"]])
        deleting = c.wait_for(lambda: c.pod("stranded")["metadata"].get("deletionTimestamp")
                              and c.pod("stranded"), timeout=10, what="the taint manager")
        self.assertIn("DeletionByTaintManager", [x.get("reason") for x in
                                                 deleting["status"]["conditions"]])
        # Past its grace period: still there, Terminating, and its process runs on.
        before = os.path.getmtime(alive)
        c.wait_for(lambda: os.path.getmtime(alive) > before + 2, timeout=10,
                   what="the process still running")
        self.assertIn("Terminating", c.kubectl("get", "pod", "stranded").stdout)
        c.kubectl("delete", "pod", "stranded", "--force", "--grace-period=0")
        self.assertEqual(c.client.get(NS_PODS)["items"], [])
        # Back: the kubelet stops what it runs for a pod that is gone.
        c.node_ready()
        ready = [x for x in c.client.get("/api/v1/nodes/kubeps-node")["status"]["conditions"]
                 if x["type"] == "Ready"][0]
        self.assertEqual(ready["status"], "True")
        settled = os.path.getmtime(alive)
        c.wait_for(lambda: time.time() - os.path.getmtime(alive) > 2, timeout=15,
                   what="the stranded process stopped")
        self.assertLess(os.path.getmtime(alive) - settled, 15)


class FakeKubelet:
    """What a pod worker asks of its kubelet to claim and release mount points."""

    def __init__(self, state_dir):
        self.state_dir = self.log_dir = state_dir
        self.lock = threading.RLock()
        self.workers = {}

    def allocate_ip(self, uid):
        return "10.0.0.%d" % (len(self.workers) + 1)

    def forget_events(self, uid):
        pass

    def forget(self, worker):
        self.workers.pop(worker.uid, None)


# Another stand-in kubelet's process: claims a path for a pod of its own,
# says so, and holds the claim until its input closes.
OTHER_KUBELET = """
import sys
from emulator.kubelet import mount_points
with mount_points.held():
    mount_points.claim(sys.argv[1], "theirs")
print("claimed", flush=True)
sys.stdin.read()
"""


class SharedMountPointTest(unittest.TestCase):
    """The pods of a job mount their Secret at one path, which on this one
    machine is one mount point on the host, shared with the pods of the
    clusters of tests running beside: made for the first pod, removed after
    the last (emulator/kubelet/mount_points.py). A pod that leaves must not
    take the one another pod uses or has just claimed, or that pod's bind
    mount is detached and it finds no token (replaced workers failed so
    under load, each exiting with JoinFailed)."""

    def setUp(self):
        tmp = tempfile.mkdtemp(prefix="kubeps-mounts-")
        self.addCleanup(shutil.rmtree, tmp, True)
        self.kubelet = FakeKubelet(tmp)
        self.src = os.path.join(tmp, "secret")
        self.dst = os.path.join(tmp, "run", "secrets", "kubeps")
        os.makedirs(self.src)

    def pod(self, uid):
        worker = PodWorker(self.kubelet, {
            "metadata": {"uid": uid, "namespace": "default", "name": uid},
            "spec": {"containers": []}})
        self.kubelet.workers[uid] = worker
        return worker

    def test_a_leaving_pod_keeps_the_mount_point_that_a_starting_pod_claims_meanwhile(self):
        leaving, starting = self.pod("old"), self.pod("new")
        leaving.make_target(self.src, self.dst)

        # The leaving pod stops just before it removes the mount point; the
        # starting pod claims it then.
        removing, go_on = threading.Event(), threading.Event()
        remove = mount_points._remove_created

        def remove_slowly(path):
            if path == self.dst:
                removing.set()
                go_on.wait(10)
            return remove(path)
        with mock.patch.object(mount_points, "_remove_created", remove_slowly):
            cleanup = threading.Thread(target=leaving.cleanup)
            cleanup.start()
            self.assertTrue(removing.wait(10))
            claim = threading.Thread(target=starting.make_target, args=(self.src, self.dst))
            claim.start()
            claim.join(0.5)   # done at once, or waiting for the cleanup
            go_on.set()
            cleanup.join(10)
            claim.join(10)
        self.assertTrue(os.path.isdir(self.dst), "the starting pod's mount point was removed")
        starting.cleanup()
        self.assertFalse(os.path.lexists(os.path.dirname(self.dst)),
                         "the last pod leaves the folders the kubelet made")

    def test_a_mount_point_that_another_kubelets_pod_claims_stays_until_that_kubelet_is_gone(self):
        leaving = self.pod("ours")
        leaving.make_target(self.src, self.dst)
        other = subprocess.Popen([sys.executable, "-c", OTHER_KUBELET, self.dst], cwd=HERE,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(other.kill)
        self.assertEqual(other.stdout.readline().strip(), "claimed")
        leaving.cleanup()
        self.assertTrue(os.path.isdir(self.dst), "another cluster's pod lost its mount point")
        # A claim of a process that is gone (a killed test) holds nothing.
        other.stdin.close()
        other.wait(10)
        late = self.pod("late")
        late.make_target(self.src, self.dst)
        late.cleanup()
        self.assertFalse(os.path.lexists(self.dst))


if __name__ == "__main__":
    unittest.main()
