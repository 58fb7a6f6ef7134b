"""The stand-in of cert-manager's constants (API paths, labels and
annotations, key usages, subject fields, the request's fields) and small
helpers: times as Go prints them, Go durations, base64, PEM blocks,
status conditions, issuer references, CSV as cert-manager joins it, and
request_spec (what a CertificateRequest of a spec carries)."""
import base64
import copy
import ipaddress
import re
import time

GROUP = "cert-manager.io"
API = "/apis/cert-manager.io/v1"
CERTIFICATES = API + "/certificates"
ISSUERS = API + "/issuers"
SECRETS = "/api/v1/secrets"

FAO_LABEL = "controller.cert-manager.io/fao"
NEXT_KEY_LABEL = "cert-manager.io/next-private-key"
ANN = "cert-manager.io/"
BASE_ANNOTATIONS = ("certificate-name", "issuer-name", "issuer-kind", "issuer-group",
                    "common-name", "alt-names", "ip-sans", "uri-sans", "email-sans",
                    "subject-organizations", "subject-organizationalunits",
                    "subject-countries", "subject-provinces", "subject-localities",
                    "subject-postalcodes", "subject-streetaddresses", "subject-serialnumber")
OUTPUT_KEYS = ("tls.crt", "tls.key", "ca.crt", "key.der", "tls-combined.pem")

DEFAULT_DURATION = 2160 * 3600.0
FAILURE_BACKOFF = 3600.0

KEY_USAGES = {
    "signing": "digitalSignature", "digital signature": "digitalSignature",
    "content commitment": "nonRepudiation", "key encipherment": "keyEncipherment",
    "key agreement": "keyAgreement", "data encipherment": "dataEncipherment",
    "cert sign": "keyCertSign", "crl sign": "cRLSign", "encipher only": "encipherOnly",
    "decipher only": "decipherOnly"}
EXT_KEY_USAGES = {
    "any": "anyExtendedKeyUsage", "server auth": "serverAuth", "client auth": "clientAuth",
    "code signing": "codeSigning", "email protection": "emailProtection",
    "s/mime": "emailProtection", "ipsec end system": "ipsecEndSystem",
    "ipsec tunnel": "ipsecTunnel", "ipsec user": "ipsecUser", "timestamping": "timeStamping",
    "ocsp signing": "OCSPSigning", "microsoft sgc": "msSGC", "netscape sgc": "nsSGC"}
KEY_USAGE_ORDER = ("digitalSignature", "nonRepudiation", "keyEncipherment", "dataEncipherment",
                   "keyAgreement", "keyCertSign", "cRLSign", "encipherOnly", "decipherOnly")
DEFAULT_USAGES = ["digital signature", "key encipherment"]
# Go's pkix.Name.ToRDNSequence order, with the subject fields and the
# annotation each one is copied to.
SUBJECT_FIELDS = (("countries", "C", "subject-countries"),
                  ("provinces", "ST", "subject-provinces"),
                  ("localities", "L", "subject-localities"),
                  ("streetAddresses", "street", "subject-streetaddresses"),
                  ("postalCodes", "postalCode", "subject-postalcodes"),
                  ("organizations", "O", "subject-organizations"),
                  ("organizationalUnits", "OU", "subject-organizationalunits"))
CURVES = {256: "P-256", 384: "P-384", 521: "P-521"}
# the fields of a Certificate's spec that make its request: a change to one
# of them after an issuance is "RequestChanged"
REQUEST_FIELDS = ("commonName", "dnsNames", "uris", "ipAddresses", "emailAddresses", "isCA",
                  "usages", "duration", "subject", "literalSubject", "otherNames")


# --------------------------------------------------------------------------
# small helpers


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def go_time(t):
    """A time as Go's time.Time String() prints it (UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(t))


def rfc1123(t):
    """Go's time.RFC1123 layout, in UTC."""
    return time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(t))


_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0,
          "m": 60.0, "h": 3600.0}


def parse_duration(text):
    """Go's time.ParseDuration, in seconds ("2160h", "1h30m", "90s")."""
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    total, pos = 0.0, 0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError('time: invalid duration "%s"' % text)
    return sign * total


def b64(data):
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def unb64(text):
    try:
        return base64.b64decode(text or "")
    except ValueError:
        return b""


def pem_blocks(pem, kind="CERTIFICATE"):
    text = pem.decode(errors="replace") if isinstance(pem, bytes) else pem
    return re.findall(r"-----BEGIN %s-----.*?-----END %s-----\n?" % (kind, kind), text, re.S)


def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def set_condition(status, ctype, value, reason, message, generation, now):
    """cert-manager's SetCertificateCondition / SetIssuerCondition: the
    transition time moves only when the status does."""
    conds = status.setdefault("conditions", [])
    new = {"type": ctype, "status": value, "reason": reason, "message": message,
           "lastTransitionTime": rfc3339(now), "observedGeneration": generation}
    for i, c in enumerate(conds):
        if c.get("type") == ctype:
            if c.get("status") == value and c.get("lastTransitionTime"):
                new["lastTransitionTime"] = c["lastTransitionTime"]
            conds[i] = new
            return
    conds.append(new)


def remove_condition(status, ctype):
    conds = [c for c in status.get("conditions") or [] if c.get("type") != ctype]
    status["conditions"] = conds


def issuer_ref(spec):
    ref = spec.get("issuerRef") or {}
    return ref.get("name", ""), ref.get("kind") or "Issuer", ref.get("group") or GROUP


def format_issuer_ref(name, kind, group):
    return "%s.%s/%s" % (kind or "Issuer", group or GROUP, name)


def go_list(items):
    """A []string as Go's %v prints it."""
    return "[" + " ".join(items) + "]"


def csv_join(values):
    """cert-manager's JoinWithEscapeCSV: comma-separated, quoted when needed."""
    out = []
    for v in values:
        if any(ch in v for ch in ',"\r\n') or v[:1] == " ":
            v = '"' + v.replace('"', '""') + '"'
        out.append(v)
    return ",".join(out)


def normal_ip(text):
    try:
        return ipaddress.ip_address(text.strip()).compressed
    except ValueError:
        return text.strip()


def request_spec(spec):
    """What a CertificateRequest of `spec` carries (to see the spec change)."""
    out = {k: copy.deepcopy(spec.get(k)) for k in REQUEST_FIELDS if spec.get(k) not in (None, [])}
    out["usages"] = sorted(spec.get("usages") or DEFAULT_USAGES)
    out["isCA"] = bool(spec.get("isCA"))
    return out
