"""Kubeconfig files: the API server writes one per user (JSON, which is valid
YAML, so kubectl and the operator read it too); the emulator's own client
reads them back.
"""
import base64
import json
import os


# Who the operator is to the API server: its service account's user and groups.
OPERATOR_IDENTITY = ("system:serviceaccount:kubeps-system:kubeps-operator",
                     ["system:serviceaccounts", "system:serviceaccounts:kubeps-system",
                      "system:authenticated"])


def write_kubeconfig(path, server, ca_file, token, user="admin", namespace="default",
                     context="kubeps-emulator", token_file=None):
    """A kubeconfig (JSON is valid YAML) for one user with a bearer token,
    inline or (token_file) in a file that write_token_file may rotate."""
    with open(ca_file, "rb") as f:
        ca_data = base64.b64encode(f.read()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {
            "server": server, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"tokenFile": token_file} if token_file else
                   {"token": token}}],
        "contexts": [{"name": context, "context": {
            "cluster": context, "user": user, "namespace": namespace}}],
        "current-context": context,
        "preferences": {},
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, path)
    return path


def write_token_file(path, token):
    """Writes a token as the kubelet writes a projected service-account token:
    the new file replaces the old one atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(token)
    os.replace(tmp, path)


def read_kubeconfig(path):
    """Reads a kubeconfig written by write_kubeconfig (JSON). Returns
    (server, ca_pem_bytes, token)."""
    with open(path) as f:
        config = json.load(f)
    ctx_name = config["current-context"]
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
    token = user.get("token")
    if token is None and user.get("tokenFile"):
        with open(user["tokenFile"]) as f:
            token = f.read().strip()
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), token
