"""The scheduler's and a server's pods stopped mid-job as a real cluster
stops them: `kubectl delete pod` (what an eviction, a node drain or a
rollout does) sends SIGTERM and gives the pod its grace period. The
replacement pod comes back with a new IP, as on a real cluster, and the
nodes find it again through the scheduler's Service name.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_role_restarts   (from tests/k8s)
"""
import copy
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (apply, checkpoints_on_host, condition, job_pods,  # noqa: E402
                              live_pod, phase_of, replace_pod, replica_key, slowed_down,
                              training_job)
from operator_test_case import SharedClusterTestCase  # noqa: E402

# Long enough (10 to 30 s) that the stop lands mid-job on a loaded machine, short enough
# for the suite: the workers stop at this step.
MAX_STEPS = 3000
# What a worker logs when it lost touch with the job's membership (the
# scheduler's restart must cost no such line).
TROUBLE = ("could not tell the scheduler", "not the registered worker", "rpc Finish",
           "backoffLimit")


class RoleRestartTest(SharedClusterTestCase):
    def live_pod(self, job, role, index=0):
        return live_pod(self.c, job, role, index)

    def stop_mid_job(self, job, role):
        """Deletes the live pod of `role` 0 once the workers train; returns
        it and the live pod that replaced it."""
        self.wait_phase(job, "Running", timeout=90)
        self.wait_running_pid(job, "worker-0")

        def worker_0_trains():
            logs = self.c.kubectl("logs", job + "-worker-0", check=False)
            if "NotFound" in logs.stderr:
                self.fail("worker-0's first pod is gone before any pod was deleted\n" +
                          self.diag(job))
            return "step " in logs.stdout
        self.c.wait_for(worker_0_trains, timeout=60, what="worker-0 training")
        old, new = replace_pod(self.c, job, role)
        self.assertIsNotNone(old, self.diag(job))
        self.assertIsNotNone(new, "no new %s pod of %s\n%s" % (role, job, self.diag(job)))
        return old, new

    def assert_no_trouble_in_worker_logs(self, job):
        for pod in job_pods(self.c, job):
            if replica_key(pod)[0] != "worker":
                continue
            log = self.c.kubectl("logs", pod["metadata"]["name"]).stdout
            for line in log.splitlines():
                self.assertFalse(any(t in line for t in TROUBLE),
                                 "%s logged: %s" % (pod["metadata"]["name"], line))

    def test_a_deleted_scheduler_comes_back_with_a_new_ip_and_the_job_goes_on(self):
        name = "schedgone"
        apply(self.c, training_job(name, epochs=20, max_steps=MAX_STEPS, restart_policy="OnFailure",
                                   backoff_limit=3))
        old, new = self.stop_mid_job(name, "scheduler")
        self.assertNotEqual(old["status"]["podIP"], new["status"]["podIP"])
        job = self.wait_phase(name, "Succeeded", timeout=240)
        st = job["status"]
        for role in ("ps", "worker"):
            self.assertEqual(st["replicaStatuses"][role].get("restarts", 0), 0, st)
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.assert_no_trouble_in_worker_logs(name)
        self.delete_job(name)

    def test_a_deleted_server_is_recovered_from_its_checkpoint(self):
        name = "servergone"
        job = training_job(name, epochs=20, max_steps=MAX_STEPS, restart_policy="OnFailure",
                           backoff_limit=3)
        checkpoints_on_host(self, job)
        apply(self.c, job)
        old, new = self.stop_mid_job(name, "server")
        self.assertNotEqual(old["status"]["podIP"], new["status"]["podIP"])
        st = self.wait_phase(name, "Succeeded", timeout=240)["status"]
        self.assertEqual(st["replicaStatuses"]["worker"].get("restarts", 0), 0, self.diag(name))
        self.assertEqual(st["replicaStatuses"]["worker"]["succeeded"], 2, st)
        self.assertIn("rolled back to the checkpoint of step", self.c.kubectl("logs", new["metadata"]["name"]).stdout)
        self.delete_job(name)

    def test_a_server_lost_without_checkpoints_fails_the_job_at_once_saying_why(self):
        # Before: each server's restart failed alike ("cannot roll back: this
        # shard keeps no checkpoints") until the backoffLimit was spent, and
        # the job failed blaming "server-0 exited with code 1".
        name = "nockpt"
        apply(self.c, training_job(name, epochs=20, max_steps=MAX_STEPS,
                                   restart_policy="OnFailure", backoff_limit=3))
        self.stop_mid_job(name, "server")
        job = self.wait_phase(name, "Failed", timeout=120)
        failed = condition(job, "Failed")
        self.assertEqual(failed["reason"], "ShardStateLost", job["status"])
        self.assertIn("spec.checkpoint.path is empty", failed["message"])
        self.delete_job(name)

    def test_a_second_job_over_the_same_checkpoints_fails_naming_the_job_that_holds_them(self):
        # Before: the second job resumed from the first one's newest
        # checkpoint, rolled the shared folders back and deleted the first
        # job's newer checkpoints, both jobs writing into the same files.
        first = training_job("ckptfirst", epochs=20, max_steps=MAX_STEPS,
                             restart_policy="OnFailure", backoff_limit=3)
        folder = checkpoints_on_host(self, first)
        apply(self.c, slowed_down(first))  # still training when the second job gives up
        self.wait_phase("ckptfirst", "Running", timeout=90)
        self.c.wait_for(lambda: "step " in self.c.kubectl("logs", "ckptfirst-worker-0",
                                                          check=False).stdout,
                        timeout=60, what="ckptfirst training")
        second = training_job("ckptsecond", epochs=20, max_steps=MAX_STEPS,
                              restart_policy="OnFailure", backoff_limit=3)
        second["spec"]["checkpoint"] = first["spec"]["checkpoint"]
        second["spec"]["replicaSpecs"]["ps"]["template"] = copy.deepcopy(
            first["spec"]["replicaSpecs"]["ps"]["template"])
        # The first job's server is given the pods' grace period and 10 s to stop.
        second["spec"]["replicaSpecs"]["ps"]["template"]["spec"][
            "terminationGracePeriodSeconds"] = 1
        apply(self.c, second)
        job = self.wait_phase("ckptsecond", "Failed", timeout=120)
        failed = condition(job, "Failed")
        self.assertEqual(failed["reason"], "CheckpointFolderInUse", job["status"])
        self.assertRegex(failed["message"], r"checkpoint folder %s/server-\d is in use by "
                         r"server-\d of job default/ckptfirst \(run [-0-9a-f]+\) on ckptfirst-server-\d "
                         r"\(node kubeps-node\), pid \d+" %
                         folder)
        self.assertEqual(job["status"]["replicaStatuses"]["ps"].get("restarts", 0), 0,
                         job["status"])
        self.assertEqual(phase_of(self.c, "ckptfirst"), "Running", self.diag("ckptfirst"))
        self.delete_job("ckptsecond")
        self.delete_job("ckptfirst")


if __name__ == "__main__":
    unittest.main()
