"""The stand-in of cert-manager's issuers signing a request and of its
certificates-issuing controller: the signer a Certificate's issuerRef
names (SelfSigned, or a CA and its Secret), or why the request waits
(_Pending); signing once issue_delay has passed, writing the Secret, and
the status after the issuance. A mixin of CertManager (controller.py)."""
import copy
import time

from emulator.client import ApiError

from .common import DEFAULT_DURATION, GROUP, condition, issuer_ref, parse_duration, \
    remove_condition, set_condition, unb64
from .openssl_cli import OpensslError, cert_info, chain_and_ca, encode_key, sign


class Issuing:
    """Signs the request of a Certificate and records the issuance."""

    def _signer(self, crt):
        """(issuer, CA chain PEM, CA key PEM) for the request, or raises
        _Pending with what its CertificateRequest would say."""
        ns = crt["metadata"]["namespace"]
        name, kind, group = issuer_ref(crt["spec"])
        if group != GROUP:
            raise _Pending("", "Waiting for an external issuer of group %s: none runs "
                           "in the stand-in" % group)
        if kind != "Issuer":
            raise _Pending("IssuerNotFound", 'Referenced "%s" not found: %s.%s "%s" not found' % (
                kind, kind.lower(), GROUP, name))
        issuer = self.issuers.get(ns, name)
        if issuer is None:
            raise _Pending("IssuerNotFound", 'Referenced "Issuer" not found: issuer.%s "%s" '
                           "not found" % (GROUP, name))
        if (condition(issuer, "Ready") or {}).get("status") != "True":
            raise _Pending("IssuerNotReady", "Referenced issuer does not have a Ready status "
                           "condition")
        spec = issuer.get("spec") or {}
        if "selfSigned" in spec:
            return issuer, None, None
        if "ca" in spec:
            secret_name = (spec.get("ca") or {}).get("secretName", "")
            secret = self.secrets.get(ns, secret_name)
            data = (secret or {}).get("data") or {}
            if not data.get("tls.crt") or not data.get("tls.key"):
                raise _Pending("SecretMissing", 'Referenced secret %s/%s not found: secrets "%s" '
                               "not found" % (ns, secret_name, secret_name))
            return issuer, unb64(data["tls.crt"]), unb64(data["tls.key"])
        raise _Pending("", "Waiting on an issuer type the stand-in does not serve")

    def _maybe_issue(self, crt, path):
        md, spec = crt["metadata"], crt["spec"]
        req = self._requests.get(md["uid"])
        if req is None:
            return
        req.pop("new", None)
        now = time.time()
        if now - req["created"] < self.issue_delay:
            return
        try:
            issuer, ca_chain, ca_key = self._signer(crt)
        except _Pending as p:
            if req.get("pending") != p.state:
                self._note("certificate %s/%s: request %s pending: %s: %s" % (
                    md["namespace"], md["name"], req["name"], p.state["reason"],
                    p.state["message"]))
            req["pending"] = p.state
            return
        req["pending"] = None
        events = []
        try:
            duration = parse_duration(spec["duration"]) if spec.get("duration") else \
                DEFAULT_DURATION
            not_before = float(int(now))
            cert_pem = sign(spec, issuer.get("spec"), req["key"], ca_key, ca_chain, not_before,
                            not_before + duration)
            if ca_chain is None:
                chain, ca = cert_pem, cert_pem
            else:
                chain, ca = chain_and_ca(cert_pem, ca_chain)
            key_out = encode_key(req["key"], (spec.get("privateKey") or {}).get("encoding"))
        except (OpensslError, ValueError, KeyError) as e:
            status = copy.deepcopy(crt.get("status") or {})
            self._fail(crt, status, "Failed", str(e), events)
            self._drop_request(crt, status)
            if self._write_status(self.certificates, path, crt, status, "Certificate"):
                for event in events:
                    self._event(crt, *event)
            return
        problem = self._write_secret(crt, chain, key_out, ca)
        if problem:
            status = copy.deepcopy(crt.get("status") or {})
            self._fail(crt, status, "Failed", problem, events)
            self._drop_request(crt, status)
            if self._write_status(self.certificates, path, crt, status, "Certificate"):
                for event in events:
                    self._event(crt, *event)
            return
        self._current[md["uid"]] = {"serial": cert_info(cert_pem)["serial"],
                                    "spec": req["spec"], "revision": req["revision"]}
        issued_crt = self._finish(crt, path, req, cert_pem)
        self._requests.pop(md["uid"], None)
        self._delete_secret(md["namespace"], req["temp"])
        self.issued.append((time.time(), md["namespace"], md["name"], req["revision"]))
        self._note("certificate %s/%s: issued revision %d (serial %s) into Secret %s" % (
            md["namespace"], md["name"], req["revision"], cert_info(cert_pem)["serial"],
            spec["secretName"]))
        self._event(issued_crt, "Normal", "Issuing", "The certificate has been successfully "
                    "issued", "issuing")

    def _finish(self, crt, path, req, cert_pem):
        """The issuing controller's status update (revision, Issuing removed,
        failure fields cleared, no next key) and the readiness controller's
        (Ready, the times), retried on 409."""
        info = cert_info(cert_pem)
        view = {"cert": info, "problem": None}
        for attempt in range(20):
            status = copy.deepcopy(crt.get("status") or {})
            status["revision"] = req["revision"]
            remove_condition(status, "Issuing")
            for k in ("lastFailureTime", "failedIssuanceAttempts", "nextPrivateKeySecretName"):
                status.pop(k, None)
            set_condition(status, "Ready", "True", "Ready", "Certificate is up to date and has "
                          "not expired", crt["metadata"].get("generation", 1), time.time())
            self._set_times(status, crt["spec"], view)
            if self._write_status(self.certificates, path, crt, status, "Certificate"):
                return self.certificates.get(crt["metadata"]["namespace"],
                                             crt["metadata"]["name"]) or crt
            try:
                crt = self.client.get(path)
            except ApiError as e:
                if e.code == 404:
                    return crt
                raise
        raise RuntimeError("could not write the status of %s" % path)


class _Pending(Exception):
    def __init__(self, reason, message):
        super().__init__(message)
        self.state = {"reason": reason, "message": message}
