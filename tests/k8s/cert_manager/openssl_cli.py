"""The openssl CLI as the stand-in of cert-manager uses it: private keys
(generated per spec.privateKey, encoded PKCS1/PKCS8, read), X.509
certificates (read, cached; signed with `openssl ca` from a Certificate's
spec, self-signed or by a CA), the extensions cert-manager's template
makes, and the tls.crt chain / ca.crt of a CA-signed certificate."""
import calendar
import hashlib
import os
import re
import secrets as random_source
import subprocess
import tempfile
import time

from .common import (CURVES, DEFAULT_USAGES, EXT_KEY_USAGES, KEY_USAGE_ORDER, KEY_USAGES,
                     SUBJECT_FIELDS, normal_ip, pem_blocks)


class OpensslError(Exception):
    pass


def openssl(*args, stdin=None):
    result = subprocess.run(["openssl", *args], input=stdin, capture_output=True)
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise OpensslError("openssl %s: %s" % (args[0], lines[-1] if lines else "failed"))
    return result.stdout


def key_spec(spec):
    """(algorithm, size) a Certificate asks for, with cert-manager's defaults."""
    pk = spec.get("privateKey") or {}
    algorithm = pk.get("algorithm") or "RSA"
    size = pk.get("size") or 0
    if algorithm == "RSA":
        size = size or 2048
    elif algorithm == "ECDSA":
        size = size or 256
    else:
        size = 0
    return algorithm, size


def generate_key(algorithm, size):
    """A new private key, PKCS#8 PEM."""
    if algorithm == "RSA":
        if size not in (2048, 4096, 8192):
            raise OpensslError("RSA key size must be 2048, 4096 or 8192, not %d" % size)
        return openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:%d" % size)
    if algorithm == "ECDSA":
        if size not in CURVES:
            raise OpensslError("unsupported ecdsa keysize specified: %d" % size)
        return openssl("genpkey", "-algorithm", "EC", "-pkeyopt",
                       "ec_paramgen_curve:" + CURVES[size], "-pkeyopt",
                       "ec_param_enc:named_curve")
    if algorithm == "Ed25519":
        return openssl("genpkey", "-algorithm", "ED25519")
    raise OpensslError("unsupported private key algorithm specified: %s" % algorithm)


def encode_key(pem, encoding):
    """cert-manager's EncodePrivateKey: PKCS1 (the default: "RSA PRIVATE
    KEY", "EC PRIVATE KEY") or PKCS8; Ed25519 keys are always PKCS8."""
    if encoding == "PKCS8" or key_info(pem)["algorithm"] == "Ed25519":
        return openssl("pkey", stdin=pem)
    return openssl("pkey", "-traditional", stdin=pem)


_key_cache = {}
_cert_cache = {}


def key_info(pem):
    """{"algorithm", "size", "public"} of a PEM private key (cached)."""
    digest = hashlib.sha256(pem).hexdigest()
    if digest not in _key_cache:
        out = openssl("pkey", "-pubout", "-text_pub", stdin=pem).decode()
        public = "".join(pem_blocks(out, "PUBLIC KEY"))
        bits = re.search(r"Public-Key: \((\d+) bit", out)
        if "ED25519" in out:
            algorithm, size = "Ed25519", 0
        elif "ASN1 OID" in out or "NIST CURVE" in out:
            algorithm, size = "ECDSA", int(bits.group(1)) if bits else 0
        else:
            algorithm, size = "RSA", int(bits.group(1)) if bits else 0
        _key_cache[digest] = {"algorithm": algorithm, "size": size, "public": public}
    return _key_cache[digest]


def _split_dn(text):
    """An RFC 2253 name as openssl prints it -> [(attribute, value)]."""
    parts, cur, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur += text[i + 1]
            i += 2
            continue
        if ch in ",+":
            parts.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        parts.append(cur)
    return [tuple(p.split("=", 1)) for p in parts if "=" in p]


def _openssl_time(text):
    """"Jan  1 00:00:00 2025 GMT" -> epoch seconds."""
    return float(calendar.timegm(time.strptime(" ".join(text.split()[:4]),
                                               "%b %d %H:%M:%S %Y")))


def cert_info(pem):
    """What cert-manager reads from an X.509 certificate (the first of a PEM
    chain), cached: serial, notBefore/notAfter (epoch seconds), subject and
    issuer, the SANs, CA:TRUE, the public key."""
    first = (pem_blocks(pem) or [""])[0].encode()
    digest = hashlib.sha256(first).hexdigest()
    if digest in _cert_cache:
        return _cert_cache[digest]
    if not first:
        raise OpensslError("error decoding X.509 certificate: no PEM data")
    out = openssl("x509", "-noout", "-serial", "-startdate", "-enddate",
                  "-subject", "-issuer", "-nameopt", "RFC2253",
                  "-ext", "subjectAltName,basicConstraints", "-pubkey", stdin=first).decode()
    fields = dict(re.findall(r"^(serial|notBefore|notAfter|subject|issuer)=(.*)$", out, re.M))
    info = {"serial": fields.get("serial", ""),
            "not_before": _openssl_time(fields["notBefore"]),
            "not_after": _openssl_time(fields["notAfter"]),
            "subject_dn": fields.get("subject", "").strip(),
            "issuer_dn": fields.get("issuer", "").strip(),
            "public": "".join(pem_blocks(out, "PUBLIC KEY")),
            "is_ca": bool(re.search(r"Basic Constraints.*\n\s*CA:TRUE", out)),
            "dns": [], "ips": [], "uris": [], "emails": []}
    info["subject"] = _split_dn(info["subject_dn"])
    info["cn"] = next((v for k, v in info["subject"] if k == "CN"), "")
    san = re.search(r"Subject Alternative Name:.*\n\s*(.*)", out)
    for item in (san.group(1).split(", ") if san else []):
        kind, _, value = item.partition(":")
        key = {"DNS": "dns", "IP Address": "ips", "URI": "uris", "email": "emails"}.get(kind)
        if key:
            info[key].append(normal_ip(value) if key == "ips" else value)
    _cert_cache[digest] = info
    return info


def _subj_escape(value):
    return re.sub(r"([/+=\\])", r"\\\1", value)


def subject_arg(spec):
    """The subject as `openssl req -subj` reads it, in Go's RDN order."""
    subject = spec.get("subject") or {}
    rdns = []
    for field, attr, _ in SUBJECT_FIELDS:
        values = subject.get(field) or []
        if values:
            rdns.append("+".join("%s=%s" % (attr, _subj_escape(v)) for v in values))
    if spec.get("commonName"):
        rdns.append("CN=" + _subj_escape(spec["commonName"]))
    if subject.get("serialNumber"):
        rdns.append("serialNumber=" + _subj_escape(subject["serialNumber"]))
    return "/" + "/".join(rdns), bool(rdns)


def _conf_value(value):
    return re.sub(r"([\\$#\"'])", r"\\\1", value)


def extensions(spec, issuer_spec, self_signed, subject_empty):
    """The openssl extension section ([ext]) cert-manager's template makes."""
    usages = spec.get("usages") or DEFAULT_USAGES
    ku = {KEY_USAGES[u] for u in usages if u in KEY_USAGES}
    if spec.get("isCA"):
        ku.add("keyCertSign")
    eku = []
    for u in usages:
        if u in EXT_KEY_USAGES and EXT_KEY_USAGES[u] not in eku:
            eku.append(EXT_KEY_USAGES[u])
    lines = ["[ext]", "basicConstraints = critical, CA:%s" % (
        "TRUE" if spec.get("isCA") else "FALSE")]
    if ku:
        lines.append("keyUsage = critical, " + ", ".join(u for u in KEY_USAGE_ORDER if u in ku))
    if eku:
        lines.append("extendedKeyUsage = " + ", ".join(eku))
    # Go's x509: a subject key identifier on CA certificates only, the
    # parent's as authority key identifier unless self-signed (openssl 3
    # would add both everywhere: "none" says no)
    lines.append("subjectKeyIdentifier = %s" % ("hash" if spec.get("isCA") else "none"))
    lines.append("authorityKeyIdentifier = %s" % ("none" if self_signed else "keyid"))
    sans = ([("DNS", v) for v in spec.get("dnsNames") or []] +
            [("email", v) for v in spec.get("emailAddresses") or []] +
            [("IP", v) for v in spec.get("ipAddresses") or []] +
            [("URI", v) for v in spec.get("uris") or []])
    kind_spec = (issuer_spec or {}).get("selfSigned" if self_signed else "ca") or {}
    if kind_spec.get("crlDistributionPoints"):
        lines.append("crlDistributionPoints = " + ", ".join(
            "URI:" + _conf_value(u) for u in kind_spec["crlDistributionPoints"]))
    aia = (["OCSP;URI:" + _conf_value(u) for u in kind_spec.get("ocspServers") or []] +
           ["caIssuers;URI:" + _conf_value(u)
            for u in kind_spec.get("issuingCertificateURLs") or []])
    if aia:
        lines.append("authorityInfoAccess = " + ", ".join(aia))
    if sans:
        lines.append("subjectAltName = %s@san" % ("critical, " if subject_empty else ""))
        lines.append("[san]")
        counts = {}
        for kind, value in sans:
            counts[kind] = counts.get(kind, 0) + 1
            lines.append("%s.%d = %s" % (kind, counts[kind], _conf_value(value)))
    return "\n".join(lines) + "\n"


def digest_for(key_pem):
    """The signature digest Go picks for the signing key."""
    info = key_info(key_pem)
    if info["algorithm"] == "Ed25519":
        return "default"
    if info["algorithm"] == "ECDSA":
        return {384: "sha384", 521: "sha512"}.get(info["size"], "sha256")
    return "sha512" if info["size"] >= 4096 else "sha384" if info["size"] >= 3072 else "sha256"


def sign(spec, issuer_spec, key_pem, signer_key_pem, signer_cert_pem, not_before, not_after):
    """Signs a certificate for `spec` with the openssl CLI (`openssl ca`, the
    one command that takes a validity to the second): self-signed with
    key_pem when signer_cert_pem is None. Returns the certificate PEM."""
    with tempfile.TemporaryDirectory(prefix="cert-manager-") as d:
        def path(name, content=None):
            p = os.path.join(d, name)
            if content is not None:
                with open(p, "wb") as f:
                    f.write(content if isinstance(content, bytes) else content.encode())
            return p
        subj, has_subject = subject_arg(spec)
        csr = openssl("req", "-new", "-key", path("key.pem", key_pem), "-subj", subj, "-utf8")
        serial = "%032x" % max(1, random_source.randbits(128))
        path("index.txt", "")
        path("serial", serial + "\n")
        conf = path("ca.cnf", "[ca]\ndefault_ca = cm\n[cm]\ndatabase = %s\nnew_certs_dir = %s\n"
                    "serial = %s\npolicy = anything\nunique_subject = no\nemail_in_dn = no\n"
                    "[anything]\ncommonName = optional\n" % (
                        path("index.txt"), d, path("serial")))
        ext = path("ext.cnf", extensions(spec, issuer_spec, signer_cert_pem is None,
                                         not has_subject))
        args = ["ca", "-batch", "-config", conf, "-in", path("req.csr", csr), "-out",
                path("out.crt"), "-startdate", time.strftime("%Y%m%d%H%M%SZ",
                                                             time.gmtime(not_before)),
                "-enddate", time.strftime("%Y%m%d%H%M%SZ", time.gmtime(not_after)),
                "-extfile", ext, "-extensions", "ext", "-notext", "-preserveDN", "-utf8"]
        if signer_cert_pem is None:
            args += ["-selfsign", "-keyfile", path("key.pem"), "-md", digest_for(key_pem)]
        else:
            args += ["-cert", path("ca.crt", signer_cert_pem), "-keyfile",
                     path("ca.key", signer_key_pem), "-md", digest_for(signer_key_pem)]
        openssl(*args)
        with open(path("out.crt"), "rb") as f:
            return "".join(pem_blocks(f.read())).encode()


def chain_and_ca(leaf_pem, issuer_chain_pem):
    """cert-manager's ParseSingleCertificateChain: tls.crt is the leaf and the
    issuer's chain without a self-signed root; ca.crt the root-most one."""
    certs = pem_blocks(leaf_pem) + pem_blocks(issuer_chain_pem or "")
    top = cert_info(certs[-1])
    self_signed = top["subject_dn"] == top["issuer_dn"]
    chain = certs[:-1] if self_signed and len(certs) > 1 else certs
    return "".join(chain).encode(), certs[-1].encode()
