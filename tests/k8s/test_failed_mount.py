"""A TrainingJob whose server mounts a ConfigMap that does not exist, on the
emulated cluster with the real operator and kubectl. The kubelet says why
the pod waits only in FailedMount Events (the pod itself is Pending in
ContainerCreating, as while an image is pulled): the operator finds them,
the job's condition names the volume and the kubelet's message, and under
runPolicy.podStartTimeoutSeconds the job fails (VolumeMountFailed) instead
of staying Created forever. Without a timeout the job waits: a ConfigMap
made later is mounted on the kubelet's next try and the job goes on.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_failed_mount   (from tests/k8s)
"""
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import apply, condition, events_of, get_job  # noqa: E402
from operator_test_case import SharedClusterTestCase  # noqa: E402
from test_pod_start import small_job  # noqa: E402


def with_server_config_map(job, config_map):
    """The servers mount `config_map` (not optional) as volume "settings"."""
    folder = tempfile.mkdtemp(prefix="kubeps-mount-")
    job["spec"]["replicaSpecs"]["ps"]["template"] = {"spec": {
        "volumes": [{"name": "settings", "configMap": {"name": config_map}}],
        "containers": [{"name": "server", "volumeMounts": [
            {"name": "settings", "mountPath": os.path.join(folder, "settings")}]}]}}
    return job, folder


class FailedMountTest(SharedClusterTestCase):
    def wait_message_naming_the_mount(self, name):
        """The job's status message once it says why server-0 waits (the
        workers run: the job may be Running, not only Created)."""
        def says_why():
            message = get_job(self.c, name).get("status", {}).get("message", "")
            return "FailedMount: MountVolume.SetUp failed for volume" in message and message
        try:
            return self.c.wait_for(says_why, timeout=30, what="a status naming the mount")
        except AssertionError as e:
            self.fail("%s\n%s" % (e, self.diag(name)))

    def test_a_config_map_that_does_not_exist_fails_the_job_after_the_timeout(self):
        name = "no-settings"
        job, folder = with_server_config_map(small_job(name, start_timeout=8), "none-such")
        self.addCleanup(shutil.rmtree, folder, True)
        apply(self.c, job)
        message = self.wait_message_naming_the_mount(name)
        self.assertIn("server-0 cannot start (FailedMount: MountVolume.SetUp failed for volume "
                      '"settings" : configmap "none-such" not found)', message)
        job = self.wait_phase(name, "Failed", timeout=60)
        failed = condition(job, "Failed")
        self.assertEqual(failed["reason"], "VolumeMountFailed", failed)
        self.assertIn("could not start within podStartTimeoutSeconds (8 s)", failed["message"])
        self.assertIn('volume "settings" : configmap "none-such" not found', failed["message"])
        # the Event of the failure follows the status write
        reasons = self.c.wait_for(lambda: [e["reason"] for e in events_of(self.c, name)
                                           if e["reason"] == "VolumeMountFailed"] and
                                  [e["reason"] for e in events_of(self.c, name)],
                                  what="the job's events")
        self.assertIn("FailedMount", reasons)
        self.delete_job(name)

    def test_without_a_timeout_the_job_waits_for_the_config_map(self):
        name = "late-settings"
        job, folder = with_server_config_map(small_job(name), "late-settings")
        self.addCleanup(shutil.rmtree, folder, True)
        apply(self.c, job)
        self.wait_message_naming_the_mount(name)
        self.c.kubectl("create", "configmap", "late-settings", "--from-literal=lr=0.001")
        self.addCleanup(self.c.kubectl, "delete", "configmap", "late-settings",
                        "--ignore-not-found")
        self.wait_phase(name, "Succeeded", timeout=120)
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
