"""Mutual TLS with cert-manager issuing the certificates: on a cluster that
serves cert-manager.io/v1, the operator (--tls, --tls-issuer=auto, the Helm
chart's defaults) gives a TLS job an Issuer pair and a Certificate per
replica instead of its own CA, makes no pod before cert-manager has written
every Secret (the job says what it waits for), adds the job as an owner of
each Secret so that they go with it, and a certificate renewed while the job
runs changes nothing the job does.

cert-manager cannot run here; tests/k8s/cert_manager/ plays its controller
and tests/k8s/crds/ holds its CRDs (a subset of its published schema).

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_cert_manager   (from tests/k8s)
"""
import base64
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cert_manager import CertManager  # noqa: E402
from operator_harness import (Operator, apply, checkpoints_on_host, condition,  # noqa: E402
                              events_of, get_job, job_pods, phase_of, replace_pod,
                              slowed_down, training_job)
from own_cluster import OwnClusterTestCase  # noqa: E402

CRDS = [os.path.join(HERE, "crds", "cert-manager.io_%s.yaml" % kind)
        for kind in ("certificates", "issuers")]
SECRETS = "/api/v1/namespaces/default/secrets/"
CERTIFICATES = "/apis/cert-manager.io/v1/namespaces/default/certificates"
ISSUERS = "/apis/cert-manager.io/v1/namespaces/default/issuers"


def uris_of(pem):
    """The URI SANs of a PEM certificate, read with the openssl CLI."""
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as f:
        f.write(pem)
        f.flush()
        text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", f.name],
                              capture_output=True, text=True, check=True).stdout
    return [part.strip()[4:] for part in text.replace("\n", ",").split(",")
            if part.strip().startswith("URI:")]


class CertManagerTest(OwnClusterTestCase):
    start_operator = False

    def prepare_cluster(self):
        self.c.kubectl("apply", *[arg for crd in CRDS for arg in ("-f", crd)])
        self.cert_manager = None

    def tearDown(self):
        if self.cert_manager is not None:
            self.cert_manager.stop()
        super().tearDown()

    def names(self, path):
        return sorted(o["metadata"]["name"] for o in self.c.client.get(path)["items"])

    def secret(self, name):
        return self.c.client.get(SECRETS + name)

    def test_a_tls_job_runs_on_certificates_cert_manager_issued_and_they_go_with_it(self):
        c = self.c
        self.op = Operator(c, "--tls")
        # Trains while renewed: some 15 s slowed down.
        job = slowed_down(training_job("issued", epochs=3, max_steps=400))
        apply(c, job)
        replicas = ["issued-scheduler-0", "issued-server-0", "issued-server-1",
                    "issued-worker-0", "issued-worker-1"]
        certificates = sorted(["issued-tls-cm-ca"] + [r + "-tls" for r in replicas])

        # No cert-manager running yet: the job waits, saying so, with no pod.
        waiting = c.wait_for(
            lambda: (condition(get_job(c, "issued"), "Created") or {}).get("reason") ==
            "WaitingForCertificates" and get_job(c, "issued"), timeout=30,
            what="the job waiting for its certificates")
        self.assertIn("waiting for cert-manager to issue the job's certificates (issued-tls-cm-ca: "
                      "no status yet: is cert-manager's controller running?",
                      waiting["status"]["message"])
        self.assertEqual(self.names(CERTIFICATES), certificates)
        self.assertEqual(self.names(ISSUERS), ["issued-tls-ca", "issued-tls-selfsigned"])
        self.assertEqual(job_pods(c, "issued"), [])

        self.cert_manager = CertManager(c).start()
        self.wait_phase("issued", "Running", timeout=90)
        uid = get_job(c, "issued")["metadata"]["uid"]
        ca = base64.b64decode(self.secret("issued-tls-cm-ca")["data"]["tls.crt"]).decode()
        for name in certificates:
            secret = self.secret(name)
            self.assertEqual(secret["metadata"]["annotations"]["cert-manager.io/certificate-name"],
                             name)
            self.assertIn(uid, [r["uid"] for r in secret["metadata"].get("ownerReferences", [])])
        for replica in replicas:
            data = self.secret(replica + "-tls")["data"]
            self.assertEqual(base64.b64decode(data["ca.crt"]).decode(), ca)
            role, index = replica.split("-")[1:]
            self.assertEqual(uris_of(base64.b64decode(data["tls.crt"]).decode()),
                             ["spiffe://kubeps.io/ns/default/job/issued/%s/%s" % (role, index)])

        # cmctl renew of a worker's certificate while the job trains: a new
        # key in its Secret, which the kubelet writes into the running pod;
        # nothing restarts.
        before = self.secret("issued-worker-0-tls")["data"]["tls.key"]
        self.cert_manager.renew("default", "issued-worker-0-tls")
        c.wait_for(lambda: self.secret("issued-worker-0-tls")["data"]["tls.key"] != before,
                   timeout=30, what="worker-0's certificate renewed")
        done = self.wait_phase("issued", "Succeeded", timeout=180)
        self.assertEqual(done["status"].get("replicaRestarts", {}), {}, done["status"])
        reasons = {e["reason"] for e in events_of(c, "issued")}
        self.assertNotIn("FailedMount", reasons)

        # Deleted, the job takes its Issuers, Certificates and Secrets with it
        # (cert-manager alone would leave the Secrets behind).
        c.kubectl("delete", "trainingjob", "issued")
        c.wait_for(lambda: not self.names(CERTIFICATES) and not self.names(ISSUERS) and not [
            n for n in self.names(SECRETS.rstrip("/")) if n.startswith("issued-")],
            timeout=60, what="the job's certificates and Secrets collected")

    def leaves_signed_by_the_ca(self, job, uid):
        """Whether every replica Secret of `job` is the job's (uid) and signed
        by the CA its CA Secret holds now."""
        ca = base64.b64decode(self.secret(job + "-tls-cm-ca")["data"]["tls.crt"]).decode()
        for name in self.names(SECRETS.rstrip("/")):
            if not name.startswith(job + "-") or not name.endswith("-tls"):
                continue
            secret = self.secret(name)
            if uid not in [r["uid"] for r in secret["metadata"].get("ownerReferences", [])]:
                return False
            if base64.b64decode(secret["data"]["ca.crt"]).decode() != ca:
                return False
        return True

    def test_sigterm_of_the_scheduler_then_a_server_and_a_second_run_keep_one_ca(self):
        # What a real cluster does to a job: its scheduler's pod, then a
        # server's, deleted mid-job (SIGTERM: an eviction, a drain); then the
        # job deleted and applied again at once over its checkpoints, while
        # the garbage collector still holds the first one's Secrets.
        c = self.c
        self.op = Operator(c, "--tls")
        self.cert_manager = CertManager(c).start()
        # Some 30 s slowed down, the redone steps not counted: time for both pods to be replaced.
        job = slowed_down(training_job("twice", epochs=20, max_steps=800,
                                       restart_policy="OnFailure", backoff_limit=3))
        checkpoints_on_host(self, job)
        apply(c, job)
        self.wait_phase("twice", "Running", timeout=90)
        c.wait_for(lambda: "step " in c.kubectl("logs", "twice-worker-0", check=False).stdout,
                   timeout=60, what="worker-0 training")
        for role in ("scheduler", "server"):
            old, new = replace_pod(c, "twice", role)
            self.assertIsNotNone(new, self.diag("twice"))
            self.assertIn(get_job(c, "twice")["status"]["phase"], ("Running", "Restarting"),
                          "the %s was stopped after the job had ended" % role)
        first = self.wait_phase("twice", "Succeeded", timeout=240)
        self.assertIn("rolled back to the checkpoint of step",
                      c.kubectl("logs", new["metadata"]["name"]).stdout)
        self.assertNotIn("FailedMount", {e["reason"] for e in events_of(c, "twice")})
        # The replacements mounted the certificates the first pods had.
        self.assertEqual([i[2:] for i in self.cert_manager.issuances(namespace="default")
                          if i[2].startswith("twice-") and i[3] > 1], [])

        # Applied again as soon as the first is gone, not its dependents.
        c.kubectl("delete", "trainingjob", "twice", "--wait=false")
        c.wait_for(lambda: phase_of(c, "twice") is None and "gone", timeout=30,
                   what="the first job deleted")
        apply(c, job)
        uid = get_job(c, "twice")["metadata"]["uid"]
        self.assertNotEqual(uid, first["metadata"]["uid"])
        done = self.wait_phase("twice", "Succeeded", timeout=240)
        self.assertEqual(done["metadata"]["uid"], uid)
        self.assertTrue(self.leaves_signed_by_the_ca("twice", uid),
                        "a replica of the second job holds a certificate of another CA or job")


if __name__ == "__main__":
    unittest.main()
