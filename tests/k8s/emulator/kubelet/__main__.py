"""The node emulator as a program (from tests/k8s, or with it on PYTHONPATH):

    python3 -m emulator.kubelet --kubeconfig DIR/kubelet.kubeconfig \
        --state-dir DIR/node --bin-dir build/bin [--bin-dir ...]

It registers the node, prints one line `READY` on stdout and runs until
SIGTERM or SIGINT (or, with --exit-with-parent, until the process that
started it ends), then stops every container it started and cleans up.
SIGUSR1 reboots the node's machine, with a graceful node shutdown
(Kubelet.reboot).
"""
import argparse
import atexit
import os
import signal
import threading

from ..lifetime import exit_with_parent
from . import __doc__ as package_doc
from .node import Kubelet


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m emulator.kubelet",
                                description=package_doc.split("\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--log-dir", default=None, help="container logs (default STATE/logs)")
    p.add_argument("--node-name", default="kubeps-node")
    p.add_argument("--bin-dir", action="append", default=[],
                   help="where container programs are looked up by basename (repeatable)")
    p.add_argument("--image", action="append", default=[],
                   help="IMAGE=PROGRAM [ARGS]: the entrypoint of an image (repeatable)")
    p.add_argument("--missing-image", action="append", default=[],
                   help="PATTERN (fnmatch): images no registry has; pulling them fails "
                        "(ErrImagePull, then ImagePullBackOff) (repeatable)")
    p.add_argument("--pass-env", action="append", default=[],
                   help="a variable of the kubelet's environment every container gets")
    p.add_argument("--isolation", choices=["auto", "namespace", "none"], default="auto")
    p.add_argument("--host-dns", dest="host_dns", action="store_true", default=None,
                   help="also write DNS entries to the machine's /etc/hosts")
    p.add_argument("--no-host-dns", dest="host_dns", action="store_false")
    p.add_argument("--marker", default=None, help="id of this node's /etc/hosts block")
    p.add_argument("--backoff", type=float, default=1.0, help="first restart back-off, seconds")
    p.add_argument("--max-backoff", type=float, default=10.0)
    p.add_argument("--volume-sync", type=float, default=3.0,
                   help="seconds between two updates of a running pod's Secret and ConfigMap "
                        "files (the kubelet's sync period plus its cache's TTL: a minute or more)")
    p.add_argument("--shutdown-grace-period", type=float, default=10.0,
                   help="seconds a pod gets to stop when the node shuts down (SIGUSR1: the "
                        "machine reboots)")
    p.add_argument("--stream-logs", action="store_true",
                   help="copy every container's output to stderr, prefixed")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop (and clean up) when the process that started this one ends")
    args = p.parse_args(argv)
    kubelet = Kubelet(args)
    if args.exit_with_parent:
        exit_with_parent(lambda: (kubelet.shutdown(), os._exit(0)))

    def stop(signum, frame):
        kubelet.shutdown()
        os._exit(0)

    def reboot(signum, frame):
        threading.Thread(target=kubelet.reboot, daemon=True).start()

    signal.signal(signal.SIGUSR1, reboot)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    atexit.register(kubelet.shutdown)
    kubelet.run()


if __name__ == "__main__":
    main()
