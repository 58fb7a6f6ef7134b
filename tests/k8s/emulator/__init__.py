"""The Kubernetes stand-in of the tests: an API server and a kubelet that
the real `kubectl` and kubeps-operator talk to as to a one-node cluster,
Python standard library only.

    from emulator.cluster import Cluster        (tests/k8s on sys.path)
    with Cluster(bin_dirs=["build/bin"]) as c:
        c.kubectl("apply", "-f", "deploy/crd/")

Subpackages, each also a program (python3 -m emulator.apiserver ...):
  apiserver/          the API server: store, verbs, CRDs, watch, RBAC...
  kubelet/            the node: pods as local processes, volumes, probes,
                      pod IPs, Service DNS and proxies

Shared modules:
  cluster.py          both as child processes, and kubectl pointed at them
                      (python3 -m emulator.cluster runs one by hand)
  client.py           a small REST client of the API server
  kubeconfig.py       kubeconfig files, written and read
  selector.py         label and field selectors
  patches.py          merge, JSON and strategic merge patches
  clock.py            timestamps and ages
  http_server.py      the threading TLS server and streaming request handler
  lifetime.py         ending with the process that started us
  tls_echo_server.py  fixed HTTPS answers for the C++ client's unit test
"""
