"""A TrainingJob that brings its own program, end to end on the emulated
cluster: the PyTorch example (examples/pytorch/mlp) applied with the real
kubectl, the real operator putting kubeps-agent beside the user's container
as a native sidecar, and the job succeeding; the same program as an elastic
job scaled with `kubectl scale` while it trains, its workers taken in and
let go without a restart; and a program whose model diverges failing the job
with the reason its agent gives.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_user_code   (from tests/k8s)

On the emulator an image is not pulled: the user's container runs its
command as a local process, so the test points the container at this
repository (workingDir, PYTHONPATH) and at /usr/bin/python3, which needs
Debian's python3-torch.
"""
import copy
import json
import os
import subprocess
import sys
import time
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator.cluster import SOURCE_DIR  # noqa: E402
from operator_harness import (DATASET, apply, events_of, get_job, job_pods, live_pod,  # noqa: E402
                              replica_key)
from operator_test_case import SharedClusterTestCase  # noqa: E402

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "pytorch", "mlp")
PYTHON = "/usr/bin/python3"


def torch_missing():
    """Why the test cannot run, or None."""
    try:
        r = subprocess.run([PYTHON, "-c", "import torch"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "%s cannot import torch: %s" % (PYTHON, e)
    if r.returncode != 0:
        return ("torch is missing for %s (sudo apt-get install python3-torch): %s" %
                (PYTHON, r.stderr.decode(errors="replace").strip().splitlines()[-1:]))
    return None


def example_job(steps, manifest="trainingjob.yaml"):
    """examples/pytorch/mlp/`manifest` as the emulator can run it: the
    image's working directory and installed kubeps package are this
    repository's folders; fewer steps."""
    with open(os.path.join(EXAMPLE, manifest)) as f:
        job = yaml.safe_load(f)
    container = job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]
    container["command"] = [PYTHON, "train.py"]
    container["args"] = ["--steps", str(steps), "--log-every", "10"]
    container["workingDir"] = EXAMPLE
    container["env"] = [{"name": "DATA_DIR", "value": DATASET},
                        {"name": "PYTHONPATH", "value": os.path.join(SOURCE_DIR, "python")},
                        {"name": "OMP_NUM_THREADS", "value": "1"}]
    container.pop("resources", None)
    return job


@unittest.skipIf(torch_missing(), torch_missing() or "")
class UserCodeTest(SharedClusterTestCase):
    def diag(self, name):
        parts = ["--- operator log (tail)\n" + self.op.log()[-4000:]]
        try:
            parts.append("--- pods\n" + self.c.kubectl("get", "pods", "-o", "wide").stdout)
            parts.append("--- status\n" + json.dumps(get_job(self.c, name).get("status"),
                                                     indent=1))
            for pod in job_pods(self.c, name):
                if pod["metadata"]["labels"].get("kubeps.io/replica-type") != "worker":
                    continue
                for container in ("trainer", "kubeps-agent"):
                    out = self.c.kubectl("logs", pod["metadata"]["name"], "-c", container,
                                         check=False)
                    parts.append("--- %s/%s\n%s%s" % (pod["metadata"]["name"], container,
                                                      out.stdout[-3000:], out.stderr[-1000:]))
        except Exception as e:   # diagnostics only
            parts.append("(no more diagnostics: %s)" % e)
        return "\n".join(parts)

    def test_pytorch_example_runs_beside_a_native_sidecar_and_succeeds(self):
        c = self.c
        job = example_job(steps=40)
        name = job["metadata"]["name"]
        apply(c, job)
        # Watch the worker pods while the job runs (they may be cleaned up
        # once it ends): the last state of each is what it ended with. The
        # pods are read after the job's phase, so the pass that sees the job
        # end also sees the pods as the operator saw them or later (its cache
        # lags the API server, never leads it).
        workers, phase, deadline = {}, None, time.time() + 420
        while time.time() < deadline:
            phase = get_job(c, name).get("status", {}).get("phase")
            for pod in job_pods(c, name):
                if pod["metadata"]["labels"].get("kubeps.io/replica-type") == "worker":
                    workers[pod["metadata"]["name"]] = copy.deepcopy(pod)
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        self.assertEqual(phase, "Succeeded", self.diag(name))
        self.assertEqual(len(workers), 2, self.diag(name))
        for pod_name, pod in sorted(workers.items()):
            spec, status = pod["spec"], pod["status"]
            # the user's container is the pod's one container, as written
            self.assertEqual([x["name"] for x in spec["containers"]], ["trainer"])
            self.assertEqual(spec["containers"][0]["command"], [PYTHON, "train.py"])
            # the agent is a native sidecar beside it
            agent = spec["initContainers"][-1]
            self.assertEqual((agent["name"], agent["restartPolicy"]), ("kubeps-agent", "Always"))
            self.assertEqual(agent["command"], ["kubeps-agent", "--serve"])
            self.assertEqual(status["phase"], "Succeeded", pod_name + "\n" + self.diag(name))
            trainer = status["containerStatuses"][0]
            self.assertEqual(trainer["state"]["terminated"]["exitCode"], 0)
            self.assertEqual([s["name"] for s in status["initContainerStatuses"]],
                             ["kubeps-agent"])
            self.assertIn("terminated", status["initContainerStatuses"][0]["state"])
            if pod_name in c.kubectl("get", "pods").stdout:
                line = c.kubectl("get", "pod", pod_name).stdout.splitlines()[1].split()
                self.assertEqual(line[1:3], ["0/2", "Completed"])
        rank0 = [n for n in sorted(workers) if "worker-0" in n][0]
        log = c.kubectl("logs", rank0, "-c", "trainer").stdout
        self.assertIn("test accuracy", log)


    def test_the_elastic_example_scaled_with_kubectl_takes_workers_in_and_lets_them_go(self):
        # 2500 steps: some 40 s on 2 cores; both scales are done within the first 600,
        c = self.c
        # and a busy machine slows the job as much as the pods' start.
        job = example_job(steps=2500, manifest="trainingjob-elastic.yaml")
        name = job["metadata"]["name"]
        apply(c, job)

        def trainer_log(pod):
            done = c.kubectl("logs", pod, "-c", "trainer", check=False)
            return done.stdout if done.returncode == 0 else ""

        def workers():
            return sorted(p["metadata"]["name"] for p in job_pods(c, name)
                          if replica_key(p)[0] == "worker")
        c.wait_for(lambda: "step 50/" in trainer_log(name + "-worker-0"), timeout=180,
                   what="worker-0's program training")
        c.kubectl("scale", "trainingjob/" + name, "--replicas=3")
        joiner = c.wait_for(lambda: live_pod(c, name, "worker", 2), timeout=60,
                            what="worker-2's pod")["metadata"]["name"]
        # Taken in at a step past the change, with the servers' parameters.
        c.wait_for(lambda: " loss " in trainer_log(joiner), timeout=120,
                   what="worker-2's program training")
        c.kubectl("scale", "trainingjob/" + name, "--replicas=1")
        c.wait_for(lambda: workers() == [name + "-worker-0"], timeout=120,
                   what="only worker-0's pod left")
        said = c.kubectl("logs", name + "-scheduler-0").stdout
        for rank in (1, 2):
            self.assertIn("worker %d (worker-%d) left the job: it was scaled away" % (rank, rank),
                          said, self.diag(name))
        status = {}
        deadline = time.time() + 300
        while time.time() < deadline and status.get("phase") not in ("Succeeded", "Failed"):
            time.sleep(0.5)
            status = get_job(c, name).get("status", {})
        self.assertEqual(status.get("phase"), "Succeeded", self.diag(name))
        self.assertEqual(status["replicaStatuses"]["worker"]["restarts"], 0, self.diag(name))
        created = sorted(e["message"] for e in events_of(c, name)
                         if e["reason"] == "CreatedPod" and "worker" in e["message"])
        self.assertEqual(created, ["Created pod %s-worker-%d" % (name, r) for r in range(3)],
                         "exactly the pods the changes needed, none restarted")
        self.assertIn("test accuracy", trainer_log(name + "-worker-0"))

    def test_a_diverging_program_fails_the_job_with_the_reason_its_agent_gives(self):
        # SGD at learning rate 1e10 on the servers: the program soon pushes
        # NaN gradients, which the shards refuse; it dies of the exception
        # (exit 1, no reason of its own). Its agent, a native sidecar, writes
        # NonFiniteGradient to its termination message when the kubelet
        # stops it, and the operator fails the job with it, restarting
        # nothing: a rerun would diverge again.
        c = self.c
        job = example_job(steps=200)
        job["metadata"]["name"] = "pytorch-diverge"
        job["spec"]["optimizer"] = {"name": "sgd", "learningRate": 1e10}
        name = job["metadata"]["name"]
        apply(c, job)
        status, deadline = {}, time.time() + 300
        while time.time() < deadline:
            status = get_job(c, name).get("status", {})
            if status.get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(0.5)
        self.assertEqual(status.get("phase"), "Failed", self.diag(name))
        failed = [x for x in status.get("conditions", []) if x["type"] == "Failed"]
        self.assertEqual(len(failed), 1, self.diag(name))
        self.assertEqual(failed[0]["reason"], "NonFiniteGradient", self.diag(name))
        self.assertRegex(failed[0]["message"], r"worker-\d failed and is not restarted .*is not "
                         r"finite \(NaN or Inf\)")
        self.assertEqual(status["replicaStatuses"]["worker"]["restarts"], 0, self.diag(name))

if __name__ == "__main__":
    unittest.main()
