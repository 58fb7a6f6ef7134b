"""The stand-in of cert-manager's controller: CertManager (its informers,
the loop that runs a sync pass when they change, what tests read, the
Issuers' Ready condition, the pass over each Certificate, status writes
and Events) and cmctl_renew. The Certificate's checks, key manager,
issuing and Secret writing are mixins from the modules beside it."""
import copy
import threading
import time
import traceback

from emulator.client import ApiError

from .checks import CertificateChecks
from .common import (API, CERTIFICATES, GROUP, ISSUERS, SECRETS, condition, rfc3339,
                     set_condition, unb64)
from .informer import Informer
from .issuing import Issuing
from .key_manager import KeyManager
from .openssl_cli import OpensslError, cert_info, key_info
from .secret_writer import SecretWriter


class CertManager(CertificateChecks, KeyManager, Issuing, SecretWriter):
    """cert-manager's controller for Issuers (SelfSigned, CA) and
    Certificates, on `cluster` (an emulator Cluster, or anything with a
    `client`). See the package's docstring for what it does."""

    def __init__(self, cluster, issue_delay=0.3, interval=0.1, owner_ref=False):
        self.cluster = cluster
        self.client = cluster.client
        self.issue_delay = issue_delay
        self.interval = interval
        self.owner_ref = owner_ref
        self.issued = []        # (time, namespace, certificate, revision)
        self.errors = []        # tracebacks of failed sync passes
        self._lines = []
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self.issuers = Informer(self.client, ISSUERS, self._stopped, self._wake)
        self.certificates = Informer(self.client, CERTIFICATES, self._stopped, self._wake)
        self.secrets = Informer(self.client, SECRETS, self._stopped, self._wake)
        self._requests = {}     # Certificate uid -> the request in flight
        self._current = {}      # Certificate uid -> what its current revision was issued for
        self._managed = {}      # (namespace, Secret) -> {"labels", "annotations", "data"}
        self._warned = set()
        self._thread = None

    # -- lifecycle

    def start(self):
        for informer in (self.issuers, self.certificates, self.secrets):
            informer.thread.start()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cert-manager")
        self._thread.start()
        return self

    def stop(self):
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _run(self):
        while not self._stopped.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                self.sync()
            except Exception:   # a pass that failed is retried: keep the controller up
                self.errors.append(traceback.format_exc())
                self._note("sync failed: %s" % traceback.format_exc().splitlines()[-1])

    # -- what tests read

    def log(self):
        return "\n".join(self._lines)

    def issuances(self, namespace=None, name=None):
        return [i for i in list(self.issued) if (namespace is None or i[1] == namespace) and
                (name is None or i[2] == name)]

    def wait_issued(self, namespace, name, revision=1, timeout=15):
        """Waits until revision `revision` of the Certificate was issued;
        returns the Certificate."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(r >= revision for _, _, _, r in self.issuances(namespace, name)):
                return self.client.get("%s/namespaces/%s/certificates/%s" % (
                    API, namespace, name))
            time.sleep(0.05)
        raise AssertionError("timed out after %gs waiting for revision %d of %s/%s\n%s" % (
            timeout, revision, namespace, name, self.log()[-3000:]))

    def pending(self, namespace, name):
        """Why the request of a Certificate being issued waits, as its
        CertificateRequest's Ready condition would say: {"reason",
        "message"} (IssuerNotFound, IssuerNotReady, ...), or None."""
        crt = self.certificates.get(namespace, name)
        req = crt and self._requests.get(crt["metadata"]["uid"])
        return dict(req["pending"]) if req and req.get("pending") else None

    def renew(self, namespace, name):
        return cmctl_renew(self.client, namespace, name)

    def _note(self, line):
        self._lines.append("%.3f %s" % (time.time(), line))

    # -- the passes

    def sync(self):
        if not all(i.synced.is_set() for i in (self.issuers, self.certificates, self.secrets)):
            return
        for issuer in self.issuers.items():
            self._sync_issuer(issuer)
        live = set()
        for crt in self.certificates.items():
            live.add(crt["metadata"]["uid"])
            if not crt["metadata"].get("deletionTimestamp"):
                self._sync_certificate(crt)
        for uid in set(self._requests) - live:
            del self._requests[uid]
        for uid in set(self._current) - live:
            del self._current[uid]

    # -- issuers

    def _issuer_ready(self, issuer):
        """(status, reason, message) of an Issuer's Ready, or None for types
        the stand-in does not serve."""
        spec = issuer.get("spec") or {}
        if "selfSigned" in spec:
            return "True", "IsReady", ""
        if "ca" not in spec:
            return None
        ns = issuer["metadata"]["namespace"]
        name = (spec.get("ca") or {}).get("secretName", "")
        prefix = "Error getting keypair for CA issuer: "
        secret = self.secrets.get(ns, name)
        if secret is None:
            return "False", "ErrGetKeyPair", prefix + 'secrets "%s" not found' % name
        data = secret.get("data") or {}
        for key in ("tls.crt", "tls.key"):
            if not data.get(key):
                return "False", "ErrGetKeyPair", prefix + "no data for %r in secret '%s/%s'" % (
                    key, ns, name)
        try:
            info = cert_info(unb64(data["tls.crt"]))
            key_info(unb64(data["tls.key"]))
        except OpensslError as e:
            return "False", "ErrGetKeyPair", prefix + str(e)
        if not info["is_ca"]:
            return "False", "ErrInvalidKeyPair", prefix + "certificate is not a CA"
        return "True", "KeyPairVerified", "Signing CA verified"

    def _sync_issuer(self, issuer):
        want = self._issuer_ready(issuer)
        if want is None:
            return
        current = condition(issuer, "Ready")
        if current and (current.get("status"), current.get("reason"),
                        current.get("message", "")) == want:
            return
        status = copy.deepcopy(issuer.get("status") or {})
        set_condition(status, "Ready", want[0], want[1], want[2],
                      issuer["metadata"].get("generation", 1), time.time())
        md = issuer["metadata"]
        self._note("issuer %s/%s Ready %s %s %s" % (md["namespace"], md["name"], *want))
        self._write_status(self.issuers, "%s/namespaces/%s/issuers/%s" % (
            API, md["namespace"], md["name"]), issuer, status, "Issuer")

    def _write_status(self, informer, path, obj, status, kind):
        body = dict(obj, status=status, apiVersion=GROUP + "/v1", kind=kind)
        try:
            informer.put(self.client.put(path + "/status", body))
            return True
        except ApiError as e:
            if e.code not in (404, 409):
                raise
            return False   # changed or gone under us: the next pass reads it again

    # -- certificates: the pass

    def _sync_certificate(self, crt):
        md = crt["metadata"]
        ns, name = md["namespace"], md["name"]
        spec = crt.get("spec") or {}
        crt = dict(crt, spec=spec)
        generation = md.get("generation", 1)
        now = time.time()
        status = copy.deepcopy(crt.get("status") or {})
        secret = self.secrets.get(ns, spec.get("secretName", ""))
        view = self._inspect(secret)
        events = []
        issuing = (condition(crt, "Issuing") or {}).get("status") == "True"
        if not issuing and not self._backing_off(status, now):
            why = self._trigger(crt, secret, view, now)
            if why:
                set_condition(status, "Issuing", "True", why[0], why[1], generation, now)
                events.append(("Normal", "Issuing", why[1], "trigger"))
                self._note("certificate %s/%s: Issuing: %s: %s" % (ns, name, *why))
                issuing = True
        if issuing:
            self._ensure_request(crt, status, secret, view, events, now)
        else:
            self._drop_request(crt, status)
        ready = self._readiness(crt, secret, view, now)
        set_condition(status, "Ready", ready[0], ready[1], ready[2], generation,
                      now)
        self._set_times(status, spec, view)
        path = "%s/namespaces/%s/certificates/%s" % (API, ns, name)
        if status != (crt.get("status") or {}):
            if not self._write_status(self.certificates, path, crt, status, "Certificate"):
                self._discard_new_request(crt, status)
                return
        for etype, reason, message, part in events:
            self._event(crt, etype, reason, message, part)
        crt = self.certificates.get(ns, name) or crt
        if issuing:
            self._maybe_issue(crt, path)
        elif secret is not None and not view["problem"]:
            self._sync_secret_metadata(crt, secret, view)

    @staticmethod
    def _set_times(status, spec, view):
        cert = view["cert"] if not view["problem"] else None
        if cert is None:
            for k in ("notBefore", "notAfter", "renewalTime"):
                status.pop(k, None)
            return
        status["notBefore"] = rfc3339(cert["not_before"])
        status["notAfter"] = rfc3339(cert["not_after"])
        status["renewalTime"] = rfc3339(CertManager._renewal_time(spec, cert))

    # -- events

    def _event(self, crt, etype, reason, message, part):
        md = crt["metadata"]
        now = rfc3339(time.time())
        component = "cert-manager-certificates-" + part
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "%s.%x" % (md["name"], time.time_ns()),
                             "namespace": md["namespace"]},
                "involvedObject": {"apiVersion": GROUP + "/v1", "kind": "Certificate",
                                   "namespace": md["namespace"], "name": md["name"],
                                   "uid": md["uid"],
                                   "resourceVersion": md.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": etype,
                "source": {"component": component}, "reportingComponent": component,
                "reportingInstance": "", "firstTimestamp": now, "lastTimestamp": now,
                "count": 1}
        try:
            self.client.post("/api/v1/namespaces/%s/events" % md["namespace"], body)
        except ApiError:
            pass   # events are best effort, as the recorder's


def cmctl_renew(client, namespace, name):
    """What `cmctl renew NAME -n NAMESPACE` does: sets the Certificate's
    Issuing condition True (reason ManuallyTriggered) through its status.
    Returns cmctl's line."""
    path = "%s/namespaces/%s/certificates/%s" % (API, namespace, name)
    for attempt in range(20):
        crt = client.get(path)
        status = crt.setdefault("status", {})
        set_condition(status, "Issuing", "True", "ManuallyTriggered",
                      "Certificate re-issuance manually triggered",
                      crt["metadata"].get("generation", 1), time.time())
        try:
            client.put(path + "/status", crt)
            return "Manually triggered issuance of Certificate %s/%s" % (namespace, name)
        except ApiError as e:
            if e.code != 409:
                raise
    raise RuntimeError("failed to trigger issuance of Certificate %s/%s" % (namespace, name))
