"""Cluster DNS through hosts files: names of Services (headless ones to the IPs
of their ready pods, the others to their clusterIP) and of pods in a headless
Service's subdomain, written to each pod's own hosts file (isolation
"namespace") and, with --host-dns, between markers in the machine's
/etc/hosts.

A mixin of Kubelet (node.py).
"""
import fcntl
import os

from .log import log

HOSTS_FILE = "/etc/hosts"


class ClusterDns:
    def dns_records(self):
        """[(ip, [names], namespace)]"""
        records = []
        with self.lock:
            services = list(self.services.values())
        headless = {}
        for svc in services:
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            spec = svc.get("spec", {})
            names = lambda n: [n + ".%s.svc.cluster.local" % ns, n + ".%s.svc" % ns,  # noqa
                               n + "." + ns, n]
            if spec.get("clusterIP") == "None":
                headless[(ns, name)] = svc
                if spec.get("selector"):
                    for pod, w in self.ready_pods(ns, spec["selector"],
                                                  spec.get("publishNotReadyAddresses")):
                        records.append((w.ip, names(name), ns))
            elif spec.get("clusterIP"):
                records.append((spec["clusterIP"], names(name), ns))
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            sub = w.pod["spec"].get("subdomain")
            svc = headless.get((w.ns, sub)) if sub else None
            if svc is None:
                continue
            publish = svc["spec"].get("publishNotReadyAddresses")
            if not publish and not (w.phase == "Running" and all(c.ready for c in w.containers)):
                continue
            base = "%s.%s" % (w.hostname, sub)
            records.append((w.ip, [base + ".%s.svc.cluster.local" % w.ns, base + ".%s.svc" % w.ns,
                                   base + "." + w.ns, base], w.ns))
        return records

    def hosts_text(self, records, namespace=None, worker=None):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        if worker is not None:
            sub = worker.pod["spec"].get("subdomain")
            if sub:
                lines.append("%s\t%s.%s.%s.svc.cluster.local\t%s" % (
                    worker.ip, worker.hostname, sub, worker.ns, worker.hostname))
            else:
                lines.append("%s\t%s" % (worker.ip, worker.hostname))
        for ip, names, ns in records:
            if namespace is None or ns == namespace:
                lines.append("%s\t%s" % (ip, " ".join(names)))
            else:
                # other namespaces: only the qualified forms
                lines.append("%s\t%s" % (ip, " ".join(names[:3])))
        return "\n".join(lines) + "\n"

    def write_pod_hosts(self, worker, records=None):
        if self.isolation != "namespace":
            return
        if records is None:
            records = self.dns_records()
        text = self.hosts_text(records, worker.ns, worker)
        os.makedirs(os.path.dirname(worker.hosts_path), exist_ok=True)
        # in place: the file is bind-mounted, a rename would not be seen
        with open(worker.hosts_path, "a+") as f:
            f.seek(0)
            if f.read() == text:
                return
            f.seek(0)
            f.truncate()
            f.write(text)

    def write_host_hosts(self, records):
        begin, end = "# BEGIN %s\n" % self.marker, "# END %s\n" % self.marker
        block = ""
        if records is not None:
            block = begin + "".join("%s\t%s\n" % (ip, " ".join(names)) for ip, names, _ in
                                    records) + end
        try:
            with open(HOSTS_FILE, "r+") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                text = f.read()
                i = text.find(begin)
                if i >= 0:
                    j = text.find(end, i)
                    text = text[:i] + text[j + len(end):] if j >= 0 else text[:i]
                if text and not text.endswith("\n"):
                    text += "\n"
                f.seek(0)
                f.truncate()
                f.write(text + block)
                fcntl.flock(f, fcntl.LOCK_UN)
        except OSError as e:
            log("cannot update %s: %s" % (HOSTS_FILE, e))
