"""The emulated cluster's PKI: a CA and the API server's serving certificate,
made with the openssl CLI.
"""
import os
import re
import subprocess


def make_certificates(directory, hosts=("127.0.0.1", "localhost")):
    """Creates ca.crt/ca.key and a server certificate server.crt/server.key
    for `hosts` with the openssl CLI. Returns a dict of the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {n: os.path.join(directory, n) for n in ("ca.crt", "ca.key", "server.crt", "server.key")}

    def run(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", paths["ca.key"], "-out", paths["ca.crt"], "-days", "30",
        "-subj", "/CN=kubeps-emulator-ca")
    sans = ",".join(("IP:" if re.match(r"^[\d.]+$|:", h) else "DNS:") + h for h in hosts)
    ext = os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" % sans)
    csr = os.path.join(directory, "server.csr")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", paths["server.key"], "-out", csr, "-subj", "/CN=kube-apiserver")
    run("x509", "-req", "-in", csr, "-CA", paths["ca.crt"], "-CAkey", paths["ca.key"],
        "-CAcreateserial", "-out", paths["server.crt"], "-days", "30", "-extfile", ext)
    return paths
