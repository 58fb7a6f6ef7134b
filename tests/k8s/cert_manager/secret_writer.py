"""How the stand-in of cert-manager writes a Certificate's Secret: the
labels and annotations it applies, the data (tls.crt, tls.key, ca.crt,
additional output formats), creating or updating the Secret as
server-side apply would (others' fields kept, what it set before and no
longer sets removed), and putting its metadata back without a new
certificate. A mixin of CertManager (controller.py)."""
import copy

from emulator.client import ApiError

from .common import (ANN, BASE_ANNOTATIONS, FAO_LABEL, OUTPUT_KEYS, SUBJECT_FIELDS, b64,
                     csv_join, issuer_ref, unb64)
from .openssl_cli import cert_info


class SecretWriter:
    """The Secret of a Certificate (self._managed: (namespace, Secret) ->
    the labels, annotations and data keys cert-manager set on it)."""

    def _secret_metadata(self, crt, info):
        """The labels and annotations cert-manager applies to the Secret."""
        spec, md = crt["spec"], crt["metadata"]
        template = spec.get("secretTemplate") or {}
        name, kind, group = issuer_ref(spec)
        ref = spec.get("issuerRef") or {}
        base = {"certificate-name": md["name"], "issuer-name": name, "issuer-kind": kind,
                "issuer-group": ref.get("group", ""), "common-name": info["cn"],
                "alt-names": csv_join(info["dns"]), "ip-sans": csv_join(info["ips"]),
                "uri-sans": csv_join(info["uris"])}
        if info["emails"]:
            base["email-sans"] = csv_join(info["emails"])
        attrs = {}
        for attr, value in info["subject"]:
            attrs.setdefault(attr, []).append(value)
        for _, attr, annotation in SUBJECT_FIELDS:
            if attrs.get(attr):
                base[annotation] = csv_join(list(reversed(attrs[attr])))
        if attrs.get("serialNumber"):
            base["subject-serialnumber"] = attrs["serialNumber"][0]
        annotations = dict(template.get("annotations") or {})
        annotations.update({ANN + k: v for k, v in base.items()})
        labels = dict(template.get("labels") or {})
        labels[FAO_LABEL] = "true"
        return labels, annotations

    def _write_secret(self, crt, chain, key_pem, ca):
        """Creates or updates the Secret; returns a problem (str) or None."""
        spec, md = crt["spec"], crt["metadata"]
        ns, name = md["namespace"], spec["secretName"]
        labels, annotations = self._secret_metadata(crt, cert_info(chain))
        data = {"tls.crt": b64(chain), "tls.key": b64(key_pem), "ca.crt": b64(ca)}
        for fmt in spec.get("additionalOutputFormats") or []:
            if fmt.get("type") == "DER":
                data["key.der"] = b64(unb64("".join(
                    key_pem.decode().strip().splitlines()[1:-1])))
            elif fmt.get("type") == "CombinedPEM":
                data["tls-combined.pem"] = b64(key_pem + b"\n" + chain)
        path = "/api/v1/namespaces/%s/secrets" % ns
        existing = self.secrets.get(ns, name)
        for attempt in range(20):
            try:
                if existing is None:
                    body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                            "metadata": {"name": name, "namespace": ns, "labels": labels,
                                         "annotations": annotations},
                            "data": data}
                    if self.owner_ref:
                        body["metadata"]["ownerReferences"] = [self._owner(crt)]
                    self.secrets.put(self.client.post(path, body))
                else:
                    if existing.get("type", "Opaque") != "kubernetes.io/tls":
                        return ('Secret "%s" is invalid: type: Invalid value: "kubernetes.io/tls"'
                                ": field is immutable" % name)
                    body = self._merged(existing, labels, annotations, data, crt)
                    self.secrets.put(self.client.put(path + "/" + name, body))
                self._managed[(ns, name)] = {"labels": set(labels),
                                             "annotations": set(annotations),
                                             "data": set(data)}
                return None
            except ApiError as e:
                if e.code not in (404, 409):
                    raise
                try:
                    existing = self.client.get(path + "/" + name)
                except ApiError as e2:
                    if e2.code != 404:
                        raise
                    existing = None
        return "could not write Secret %s/%s" % (ns, name)

    def _merged(self, existing, labels, annotations, data, crt):
        """`existing` with cert-manager's fields applied as server-side apply
        would: others' labels, annotations, data keys and owner references
        kept; what cert-manager set before and no longer sets removed."""
        ns, name = existing["metadata"]["namespace"], existing["metadata"]["name"]
        before = self._managed.get((ns, name)) or {
            "labels": {FAO_LABEL}, "annotations": {ANN + k for k in BASE_ANNOTATIONS},
            "data": set(OUTPUT_KEYS) if data is not None else set()}
        obj = copy.deepcopy(existing)
        obj["apiVersion"], obj["kind"] = "v1", "Secret"
        md = obj["metadata"]
        for field, want in (("labels", labels), ("annotations", annotations)):
            have = md.get(field) or {}
            for k in before[field] - set(want):
                have.pop(k, None)
            have.update(want)
            md[field] = have
        if data is not None:
            have = obj.get("data") or {}
            for k in before["data"] - set(data):
                have.pop(k, None)
            have.update(data)
            obj["data"] = have
        if self.owner_ref:
            refs = md.get("ownerReferences") or []
            if not any(r.get("uid") == crt["metadata"]["uid"] for r in refs):
                md["ownerReferences"] = refs + [self._owner(crt)]
        return obj

    def _sync_secret_metadata(self, crt, secret, view):
        """The post-issuance checks: cert-manager's labels and annotations and
        the secretTemplate's on the Secret, put back without a new
        certificate when missing or out of step."""
        labels, annotations = self._secret_metadata(crt, view["cert"])
        md = secret["metadata"]
        key = (md["namespace"], md["name"])
        managed = self._managed.get(key)
        stale = set()
        if managed:
            stale = ((managed["labels"] - set(labels)) & set(md.get("labels") or {})) | \
                ((managed["annotations"] - set(annotations)) & set(md.get("annotations") or {}))
        have_l, have_a = md.get("labels") or {}, md.get("annotations") or {}
        if not stale and all(have_l.get(k) == v for k, v in labels.items()) and \
                all(have_a.get(k) == v for k, v in annotations.items()):
            return
        path = "/api/v1/namespaces/%s/secrets/%s" % key
        existing = secret
        for attempt in range(20):
            body = self._merged(existing, labels, annotations, None, crt)
            try:
                self.secrets.put(self.client.put(path, body))
                before = managed or {"data": set(OUTPUT_KEYS)}
                self._managed[key] = {"labels": set(labels), "annotations": set(annotations),
                                      "data": before["data"]}
                self._note("secret %s/%s: metadata put back" % key)
                return
            except ApiError as e:
                if e.code == 404:
                    return
                if e.code != 409:
                    raise
                existing = self.client.get(path)
