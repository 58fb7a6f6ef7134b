"""NetworkPolicy semantics: which sources may open a connection to a pod or
a ClusterIP Service port, and the nftables table that says so. Pure
functions of a snapshot (PolicyState), so they can be tested without root;
policy_enforcer.py feeds them and applies the table.

Ingress, as Kubernetes defines it:
  * a pod is isolated for ingress when a NetworkPolicy of its namespace
    selects it (spec.podSelector, {} = every pod of the namespace) and has
    "Ingress" in policyTypes (the API server defaults policyTypes to
    ["Ingress"], plus "Egress" when there are egress rules); a pod no such
    policy selects accepts everything;
  * an isolated pod accepts a connection when any ingress rule of any policy
    selecting it allows it (rules add up, they never subtract); `ingress: []`
    or no ingress allows nothing;
  * `from` peers: podSelector (pods of the policy's namespace),
    namespaceSelector (every pod of the namespaces whose labels match; a
    namespace always carries kubernetes.io/metadata.name), both in one peer
    (those pods of those namespaces); no `from`, or an empty one, = every
    source;
  * `ports`: protocol (TCP by default), a number or a NAME (the destination
    pod's container port of that name and protocol; a name the pod lacks
    matches nothing), endPort for a range, no port = every port of the
    protocol; no `ports` = every port.
Approximations, because every pod shares the host's network namespace:
  * ipBlock: source addresses say nothing here (a loopback connection comes
    from 127.0.0.1 whoever makes it), so an ipBlock peer (cidr and except
    alike) matches every source that is not a pod of this node: the pods of
    other emulated clusters on this machine, the cluster-external sources
    ipBlock is meant for; it never matches a pod of this cluster, as on
    CNIs that do not let ipBlock select pod IPs;
  * Egress rules are stored but not enforced: a pod isolated for egress
    still reaches everything.
  * The node's own traffic (processes in no pod: the kubelet's probes, the
    API server, tests, the Service proxy) is always allowed, as on real CNIs.
  * Services: kube-proxy here is a host process, so what a CNI judges after
    kube-proxy's DNAT is judged at the ClusterIP: a pod may open a
    connection to a Service port only when every ready endpoint would let it
    in directly on the endpoint's port (any of them can be picked, round
    robin; a Service whose endpoints disagree is refused rather than let
    through now and then). A Service without endpoints is not filtered.
Denied connections are dropped (no reset), as Calico and Cilium do: the
client sees a connect timeout. Only a connection's first packet (conntrack
state new) is judged, so replies and established connections pass.
"""
from ..selector import label_selector_reqs, labels_match

INGRESS = "Ingress"


class Sources:
    """Who may open a connection: everyone (`every`), the pods of these
    net_cls classids, and/or (`outside`) sources that are no pod of this
    node (ipBlock)."""

    def __init__(self, every=False, classids=(), outside=False):
        self.every, self.classids, self.outside = every, frozenset(classids), outside

    def union(self, other):
        return Sources(self.every or other.every, self.classids | other.classids,
                       self.outside or other.outside)

    def intersect(self, other):
        if self.every:
            return other
        if other.every:
            return self
        return Sources(False, self.classids & other.classids, self.outside and other.outside)

    def empty(self):
        return not (self.every or self.classids or self.outside)


class PolicyState:
    """A snapshot: pods [(pod, ip, classid or None)] of this node,
    namespaces {name: labels}, NetworkPolicies, Services, and the classids
    of every pod cgroup of this node (those of deleted pods too)."""

    def __init__(self, pods, namespaces, policies, services, classids, ready=None):
        self.pods = pods
        self.namespaces = namespaces
        self.policies = policies
        self.services = services
        self.classids = frozenset(classids)
        self.ready = ready or (lambda pod: True)   # a Service endpoint?

    def namespace_labels(self, name):
        labels = dict(self.namespaces.get(name) or {})
        labels["kubernetes.io/metadata.name"] = name
        return labels


def _ns(obj):
    return obj["metadata"].get("namespace", "default")


def _labels(obj):
    return obj["metadata"].get("labels") or {}


def isolating_policies(state, pod):
    """The policies that select `pod` and isolate it for ingress."""
    out = []
    for pol in state.policies:
        spec = pol.get("spec") or {}
        types = spec.get("policyTypes") or [INGRESS] + (["Egress"] if spec.get("egress") else [])
        if _ns(pol) == _ns(pod) and INGRESS in types and \
                labels_match(label_selector_reqs(spec.get("podSelector")), _labels(pod)):
            out.append(pol)
    return out


def peer_sources(state, pol, peer):
    if "ipBlock" in peer:
        return Sources(outside=True)
    if "namespaceSelector" in peer:
        reqs = label_selector_reqs(peer["namespaceSelector"])
        namespaces = {n for n in set(state.namespaces) | {_ns(p) for p, _, _ in state.pods}
                      if labels_match(reqs, state.namespace_labels(n))}
    elif "podSelector" in peer:
        namespaces = {_ns(pol)}
    else:
        return Sources()   # an empty peer is invalid upstream: nothing
    pod_reqs = label_selector_reqs(peer.get("podSelector"))
    return Sources(classids={cid for p, _, cid in state.pods if cid is not None and
                             _ns(p) in namespaces and labels_match(pod_reqs, _labels(p))})


def named_port(pod, name, protocol):
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == name and p.get("protocol", "TCP") == protocol:
                return p.get("containerPort")
    return None


def rule_ports(pod, rule):
    """[(protocol, first, last)] a rule allows on `pod`: None for every
    protocol and port, first None for every port of the protocol."""
    if not rule.get("ports"):
        return [None]
    out = []
    for p in rule["ports"]:
        proto = p.get("protocol") or "TCP"
        port = p.get("port")
        if port is None:
            out.append((proto, None, None))
            continue
        if isinstance(port, str) and not port.isdigit():
            port = named_port(pod, port, proto)
            if port is None:
                continue   # the pod has no such port: nothing
            out.append((proto, port, port))
            continue
        port = int(port)
        out.append((proto, port, max(port, int(p.get("endPort") or port))))
    return out


def ingress_rules(state, pod):
    """None when `pod` is not isolated for ingress, else [(ports, Sources)]
    (ports as rule_ports gives them); an empty list allows nothing."""
    policies = isolating_policies(state, pod)
    if not policies:
        return None
    rules = []
    for pol in policies:
        for rule in (pol.get("spec") or {}).get("ingress") or []:
            peers = rule.get("from")
            if not peers:
                sources = Sources(every=True)
            else:
                sources = Sources()
                for peer in peers:
                    sources = sources.union(peer_sources(state, pol, peer))
            if sources.empty():
                continue
            ports = rule_ports(pod, rule)
            if ports:
                rules.append((ports, sources))
    return rules


def allowed_on(rules, protocol, port):
    """Who `rules` (ingress_rules) let in on protocol/port."""
    if rules is None:
        return Sources(every=True)
    out = Sources()
    for ports, sources in rules:
        if any(p is None or (p[0] == protocol and (p[1] is None or p[1] <= port <= p[2]))
               for p in ports):
            out = out.union(sources)
    return out


def service_sources(state, svc, port_spec, rules_of):
    """Who may open a connection to this Service port: what every ready
    endpoint allows on its target port; None when nothing is filtered."""
    selector = (svc.get("spec") or {}).get("selector")
    if not selector:
        return None
    target = port_spec.get("targetPort", port_spec.get("port"))
    protocol = port_spec.get("protocol", "TCP")
    allowed = None
    for pod, _, _ in state.pods:
        if _ns(pod) != _ns(svc) or not state.ready(pod) or \
                not labels_match(label_selector_reqs({"matchLabels": selector}), _labels(pod)):
            continue
        port = target if isinstance(target, int) else \
            int(target) if str(target).isdigit() else named_port(pod, target, protocol)
        if port is None:
            continue
        here = allowed_on(rules_of(pod), protocol, port)
        allowed = here if allowed is None else allowed.intersect(here)
    return None if allowed is None or allowed.every else allowed


def _ports_match(p):
    if p is None:
        return ""
    proto, first, last = p
    text = "meta l4proto %s " % proto.lower()
    if first is not None:
        text += "th dport %d " % first if first == last else "th dport %d-%d " % (first, last)
    return text


def _cgroups(classids):
    return "{ %s }" % ", ".join("0x%08x" % c for c in sorted(classids))


def _accepts(state, ports, sources):
    """nft rules (without the chain) that accept `sources` on `ports`."""
    lines = []
    for p in ports:
        match = _ports_match(p)
        if sources.every:
            lines.append(match + "accept")
            continue
        if sources.classids:
            lines.append(match + "meta cgroup %s accept" % _cgroups(sources.classids))
        if sources.outside:
            lines.append(match + ("meta cgroup != %s accept" % _cgroups(state.classids)
                                  if state.classids else "accept"))
    return lines


def render(table, state):
    """The whole table (nft -f syntax) for this snapshot: one chain per
    isolated pod and per filtered Service port, reached from the output
    hook by destination."""
    dispatch, chains = [], []
    rules_cache = {}

    def rules_of(pod):
        uid = pod["metadata"]["uid"]
        if uid not in rules_cache:
            rules_cache[uid] = ingress_rules(state, pod)
        return rules_cache[uid]

    for pod, ip, _ in sorted(state.pods, key=lambda e: e[1] or ""):
        rules = rules_of(pod)
        if rules is None or not ip:
            continue
        name = "pod_%s" % ip.replace(".", "_")
        body = ["# %s/%s" % (_ns(pod), pod["metadata"]["name"])]
        for ports, sources in rules:
            body += _accepts(state, ports, sources)
        chains.append((name, body + ["drop"]))
        dispatch.append("ip daddr %s jump %s" % (ip, name))
    for svc in sorted(state.services, key=lambda s: (_ns(s), s["metadata"]["name"])):
        ip = (svc.get("spec") or {}).get("clusterIP")
        if not ip or ip == "None":
            continue
        for p in svc["spec"].get("ports") or []:
            sources = service_sources(state, svc, p, rules_of)
            if sources is None:
                continue
            proto = p.get("protocol", "TCP")
            name = "svc_%s_%d" % (ip.replace(".", "_"), p["port"])
            body = ["# service %s/%s port %d" % (_ns(svc), svc["metadata"]["name"], p["port"])]
            chains.append((name, body + _accepts(state, [None], sources) + ["drop"]))
            dispatch.append("ip daddr %s %sjump %s" % (ip, _ports_match((proto, p["port"],
                                                                        p["port"])), name))
    out = ["table inet %s {" % table,
           "  chain output {",
           "    type filter hook output priority 0; policy accept;",
           "    ct state != new accept",
           "    meta cgroup 0 accept"]
    out += ["    " + line for line in dispatch]
    out.append("  }")
    for name, body in chains:
        out.append("  chain %s {" % name)
        out += ["    " + line for line in body]
        out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"
