"""The API server emulator as a program (from tests/k8s, or with it on
PYTHONPATH):

    python3 -m emulator.apiserver --dir DIR [--port 0] [--host 127.0.0.1]

It creates a CA and a serving certificate in DIR (openssl CLI), serves HTTPS
(HTTP/1.1) and writes DIR/kubeconfig (cluster-admin token), DIR/kubelet.kubeconfig
and DIR/operator.kubeconfig (the service account kubeps-system/kubeps-operator,
subject to RBAC when --rbac is given), then prints one line
`READY https://127.0.0.1:PORT` on stdout.
"""
import argparse
import base64
import os
import ssl

from ..http_server import ThreadingTLSServer
from ..kubeconfig import OPERATOR_IDENTITY, write_kubeconfig, write_token_file
from ..lifetime import exit_with_parent
from . import __doc__ as package_doc
from .api import Api
from .certificates import make_certificates
from .routing import Handler


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m emulator.apiserver",
                                description=package_doc.split("\n")[0])
    p.add_argument("--dir", required=True, help="where certificates and kubeconfigs go")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token", default=None, help="the admin token (random when not given)")
    p.add_argument("--event-window", type=int, default=1000,
                   help="how many changes are kept for watches (older: 410 Gone)")
    p.add_argument("--bookmark-interval", type=float, default=5.0)
    p.add_argument("--service-cidr", default="127.1.0.0/16",
                   help="where ClusterIPs come from (the kubelet emulator proxies them on "
                   "loopback)")
    p.add_argument("--log-dir", default=None, help="the kubelet's container log folder, for "
                   "pods/log")
    p.add_argument("--rbac", action="store_true",
                   help="authorise non-admin tokens with the stored RBAC objects")
    p.add_argument("--verbose", "-v", action="store_true")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit when the process that started this one ends")
    args = p.parse_args(argv)
    if args.exit_with_parent:
        exit_with_parent(lambda: os._exit(0))
    args.port_hint = args.port
    os.makedirs(args.dir, exist_ok=True)
    paths = make_certificates(os.path.join(args.dir, "pki"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["server.crt"], paths["server.key"])
    api = Api(args)
    Handler.api = api
    server = ThreadingTLSServer((args.host, args.port), Handler, ctx)
    port = server.server_address[1]
    url = "https://%s:%d" % (args.host, port)

    def tok():
        return base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")

    admin = args.token or tok()
    kubelet_token, operator_token = tok(), tok()
    api.tokens[admin] = ("kubernetes-admin", ["system:masters", "system:authenticated"])
    api.tokens[kubelet_token] = ("system:node:kubeps-node", ["system:nodes", "system:masters",
                                                             "system:authenticated"])
    api.tokens[operator_token] = OPERATOR_IDENTITY
    write_kubeconfig(os.path.join(args.dir, "kubelet.kubeconfig"), url, paths["ca.crt"],
                     kubelet_token, user="kubelet")
    # The operator reads its token from a file, as it reads a projected
    # service-account token in a pod, so that tests can rotate it.
    operator_token_file = os.path.join(args.dir, "operator-token", "token")
    write_token_file(operator_token_file, operator_token)
    write_kubeconfig(os.path.join(args.dir, "operator.kubeconfig"), url, paths["ca.crt"],
                     operator_token, user="kubeps-operator", namespace="kubeps-system",
                     token_file=operator_token_file)
    write_kubeconfig(os.path.join(args.dir, "kubeconfig"), url, paths["ca.crt"], admin)
    with open(os.path.join(args.dir, "apiserver.url"), "w") as f:
        f.write(url + "\n")
    print("READY %s" % url, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
