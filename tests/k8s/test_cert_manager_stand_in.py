"""The stand-in of cert-manager (tests/k8s/cert_manager/) on a stand-in cluster, no
operator: cert-manager's Certificate and Issuer CRDs (tests/k8s/crds/)
installed with the real kubectl, then what the operator's cert-manager
support will lean on: the selfSigned -> CA Certificate -> CA Issuer -> leaf
chain and its Secrets (the leaf verifies against ca.crt, with its URI and
DNS SANs), Ready conditions, a leaf that waits for its CA's Secret, Secrets
without owner references that keep what others add across renewals, a
deleted Secret issued again, `cmctl renew`, a deleted Certificate leaving
its Secret behind.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_cert_manager_stand_in   (from tests/k8s)
"""
import base64
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cert_manager import API, CertManager, condition, parse_time  # noqa: E402
from emulator import realism  # noqa: E402
from emulator.client import ApiError  # noqa: E402
from emulator.cluster import Cluster  # noqa: E402

CRDS = [os.path.join(HERE, "crds", "cert-manager.io_certificates.yaml"),
        os.path.join(HERE, "crds", "cert-manager.io_issuers.yaml")]
DEFAULT_LIFETIME = 2160 * 3600


def openssl(*args, check=True):
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=check)


# A selfSigned Issuer, the first document of a chain.
SELF_SIGNED = """
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned}
spec: {selfSigned: {}}
---"""


class CertManagerStandInTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(kubelet=False, rbac=True, realism=realism.wanted()).start()
        try:
            out = cls.c.kubectl("apply", "-f", CRDS[0], "-f", CRDS[1]).stdout
            assert "certificates.cert-manager.io created" in out, out
            cls.c.kubectl("wait", "--for=condition=Established",
                          "crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io")
            cls.cm = CertManager(cls.c, issue_delay=0.3).start()
        except Exception:
            cls.c.stop()
            raise
        cls.tmp = tempfile.TemporaryDirectory(prefix="cert-manager-test-")

    @classmethod
    def tearDownClass(cls):
        cls.cm.stop()
        cls.c.stop()
        cls.tmp.cleanup()

    def tearDown(self):
        self.assertEqual(self.cm.errors, [], "the stand-in's sync passes failed")

    # -- helpers

    def namespace(self, name):
        self.c.client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": name}})
        return name

    def apply(self, ns, manifest):
        return self.c.kubectl("apply", "-n", ns, "-f", "-", input=manifest).stdout

    def get(self, ns, plural, name):
        base = API if plural in ("certificates", "issuers") else "/api/v1"
        return self.c.client.get("%s/namespaces/%s/%s/%s" % (base, ns, plural, name))

    def secret_or_none(self, ns, name):
        try:
            return self.get(ns, "secrets", name)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def files(self, secret):
        """The Secret's data as files: {key: path}."""
        out = {}
        for key, value in secret["data"].items():
            path = os.path.join(self.tmp.name, "%s-%s-%s" % (
                secret["metadata"]["namespace"], secret["metadata"]["name"], key))
            with open(path, "wb") as f:
                f.write(base64.b64decode(value))
            out[key] = path
        return out

    def x509(self, path):
        return openssl("x509", "-in", path, "-noout", "-text", "-serial").stdout

    def serial_and_key(self, secret):
        paths = self.files(secret)
        serial = openssl("x509", "-in", paths["tls.crt"], "-noout", "-serial").stdout.strip()
        return serial, base64.b64decode(secret["data"]["tls.key"])

    def wait_condition(self, ns, plural, name, ctype, status, timeout=15):
        return self.c.wait_for(
            lambda: (lambda o: (condition(o, ctype) or {}).get("status") == status and o)(
                self.get(ns, plural, name)),
            timeout=timeout, what="%s %s/%s %s=%s\n%s" % (plural, ns, name, ctype, status,
                                                           self.cm.log()[-2000:]))

    def events(self, ns, name):
        items = self.c.client.get("/api/v1/namespaces/%s/events" % ns)["items"]
        return [e for e in items if e["involvedObject"].get("kind") == "Certificate" and
                e["involvedObject"]["name"] == name]

    def chain(self, ns, ca_secret="ca-key-pair"):
        """selfSigned Issuer -> CA Certificate -> CA Issuer."""
        return self.apply(ns, SELF_SIGNED + """
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: kubeps-ca}
spec:
  isCA: true
  commonName: kubeps-ca
  secretName: %s
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: kubeps-ca}
spec:
  ca: {secretName: %s}
""" % (ca_secret, ca_secret))

    def leaf(self, ns, name, job="mnist", role="worker", index=0, issuer="kubeps-ca", extra=""):
        host = "%s-%s-%d" % (job, role, index)
        return self.apply(ns, """
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: %s}
spec:
  secretName: %s-tls
  issuerRef: {name: %s, kind: Issuer, group: cert-manager.io}
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
  uris: [spiffe://kubeps.io/ns/%s/job/%s/%s/%d]
  dnsNames: [%s.%s.%s.svc, %s.%s]
  usages: [server auth, client auth]
%s""" % (name, name, issuer, ns, job, role, index, host, job, ns, host, job, extra))

    # -- the tests

    def test_crds_install_and_print(self):
        ns = self.namespace("cm-crds")
        listed = self.c.kubectl("get", "certificates", "-n", ns)
        self.assertEqual(listed.stdout, "")
        self.assertIn("No resources found", listed.stderr)
        resources = self.c.kubectl("api-resources", "--api-group=cert-manager.io").stdout
        self.assertRegex(resources, r"certificates\s+cert,certs\s+cert-manager.io/v1\s+true\s+"
                                    r"Certificate")
        self.assertRegex(resources, r"issuers\s+cert-manager.io/v1\s+true\s+Issuer")
        # the schema: what a real API server answers to a Certificate without
        # secretName and with a usage cert-manager does not know
        bad = self.c.kubectl("apply", "-n", ns, "-f", "-", check=False, input="""
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: bad}
spec:
  issuerRef: {name: x}
  usages: [serverAuth]
""")
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("spec.secretName: Required value", bad.stderr)
        self.assertIn('spec.usages[0]: Unsupported value: "serverAuth"', bad.stderr)
        bad = self.c.kubectl("apply", "-n", ns, "-f", "-", check=False, input="""
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: bad}
spec: {ca: {}}
""")
        self.assertIn("spec.ca.secretName: Required value", bad.stderr)

    def test_self_signed_ca_chain_issues_a_leaf_that_verifies(self):
        ns = self.namespace("cm-chain")
        self.chain(ns)
        self.leaf(ns, "mnist-worker-0")
        crt = self.cm.wait_issued(ns, "mnist-worker-0", 1)

        # the issuers
        ready = condition(self.wait_condition(ns, "issuers", "selfsigned", "Ready", "True"),
                          "Ready")
        self.assertEqual((ready["reason"], ready["message"]), ("IsReady", ""))
        ready = condition(self.get(ns, "issuers", "kubeps-ca"), "Ready")
        self.assertEqual((ready["status"], ready["reason"], ready["message"]),
                         ("True", "KeyPairVerified", "Signing CA verified"))

        # the certificates' status
        for name in ("kubeps-ca", "mnist-worker-0"):
            crt = self.get(ns, "certificates", name)
            st = crt["status"]
            self.assertEqual(condition(crt, "Ready")["reason"], "Ready", st)
            self.assertEqual(condition(crt, "Ready")["message"],
                             "Certificate is up to date and has not expired")
            self.assertIsNone(condition(crt, "Issuing"), st)
            self.assertEqual(st["revision"], 1)
            self.assertNotIn("nextPrivateKeySecretName", st)
            not_before, not_after = parse_time(st["notBefore"]), parse_time(st["notAfter"])
            self.assertEqual(not_after - not_before, DEFAULT_LIFETIME)
            self.assertEqual(not_after - parse_time(st["renewalTime"]), DEFAULT_LIFETIME / 3)

        # the Secrets
        ca = self.get(ns, "secrets", "ca-key-pair")
        leaf = self.get(ns, "secrets", "mnist-worker-0-tls")
        for secret in (ca, leaf):
            self.assertEqual(secret["type"], "kubernetes.io/tls")
            self.assertEqual(sorted(secret["data"]), ["ca.crt", "tls.crt", "tls.key"])
            self.assertNotIn("ownerReferences", secret["metadata"])
            self.assertEqual(secret["metadata"]["labels"],
                             {"controller.cert-manager.io/fao": "true"})
        self.assertEqual(ca["data"]["ca.crt"], ca["data"]["tls.crt"], "self-signed: itself")
        self.assertEqual(leaf["data"]["ca.crt"], ca["data"]["tls.crt"], "the CA's certificate")
        uri = "spiffe://kubeps.io/ns/%s/job/mnist/worker/0" % ns
        dns = ["mnist-worker-0.mnist.%s.svc" % ns, "mnist-worker-0.mnist"]
        self.assertEqual(leaf["metadata"]["annotations"], {
            "cert-manager.io/certificate-name": "mnist-worker-0",
            "cert-manager.io/issuer-name": "kubeps-ca",
            "cert-manager.io/issuer-kind": "Issuer",
            "cert-manager.io/issuer-group": "cert-manager.io",
            "cert-manager.io/common-name": "",
            "cert-manager.io/alt-names": ",".join(dns),
            "cert-manager.io/ip-sans": "",
            "cert-manager.io/uri-sans": uri})
        self.assertEqual(ca["metadata"]["annotations"]["cert-manager.io/common-name"],
                         "kubeps-ca")

        # the X.509: the leaf verifies against ca.crt for both TLS ends
        paths = self.files(leaf)
        for purpose in ("sslserver", "sslclient"):
            ok = openssl("verify", "-purpose", purpose, "-CAfile", paths["ca.crt"],
                         paths["tls.crt"], check=False)
            self.assertEqual(ok.stdout.strip(), paths["tls.crt"] + ": OK", ok.stderr)
        text = self.x509(paths["tls.crt"])
        self.assertIn("URI:" + uri, text)
        for name in dns:
            self.assertIn("DNS:" + name, text)
        self.assertIn("TLS Web Server Authentication, TLS Web Client Authentication", text)
        self.assertRegex(text, r"Basic Constraints: critical\s+CA:FALSE")
        self.assertIn("ASN1 OID: prime256v1", text)
        self.assertIn("Signature Algorithm: ecdsa-with-SHA256", text)
        self.assertIn("Issuer: CN = kubeps-ca", text)
        self.assertRegex(text, r"Subject Alternative Name: critical", "empty subject")
        key = base64.b64decode(leaf["data"]["tls.key"])
        self.assertTrue(key.startswith(b"-----BEGIN EC PRIVATE KEY-----"), "PKCS1 by default")
        self.assertEqual(openssl("pkey", "-in", paths["tls.key"], "-pubout").stdout,
                         openssl("x509", "-in", paths["tls.crt"], "-noout", "-pubkey").stdout)
        ca_text = self.x509(self.files(ca)["tls.crt"])
        self.assertRegex(ca_text, r"Basic Constraints: critical\s+CA:TRUE")
        self.assertRegex(ca_text, r"Key Usage: critical\s+Digital Signature, Key Encipherment, "
                                  r"Certificate Sign")

        # what kubectl shows
        lines = self.c.kubectl("get", "certificates", "-n", ns).stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "READY", "SECRET", "AGE"])
        rows = {line.split()[0]: line.split()[1:3] for line in lines[1:]}
        self.assertEqual(rows, {"kubeps-ca": ["True", "ca-key-pair"],
                                "mnist-worker-0": ["True", "mnist-worker-0-tls"]})
        lines = self.c.kubectl("get", "issuers", "-n", ns, "-o", "wide").stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "READY", "STATUS", "AGE"])
        self.assertEqual(sorted(line.split()[1] for line in lines[1:]), ["True", "True"])
        reasons = [(e["reason"], e["source"]["component"]) for e in sorted(
            self.events(ns, "mnist-worker-0"), key=lambda e: e["metadata"]["name"])]
        self.assertEqual(reasons, [("Issuing", "cert-manager-certificates-trigger"),
                                   ("Generated", "cert-manager-certificates-key-manager"),
                                   ("Requested", "cert-manager-certificates-request-manager"),
                                   ("Issuing", "cert-manager-certificates-issuing")])
        left = self.c.client.get("/api/v1/namespaces/%s/secrets?labelSelector=cert-manager.io"
                                 "/next-private-key%%3Dtrue" % ns)["items"]
        self.assertEqual(left, [], "the temporary private key Secrets are deleted")

    def test_a_leaf_waits_for_its_ca_secret(self):
        ns = self.namespace("cm-wait")
        self.apply(ns, """
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: kubeps-ca}
spec:
  ca: {secretName: late-ca}
""")
        self.leaf(ns, "waiting")
        issuer = self.wait_condition(ns, "issuers", "kubeps-ca", "Ready", "False")
        ready = condition(issuer, "Ready")
        self.assertEqual((ready["reason"], ready["message"]), (
            "ErrGetKeyPair", 'Error getting keypair for CA issuer: secrets "late-ca" not found'))
        crt = self.wait_condition(ns, "certificates", "waiting", "Issuing", "True")
        self.assertEqual(condition(crt, "Issuing")["reason"], "DoesNotExist")
        time.sleep(4 * self.cm.issue_delay)   # past the delay: it still waits
        crt = self.get(ns, "certificates", "waiting")
        ready = condition(crt, "Ready")
        self.assertEqual((ready["status"], ready["reason"], ready["message"]), (
            "False", "DoesNotExist", "Issuing certificate as Secret does not exist"))
        self.assertEqual(condition(crt, "Issuing")["status"], "True")
        self.assertNotIn("revision", crt["status"])
        self.assertIsNone(self.secret_or_none(ns, "waiting-tls"))
        self.assertEqual(self.cm.pending(ns, "waiting"), {
            "reason": "IssuerNotReady",
            "message": "Referenced issuer does not have a Ready status condition"})
        temp = self.get(ns, "secrets", crt["status"]["nextPrivateKeySecretName"])
        self.assertEqual(temp["metadata"]["labels"]["cert-manager.io/next-private-key"], "true")
        self.assertEqual(temp["metadata"]["ownerReferences"][0]["kind"], "Certificate")
        self.assertEqual(self.cm.issuances(ns), [])

        # the CA's Secret comes: the issuer gets ready, the leaf is issued
        self.chain(ns, ca_secret="late-ca")
        self.cm.wait_issued(ns, "waiting", 1)
        order = [name for _, _, name, _ in self.cm.issuances(ns)]
        self.assertEqual(order, ["kubeps-ca", "waiting"])
        self.wait_condition(ns, "certificates", "waiting", "Ready", "True")
        self.assertEqual(condition(self.get(ns, "issuers", "kubeps-ca"), "Ready")["reason"],
                         "KeyPairVerified")
        paths = self.files(self.get(ns, "secrets", "waiting-tls"))
        ok = openssl("verify", "-CAfile", paths["ca.crt"], paths["tls.crt"], check=False)
        self.assertIn(": OK", ok.stdout, ok.stderr)
        self.c.wait_for(lambda: self.secret_or_none(ns, temp["metadata"]["name"]) is None,
                        timeout=5, what="the temporary key Secret deleted")

    def test_the_secret_across_renewals_and_deletions(self):
        ns = self.namespace("cm-life")
        self.chain(ns)
        # short-lived: renewed a third of its lifetime before its end. 10 s,
        # not less: the edit below must come before the first renewal, and the
        # checks after it before the second, on a loaded machine too.
        self.leaf(ns, "short", extra="  duration: 10s\n")
        self.cm.wait_issued(ns, "short", 1)
        secret = self.get(ns, "secrets", "short-tls")
        serial1, key1 = self.serial_and_key(secret)

        # what the operator adds to the Secret: kept by cert-manager
        owner = self.c.client.post("/api/v1/namespaces/%s/configmaps" % ns, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}})
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
               "uid": owner["metadata"]["uid"]}
        secret["metadata"]["ownerReferences"] = [ref]
        secret["metadata"]["labels"]["kubeps.io/job-name"] = "mnist"
        secret["metadata"]["annotations"]["kubeps.io/note"] = "kept"
        secret["data"]["extra"] = base64.b64encode(b"kept").decode()
        self.c.client.put("/api/v1/namespaces/%s/secrets/short-tls" % ns, secret)

        crt = self.cm.wait_issued(ns, "short", 2, timeout=20)
        renewing = [e for e in self.events(ns, "short") if e["reason"] == "Issuing" and
                    e["message"].startswith("Renewing certificate as renewal was scheduled at")]
        self.assertEqual(len(renewing), 1, [e["message"] for e in self.events(ns, "short")])
        secret = self.get(ns, "secrets", "short-tls")
        serial2, key2 = self.serial_and_key(secret)
        self.assertNotEqual(serial2, serial1)
        self.assertNotEqual(key2, key1, "rotationPolicy Always: a new key")
        self.assertEqual(secret["metadata"]["ownerReferences"], [ref])
        self.assertEqual(secret["metadata"]["labels"]["kubeps.io/job-name"], "mnist")
        self.assertEqual(secret["metadata"]["annotations"]["kubeps.io/note"], "kept")
        self.assertEqual(base64.b64decode(secret["data"]["extra"]), b"kept")

        # a spec change is a new request: back to the default lifetime
        self.c.client.patch("%s/namespaces/%s/certificates/short" % (API, ns),
                            {"spec": {"duration": None}})
        crt = self.cm.wait_issued(ns, "short", 3)
        self.assertEqual(parse_time(crt["status"]["notAfter"]) -
                         parse_time(crt["status"]["notBefore"]), DEFAULT_LIFETIME)
        self.assertIn("Fields on existing CertificateRequest resource not up to date: "
                      "[spec.duration]", [e["message"] for e in self.events(ns, "short")])

        # cmctl renew: a new certificate, a new key, the additions kept
        self.assertEqual(self.cm.renew(ns, "short"),
                         "Manually triggered issuance of Certificate %s/short" % ns)
        crt = self.cm.wait_issued(ns, "short", 4)
        self.assertIsNone(condition(crt, "Issuing"))
        secret = self.get(ns, "secrets", "short-tls")
        serial4, key4 = self.serial_and_key(secret)
        self.assertNotIn(serial4, (serial1, serial2))
        self.assertNotEqual(key4, key2)
        self.assertEqual(secret["metadata"]["ownerReferences"], [ref])
        self.assertEqual(secret["metadata"]["labels"]["kubeps.io/job-name"], "mnist")

        # a deleted Secret is issued again
        self.c.client.delete("/api/v1/namespaces/%s/secrets/short-tls" % ns)
        crt = self.cm.wait_issued(ns, "short", 5)
        self.assertEqual(condition(crt, "Ready")["status"], "True")
        again = self.get(ns, "secrets", "short-tls")
        self.assertNotEqual(again["metadata"]["uid"], secret["metadata"]["uid"])
        self.assertNotIn("ownerReferences", again["metadata"])
        self.assertNotEqual(self.serial_and_key(again)[0], serial4)

        # a deleted Certificate leaves its Secret behind, untouched
        self.c.kubectl("delete", "certificate", "short", "-n", ns)
        time.sleep(1.0)
        left = self.get(ns, "secrets", "short-tls")
        self.assertEqual(left["metadata"]["resourceVersion"], again["metadata"]["resourceVersion"])
        self.assertEqual(len(self.cm.issuances(ns, "short")), 5)

    def test_rotation_policy_never_keeps_the_key(self):
        ns = self.namespace("cm-never")
        self.apply(ns, SELF_SIGNED + """
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: rsa}
spec:
  secretName: rsa-tls
  commonName: rsa.example
  privateKey: {rotationPolicy: Never}
  issuerRef: {name: selfsigned}
""")
        self.cm.wait_issued(ns, "rsa", 1)
        serial1, key1 = self.serial_and_key(self.get(ns, "secrets", "rsa-tls"))
        self.assertTrue(key1.startswith(b"-----BEGIN RSA PRIVATE KEY-----"), "RSA by default")
        text = self.x509(self.files(self.get(ns, "secrets", "rsa-tls"))["tls.crt"])
        self.assertIn("Public-Key: (2048 bit)", text)
        self.assertRegex(text, r"Key Usage: critical\s+Digital Signature, Key Encipherment")
        self.cm.renew(ns, "rsa")
        self.cm.wait_issued(ns, "rsa", 2)
        serial2, key2 = self.serial_and_key(self.get(ns, "secrets", "rsa-tls"))
        self.assertNotEqual(serial2, serial1)
        self.assertEqual(key2, key1)
        self.assertIn("Reused", [e["reason"] for e in self.events(ns, "rsa")])


if __name__ == "__main__":
    unittest.main()
