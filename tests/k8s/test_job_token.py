"""The job's token on a cluster (issue 16). The operator puts it in a Secret
that every pod mounts with defaultMode 0400; the kubelet gives the files the
pod's fsGroup and group read (0440), which the processes accept, since only
a file others can read is refused. A rotated Secret reaches the running
job: the kubelet rewrites the mounted files (the stand-in a few seconds
after the change, a real kubelet within a minute or two), every process
reads the file again, presents and accepts the previous token for a grace
period, and the job finishes with no pod restarted. Neither token appears
in any log.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_job_token   (from tests/k8s)
"""
import base64
import json
import os
import secrets
import stat
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import apply, job_pods, slowed_down, training_job  # noqa: E402
from operator_test_case import SharedClusterTestCase  # noqa: E402

CHANGED = "the job's token changed"


class JobTokenTest(SharedClusterTestCase):
    def pod_logs(self, pod):
        return self.c.kubectl("logs", pod["metadata"]["name"], "--all-containers=true",
                              check=False).stdout

    def token_of(self, job):
        secret = self.c.kubectl("get", "secret", job + "-token", "-o", "json", json_output=True)
        return base64.b64decode(secret["data"]["token"]).decode()

    def test_a_rotated_secret_reaches_the_running_job_without_a_restart(self):
        c, name = self.c, "rotate"
        # Some 18 s of training at the pace slowed_down sets: time for the
        # kubelet to rewrite the files and every process to read them.
        apply(c, slowed_down(training_job(name, max_steps=500)))
        self.wait_phase(name, "Running", timeout=90)
        worker = lambda: [p for p in job_pods(c, name)  # noqa: E731
                          if p["metadata"]["labels"]["kubeps.io/replica-type"] == "worker"][0]
        c.wait_for(lambda: "steps/sec" in self.pod_logs(worker()), timeout=90,
                   what="the first progress line, under the first token\n" + self.diag(name))
        old = self.token_of(name)
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in job_pods(c, name)}
        self.assertEqual(len(before), 5)

        new = secrets.token_hex(16)
        c.kubectl("patch", "secret", name + "-token", "-p", json.dumps({"stringData": {"token": new}}))
        c.wait_for(lambda: all(CHANGED in self.pod_logs(p) for p in job_pods(c, name)),
                   timeout=60, what="every process reading the new token\n" + self.diag(name))
        job = self.wait_phase(name, "Succeeded", timeout=180)
        self.assertEqual(job["status"].get("replicaRestarts", {}), {}, self.diag(name))
        pods = job_pods(c, name)
        self.assertEqual({p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}, before)
        for pod in pods:
            statuses = (pod["status"].get("containerStatuses", []) +
                        pod["status"].get("initContainerStatuses", []))
            self.assertEqual([s["restartCount"] for s in statuses], [0] * len(statuses),
                             pod["metadata"]["name"])
            text = self.pod_logs(pod)
            self.assertNotIn(old, text, "a log holds the first token")
            self.assertNotIn(new, text, "a log holds the second token")
        self.delete_job(name)

    def test_the_token_file_is_private_to_the_pod(self):
        c, name = self.c, "private"
        apply(c, training_job(name, max_steps=20))
        self.wait_phase(name, "Succeeded", timeout=120)
        volume = job_pods(c, name)[0]["spec"]["volumes"]
        secret = [v for v in volume if "secret" in v][0]["secret"]
        self.assertEqual(secret["defaultMode"], 0o400)
        # The file the stand-in's kubelet wrote for a pod of this job: group
        # read added for the fsGroup, nothing for others.
        pod = job_pods(c, name)[0]
        uid = pod["metadata"]["uid"]
        found = []
        for root, _dirs, files in os.walk(c.dir):
            if uid in root and root.endswith(os.path.join("volumes", "kubeps-token")):
                found.append(os.path.join(root, "token"))
        self.assertTrue(found, "no token volume of pod %s under %s" % (uid, c.dir))
        self.assertTrue(os.path.islink(found[0]), "a link into ..data, as the kubelet writes it")
        st = os.stat(found[0])
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o440)
        self.assertEqual(st.st_gid, pod["spec"]["securityContext"]["fsGroup"])
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
