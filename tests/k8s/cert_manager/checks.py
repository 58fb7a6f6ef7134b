"""The checks of the stand-in of cert-manager's Certificate controllers:
the Secret's key pair as the policies read it, the key and the request
against the spec, the renewal time, the trigger policy chain (why issue),
the readiness policy chain (Ready), and the back-off after a failed
issuance. A mixin of CertManager (controller.py)."""
from emulator.clock import parse_time

from .common import (ANN, FAILURE_BACKOFF, GROUP, format_issuer_ref, go_list, go_time,
                     issuer_ref, normal_ip, parse_duration, request_spec, rfc1123, unb64)
from .openssl_cli import OpensslError, cert_info, key_info, key_spec


class CertificateChecks:
    """What cert-manager's policy checks say about a Certificate and its
    Secret (uses self._current, the record of what each Certificate's
    current revision was issued for)."""

    def _inspect(self, secret):
        """The Secret's key pair as the policy checks read it: {"key",
        "cert", "key_pem", "cert_pem", "problem": (reason, message)}."""
        data = (secret or {}).get("data") or {}
        out = {"key": None, "cert": None, "problem": None,
               "key_pem": unb64(data.get("tls.key")), "cert_pem": unb64(data.get("tls.crt"))}
        if not data:
            out["problem"] = ("MissingData", "Issuing certificate as Secret does not contain "
                              "any data")
            return out
        if not out["key_pem"]:
            out["problem"] = ("MissingData", "Issuing certificate as Secret does not contain a "
                              "private key")
            return out
        if not out["cert_pem"]:
            out["problem"] = ("MissingData", "Issuing certificate as Secret does not contain a "
                              "certificate")
            return out
        try:
            out["key"] = key_info(out["key_pem"])
        except OpensslError as e:
            out["problem"] = ("InvalidKeyPair", "Issuing certificate as Secret contains invalid "
                              "private key data: %s" % e)
            return out
        try:
            out["cert"] = cert_info(out["cert_pem"])
        except (OpensslError, KeyError, ValueError) as e:
            out["problem"] = ("InvalidCertificate", "Issuing certificate as Secret contains an "
                              "invalid certificate: %s" % e)
            return out
        if out["key"]["public"] != out["cert"]["public"]:
            out["problem"] = ("InvalidKeyPair", "Issuing certificate as Secret contains a "
                              "private key that does not match the certificate")
        return out

    @staticmethod
    def _key_violations(info, spec):
        algorithm, size = key_spec(spec)
        if info["algorithm"] != algorithm:
            return ["spec.privateKey.algorithm"]
        if algorithm != "Ed25519" and info["size"] != size:
            return ["spec.privateKey.size"]
        return []

    def _request_changed(self, crt, view):
        """RequestChanged against what the current revision was issued for;
        without that record (issued before this stand-in started), the
        fallback cert-manager uses: the certificate's names against the spec."""
        spec = crt["spec"]
        current = self._current.get(crt["metadata"]["uid"])
        if current and current["serial"] == view["cert"]["serial"]:
            now = request_spec(spec)
            fields = sorted(set(k for k in set(now) | set(current["spec"])
                                if now.get(k) != current["spec"].get(k)))
            if fields:
                return ("RequestChanged", "Fields on existing CertificateRequest resource not up "
                        "to date: " + go_list("spec." + f for f in fields))
            return None
        cert, violations = view["cert"], []
        if spec.get("commonName", "") and spec["commonName"] != cert["cn"]:
            violations.append("spec.commonName")
        checks = (("dnsNames", "dns", lambda v: v), ("ipAddresses", "ips", normal_ip),
                  ("uris", "uris", lambda v: v), ("emailAddresses", "emails", lambda v: v))
        for field, key, norm in checks:
            want = set(norm(v) for v in spec.get(field) or [])
            have = set(cert[key])
            if field == "dnsNames" and cert["cn"] not in want:
                have.discard(cert["cn"])   # fuzzy: the common name may be a DNS name too
            if want != have:
                violations.append("spec." + field)
        if violations:
            return ("SecretMismatch", "Issuing certificate as Existing issued Secret is not up "
                    "to date for spec: " + go_list(violations))
        return None

    @staticmethod
    def _renewal_time(spec, cert):
        """cert-manager's RenewalTime: notAfter - renewBefore (a third of the
        lifetime unless spec.renewBefore, shorter than it, or
        spec.renewBeforePercentage says otherwise), to the second."""
        lifetime = cert["not_after"] - cert["not_before"]
        before = lifetime / 3
        if spec.get("renewBeforePercentage") is not None:
            before = lifetime * spec["renewBeforePercentage"] / 100.0
        elif spec.get("renewBefore"):
            try:
                hint = parse_duration(spec["renewBefore"])
            except ValueError:
                hint = None
            if hint is not None and hint < lifetime:
                before = hint
        return float(int(cert["not_after"] - before))

    def _trigger(self, crt, secret, view, now):
        """cert-manager's trigger policy chain: (reason, message) when the
        Certificate must be issued, else None."""
        spec = crt["spec"]
        if secret is None:
            return "DoesNotExist", "Issuing certificate as Secret does not exist"
        if view["problem"]:
            return view["problem"]
        violations = self._key_violations(view["key"], spec)
        if violations:
            return ("SecretMismatch", "Existing private key is not up to date for spec: " +
                    go_list(violations))
        ann = (secret["metadata"].get("annotations") or {})
        name, kind, group = issuer_ref(spec)
        have = [ann.get(ANN + k) for k in ("issuer-name", "issuer-kind", "issuer-group")]
        if any(v is not None for v in have) and (
                have[0] != name or (have[1] or "Issuer") != kind or (have[2] or GROUP) != group):
            return ("IncorrectIssuer", "Issuing certificate as Secret was previously issued by "
                    '"%s"' % format_issuer_ref(have[0] or "", have[1], have[2]))
        crt_name = ann.get(ANN + "certificate-name")
        if crt_name is not None and crt_name != crt["metadata"]["name"]:
            return ("IncorrectCertificate", 'Secret was issued for "%s". If this message is not '
                    "transient, you might have two conflicting Certificates pointing to the same "
                    "secret." % crt_name)
        changed = self._request_changed(crt, view)
        if changed:
            return changed
        renewal = self._renewal_time(spec, view["cert"])
        if renewal <= now:
            return ("Renewing", "Renewing certificate as renewal was scheduled at %s" %
                    go_time(renewal))
        return None

    def _readiness(self, crt, secret, view, now):
        """cert-manager's readiness policy chain: (status, reason, message)."""
        if secret is None:
            return "False", "DoesNotExist", "Issuing certificate as Secret does not exist"
        if view["problem"]:
            return ("False",) + tuple(view["problem"])
        changed = self._request_changed(crt, view)
        if changed:
            return ("False",) + changed
        if now > view["cert"]["not_after"]:
            return ("False", "Expired", "Certificate expired on %s" %
                    rfc1123(view["cert"]["not_after"]))
        return "True", "Ready", "Certificate is up to date and has not expired"

    @staticmethod
    def _backing_off(status, now):
        failed = parse_time(status.get("lastFailureTime"))
        if failed is None:
            return False
        attempts = max(1, status.get("failedIssuanceAttempts") or 1)
        return now < failed + FAILURE_BACKOFF * 2 ** (attempts - 1)
