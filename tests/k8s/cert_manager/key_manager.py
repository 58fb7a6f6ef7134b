"""The stand-in of cert-manager's certificates-key-manager and
request-manager: the request in flight for a Certificate being issued, its
next private key (new, or the Secret's with rotationPolicy Never) kept in
a temporary Secret, dropping both when no issuance is in progress, and a
failed issuance recorded in the status. A mixin of CertManager
(controller.py)."""
import time

from emulator.client import ApiError

from .common import (FAO_LABEL, GROUP, NEXT_KEY_LABEL, b64, go_list, request_spec,
                     rfc3339, set_condition)
from .openssl_cli import OpensslError, generate_key, key_info, key_spec, openssl


class KeyManager:
    """The next private key and the request of each Certificate being
    issued (self._requests: Certificate uid -> the request)."""

    def _ensure_request(self, crt, status, secret, view, events, now):
        md, spec = crt["metadata"], crt["spec"]
        req = self._requests.get(md["uid"])
        if req is not None:
            if req["spec"] != request_spec(spec) or req["key_spec"] != key_spec(spec):
                self._note("certificate %s/%s: spec changed, new request" % (
                    md["namespace"], md["name"]))
                if req["key_spec"] != key_spec(spec):
                    events.append(("Normal", "Deleted", "Regenerating private key due to change "
                                   "in fields: [spec.privateKey]", "key-manager"))
                    self._delete_secret(md["namespace"], req["temp"])
                    status.pop("nextPrivateKeySecretName", None)
                    req = None
                else:
                    req.update(spec=request_spec(spec), created=now, pending=None)
            else:
                return
        if req is None:
            req = self._new_key(crt, status, secret, view, events)
            if req is None:
                return
        req.update(spec=request_spec(spec), key_spec=key_spec(spec), created=now, pending=None,
                   revision=(status.get("revision") or 0) + 1, new=True)
        req["name"] = "%s-%d" % (md["name"], req["revision"])
        self._requests[md["uid"]] = req
        events.append(("Normal", "Requested", 'Created new CertificateRequest resource "%s"' %
                       req["name"], "request-manager"))

    def _new_key(self, crt, status, secret, view, events):
        md, spec = crt["metadata"], crt["spec"]
        rotation = (spec.get("privateKey") or {}).get("rotationPolicy") or "Always"
        key = None
        if rotation == "Never" and view["key_pem"]:
            try:
                info = key_info(view["key_pem"])
            except OpensslError:
                events.append(("Warning", "DecodeFailed", 'Failed to decode private key stored '
                               'in Secret "%s" - generating new key' % spec["secretName"],
                               "key-manager"))
            else:
                violations = self._key_violations(info, spec)
                if violations:
                    if md["uid"] not in self._warned:
                        self._warned.add(md["uid"])
                        events.append(("Warning", "CannotRegenerateKey", (
                            'User intervention required: existing private key in Secret "%s" '
                            "does not match requirements on Certificate resource, mismatching "
                            "fields: %s, but cert-manager cannot create new private key as the "
                            "Certificate's .spec.privateKey.rotationPolicy is unset or set to "
                            "Never. To allow cert-manager to create a new private key you can "
                            "set .spec.privateKey.rotationPolicy to 'Always' (this will result "
                            "in the private key being regenerated every time a cert is renewed) "
                            % (spec["secretName"], go_list(violations))), "key-manager"))
                    return None
                key = openssl("pkey", stdin=view["key_pem"])
                reused = True
        if key is None:
            try:
                key = generate_key(*key_spec(spec))
            except OpensslError as e:
                self._fail(crt, status, "Failed", str(e), events)
                return None
            reused = False
        self._warned.discard(md["uid"])
        temp = self._create_next_key_secret(crt, key)
        status["nextPrivateKeySecretName"] = temp
        if reused:
            events.append(("Normal", "Reused", 'Reusing private key stored in existing Secret '
                           'resource "%s"' % spec["secretName"], "key-manager"))
        else:
            events.append(("Normal", "Generated", 'Stored new private key in temporary Secret '
                           'resource "%s"' % temp, "key-manager"))
        return {"key": key, "temp": temp}

    def _create_next_key_secret(self, crt, key):
        md = crt["metadata"]
        body = {"apiVersion": "v1", "kind": "Secret",
                "metadata": {"generateName": md["name"] + "-", "namespace": md["namespace"],
                             "labels": {NEXT_KEY_LABEL: "true", FAO_LABEL: "true"},
                             "ownerReferences": [self._owner(crt)]},
                "data": {"tls.key": b64(key)}}
        made = self.client.post("/api/v1/namespaces/%s/secrets" % md["namespace"], body)
        self.secrets.put(made)
        return made["metadata"]["name"]

    @staticmethod
    def _owner(crt):
        md = crt["metadata"]
        return {"apiVersion": GROUP + "/v1", "kind": "Certificate", "name": md["name"],
                "uid": md["uid"], "controller": True, "blockOwnerDeletion": True}

    def _discard_new_request(self, crt, status):
        """The status write failed: forget a request made in this pass (its
        temporary Secret goes; the next pass starts over)."""
        req = self._requests.get(crt["metadata"]["uid"])
        if req and req.pop("new", False):
            del self._requests[crt["metadata"]["uid"]]
            self._delete_secret(crt["metadata"]["namespace"], req["temp"])

    def _drop_request(self, crt, status):
        """No issuance in progress: the key manager deletes the next private
        key's Secret and unsets nextPrivateKeySecretName."""
        req = self._requests.pop(crt["metadata"]["uid"], None)
        if req:
            self._delete_secret(crt["metadata"]["namespace"], req["temp"])
        temp = status.pop("nextPrivateKeySecretName", None)
        if temp and (not req or temp != req["temp"]):
            self._delete_secret(crt["metadata"]["namespace"], temp)

    def _delete_secret(self, namespace, name):
        try:
            self.client.delete("/api/v1/namespaces/%s/secrets/%s" % (namespace, name))
        except ApiError as e:
            if e.code != 404:
                raise
        old = self.secrets.get(namespace, name)
        if old is not None:
            self.secrets.remove(old)

    def _fail(self, crt, status, reason, message, events):
        message = "The certificate request has failed to complete and will be retried: " + message
        set_condition(status, "Issuing", "False", reason, message,
                      crt["metadata"].get("generation", 1), time.time())
        status["lastFailureTime"] = rfc3339(time.time())
        status["failedIssuanceAttempts"] = (status.get("failedIssuanceAttempts") or 0) + 1
        events.append(("Warning", reason, message, "issuing"))
        self._note("certificate %s/%s: failed: %s" % (crt["metadata"]["namespace"],
                                                       crt["metadata"]["name"], message))
