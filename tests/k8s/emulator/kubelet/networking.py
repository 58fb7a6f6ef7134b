"""Pod networking: one loopback address per pod (127.X.0.N), the ready
endpoints of a Service, the kube-proxy listeners of ClusterIP Services, and
the loop that keeps the hosts files (dns.py) and the proxies in step with the
pods and Services.

A mixin of Kubelet (node.py).
"""
from ..selector import labels_match, selector_from_match_labels
from .log import log
from .service_proxy import ServiceProxy


class Networking:
    # A CNI's IPAM (host-local) hands out the next address after the last one
    # it gave, not the one just freed: a pod made again (a restarted
    # scheduler) comes back with a new IP, and an address whose old owner may
    # still be tearing down is not handed to a new pod at once. Freed
    # addresses are taken again only when the range is used up.
    IPS_PER_NODE = 254 * 254

    def allocate_ip(self, uid):
        with self.lock:
            if uid in self.ips:
                return self.ips[uid]
            if self.next_ip < self.IPS_PER_NODE:
                n = self.next_ip
                self.next_ip += 1
                ip = "127.%d.%d.%d" % (self.pod_octet, n // 254, n % 254 + 1)
            elif self.free_ips:
                ip = self.free_ips.pop(0)
            else:
                raise RuntimeError("no pod IP left on node %s" % self.node_name)
            self.ips[uid] = ip
            return ip

    def ready_pods(self, ns, selector, not_ready_too=False):
        out = []
        with self.lock:
            for uid, pod in self.pods.items():
                w = self.workers.get(uid)
                if w is None or pod["metadata"]["namespace"] != ns:
                    continue
                if not labels_match(selector_from_match_labels(selector),
                                    pod["metadata"].get("labels")):
                    continue
                ready = w.phase == "Running" and w.containers and all(c.ready for c in w.containers)
                if (ready or not_ready_too) and not w.deleting and \
                        w.phase not in ("Succeeded", "Failed"):
                    out.append((pod, w))
        return out

    def endpoints(self, key, port_spec):
        svc = self.services.get(key)
        if not svc or not svc["spec"].get("selector"):
            return []
        target = port_spec.get("targetPort", port_spec.get("port"))
        out = []
        for pod, w in self.ready_pods(key[0], svc["spec"]["selector"]):
            if isinstance(target, int):
                out.append((w.ip, target))
            else:
                for c in pod["spec"].get("containers", []):
                    for p in c.get("ports", []):
                        if p.get("name") == target:
                            out.append((w.ip, p["containerPort"]))
        return out

    def sync_proxies(self):
        wanted = {}
        with self.lock:
            for key, svc in self.services.items():
                ip = svc.get("spec", {}).get("clusterIP")
                if not ip or ip == "None" or not ip.startswith("127."):
                    continue
                for p in svc["spec"].get("ports", []):
                    if p.get("protocol", "TCP") == "TCP":
                        wanted[(ip, p["port"])] = (key, p)
        for k in list(self.proxies):
            if k not in wanted:
                self.proxies.pop(k).close()
        for k, (key, p) in wanted.items():
            if k in self.proxies:
                self.proxies[k].port_spec = p
                self.proxies[k].key = key
                continue
            try:
                self.proxies[k] = ServiceProxy(self, k[0], k[1], key, p)
            except OSError as e:
                log("proxy %s:%d: %s" % (k[0], k[1], e))

    def dns_loop(self):
        last = None
        while not self.stopping:
            self.dns_dirty.wait(0.5)
            self.dns_dirty.clear()
            records = self.dns_records()
            with self.lock:
                workers = list(self.workers.values())
            for w in workers:
                try:
                    self.write_pod_hosts(w, records)
                except OSError as e:
                    log("hosts for %s: %s" % (w.key, e))
            if self.host_dns and records != last:
                self.write_host_hosts(records)
            last = records
            self.sync_proxies()
