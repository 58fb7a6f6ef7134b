"""The API proper: the table of served resource types and the REST verbs
(create, update, patch, delete, pods/binding) over the store, with the
semantics kubectl and a controller rely on: resourceVersion preconditions and
409s, generation bumps, no-op updates that write nothing, the status
subresource, dryRun, finalizers and graceful pod deletion.

Type-specific admission, CRDs, the scale subresource of custom resources
and garbage collection are mixins of Api, in admission.py, crds.py, scale.py
and garbage_collector.py.
"""
import collections
import copy
import datetime
import ipaddress
import json
import random
import re
import string
import threading
import time

from .. import patches
from ..clock import now_iso
from .admission import Admission
from .crds import CustomResources
from .eviction import Evictions
from .errors import ApiError, conflict, invalid, not_found, status_success
from .flow_control import FlowControl
from .node_lifecycle import NodeLifecycle
from .garbage_collector import GarbageCollector
from .resources import builtin_types
from .scale import ScaleSubresource
from .store import Store
from . import resource_quota, validation


def _strip_for_compare(obj):
    """`obj` without what changes on every write: an update equal to the
    stored object once both are stripped writes nothing."""
    o = copy.deepcopy(obj)
    md = o.get("metadata", {})
    for k in ("resourceVersion", "managedFields"):
        md.pop(k, None)
    return o


def _content_without(obj, *keys):
    """`obj` without metadata and `keys`: what a generation bump compares."""
    return {k: v for k, v in obj.items() if k not in ("metadata",) + keys}


class Api(Admission, CustomResources, Evictions, GarbageCollector, NodeLifecycle,
          ScaleSubresource):
    """The emulated cluster's API: what the HTTP handler (routing.py) calls."""

    def __init__(self, args):
        self.args = args
        self.store = Store(args.event_window)
        self.tokens = {}    # token -> (user, groups)
        self.token_expiry = {}  # token -> time.time() after which it is refused (401)
        self.cut_off_users = set()  # kubelets of NotReady nodes (node_lifecycle.py)
        self.not_ready_since = {}   # node name -> when it went NotReady
        # Realism settings (also /_emulator/settings): seconds between a
        # write's response and its watch event, per resource plural; seconds
        # between an owner's deletion and its dependents'.
        self.watch_delays = dict(getattr(args, "watch_delay", None) or {})
        self.gc_delay = getattr(args, "gc_delay", 0.05)
        # With RBAC, blockOwnerDeletion needs `update` on the owner's
        # finalizers, as OpenShift's admission enforces.
        self.owner_references_enforcement = bool(getattr(args, "rbac", False))
        self.flow_control = FlowControl()   # 429s, when a test turns them on
        self.store.after_put = self._after_put
        self.rbac = args.rbac
        self.requests = collections.deque(maxlen=2000)
        self.requests_logged = 0   # the seq of the last request logged
        self.crd_types = {}   # crd name -> [ResourceType]
        self.served = {}      # (group, version, plural) -> ResourceType
        for t in builtin_types():
            self.register(t)
        net = ipaddress.ip_network(args.service_cidr)
        self.service_ips = (str(ip) for ip in net.hosts())
        self.used_service_ips = set()
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self._system_create(self.served[("", "v1", "namespaces")],
                                {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]},
                                 "status": {"phase": "Active"}})
        self._system_create(self.served[("", "v1", "services")], {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                "targetPort": args.port_hint or 6443}]}})
        threading.Thread(target=self._gc_loop, daemon=True).start()
        threading.Thread(target=self._bookmark_loop, daemon=True).start()

    # -- registry


    def log_request(self, entry):
        """Logs a finished request with its sequence number (as an audit log's
        ResponseComplete stage); handler threads log one at a time."""
        with self.store.lock:
            self.requests_logged += 1
            entry["seq"] = self.requests_logged
            self.requests.append(entry)
    def _after_put(self, rtype, obj):
        """A ResourceQuota or what it counts changed: the namespace's quota usage follows."""
        if rtype.group == "" and rtype.plural in resource_quota.COUNTED_PLURALS + ["resourcequotas"]:
            resource_quota.refresh_status(self, obj["metadata"].get("namespace", ""))

    def register(self, rtype):
        self.served[(rtype.group, rtype.version, rtype.plural)] = rtype
        self.store.types.setdefault(rtype.key, rtype)

    def groups(self):
        out = collections.OrderedDict()
        for (g, v, _), t in self.served.items():
            out.setdefault(g, [])
            if v not in out[g]:
                out[g].append(v)
        return out

    def find_type(self, group, version, plural):
        t = self.served.get((group, version, plural))
        if t is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return t

    # -- helpers

    def _system_create(self, rtype, obj):
        self.prepare_create(rtype, obj, obj["metadata"].get("namespace", ""))
        self.store.put(rtype, obj, "ADDED")

    # -- verbs

    def create(self, rtype, namespace, body, query, warnings, user):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
        obj = copy.deepcopy(body)
        self._check_kind(rtype, obj)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if rtype.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not "
                               "match the namespace sent on the request")
        if not md.get("name"):
            if md.get("generateName"):
                md["name"] = md["generateName"] + "".join(
                    random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
            else:
                raise invalid(rtype, "", [("metadata.name", "FieldValueRequired",
                                           "Required value: name or generateName is "
                                           "required")])
        name = md["name"]
        if not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name) or len(name) > 253:
            raise invalid(rtype, name, [("metadata.name", "FieldValueInvalid",
                                         'Invalid value: "%s": a lowercase RFC 1123 subdomain '
                                         "must consist of lower case alphanumeric characters, "
                                         "'-' or '.', and must start and end with an "
                                         "alphanumeric character" % name)])
        with self.store.lock:
            if rtype.namespaced:
                ns_type = self.served[("", "v1", "namespaces")]
                ns_obj = self.store.get(ns_type, "", namespace)
                if ns_obj is None:
                    raise ApiError(404, "NotFound", 'namespaces "%s" not found' % namespace,
                                   {"name": namespace, "kind": "namespaces"})
                if ns_obj["metadata"].get("deletionTimestamp"):
                    raise ApiError(403, "Forbidden", 'unable to create new content in namespace %s '
                                   'because it is being terminated' % namespace)
            if rtype.crd is not None:
                self.validate_custom(rtype, obj, self._field_validation(query), warnings, name)
            validation.validate(rtype, obj)
            if rtype.key == ("", "resourcequotas"):
                resource_quota.check(obj)
            self.prepare_create(rtype, obj, namespace)
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._crd_established(obj)
            if (rtype.group, rtype.plural) == ("", "pods"):
                self._admit_pod(obj, namespace)
            elif rtype.group == "" and rtype.plural in resource_quota.COUNTED_PLURALS:
                resource_quota.admit(self, obj, namespace, rtype.plural)
            # As the real server: validation and admission (quota too) come
            # before storage finds the name taken.
            if self.store.get(rtype, namespace if rtype.namespaced else "", name) is not None:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (
                    rtype.qualified, name), {"name": name, "group": rtype.group,
                                             "kind": rtype.plural})
            obj["apiVersion"], obj["kind"] = rtype.gv, rtype.kind
            if self._dry_run(query):
                obj["metadata"]["resourceVersion"] = ""
                return obj
            self.store.put(rtype, obj, "ADDED")
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self.install_crd(obj)
            return obj

    @staticmethod
    def _field_validation(query):
        return query.get("fieldValidation", "Warn")

    @staticmethod
    def _dry_run(query):
        return query.get("dryRun") == "All"

    @staticmethod
    def _check_kind(rtype, obj):
        if obj.get("kind") and obj["kind"] != rtype.kind:
            raise ApiError(400, "BadRequest", "the API version in the data (%s) does not match the "
                           "expected API version (%s)" % (obj.get("apiVersion"), rtype.gv)
                           if obj.get("apiVersion") != rtype.gv else
                           "kind %s does not match expected %s" % (obj["kind"], rtype.kind))
        if obj.get("apiVersion") and obj["apiVersion"] != rtype.gv:
            raise ApiError(400, "BadRequest", "the API version in the data (%s) does not match the "
                           "expected API version (%s)" % (obj["apiVersion"], rtype.gv))

    def update(self, rtype, namespace, name, body, query, warnings, subresource=None,
               from_patch=False, create_if_missing=False, user=None):
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request was not a JSON object")
        new = copy.deepcopy(body)
        self._check_kind(rtype, new)
        md = new.setdefault("metadata", {})
        ns = namespace if rtype.namespaced else ""
        if md.get("name") and md["name"] != name:
            raise ApiError(400, "BadRequest", "the name of the object (%s) does not match the name "
                           "on the URL (%s)" % (md["name"], name))
        if rtype.namespaced and md.get("namespace") and md["namespace"] != namespace:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                           "the namespace sent on the request")
        with self.store.lock:
            old = self.store.get(rtype, ns, name)
            if old is None:
                if create_if_missing:
                    md["name"] = name
                    return self.create(rtype, namespace, new, query, warnings, user), True
                raise not_found(rtype, name)
            rv = md.get("resourceVersion")
            if rv:
                if rv != old["metadata"]["resourceVersion"]:
                    raise conflict(rtype, name)
            elif not rtype.allow_unconditional_update and not from_patch:
                raise invalid(rtype, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                             "Invalid value: 0x0: must be specified for an "
                                             "update")])
            if md.get("uid") and md["uid"] != old["metadata"]["uid"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": '
                               'Precondition failed: UID in precondition: %s, UID in object meta: '
                               '%s' % (rtype.qualified, name, md["uid"], old["metadata"]["uid"]))
            if subresource == "status":
                merged = copy.deepcopy(old)
                if "status" in new:
                    merged["status"] = new["status"]
                else:
                    merged.pop("status", None)
                # metadata changes through /status are ignored except labels/annotations
                new = merged
            else:
                if rtype.status:
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                omd = old["metadata"]
                for k in ("uid", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "generation"):
                    if k in omd:
                        md[k] = omd[k]
                    else:
                        md.pop(k, None)
                md["name"] = name
                if rtype.namespaced:
                    md["namespace"] = namespace
                if (rtype.group, rtype.plural) == ("", "secrets"):
                    self._fold_string_data(new)
                if (rtype.group, rtype.plural) == ("", "pods"):
                    self._check_pod_update(rtype, old, new)
                if rtype.key == ("networking.k8s.io", "networkpolicies"):
                    self._default_network_policy(new)
                if (rtype.group, rtype.plural) == ("", "services"):
                    spec = new.setdefault("spec", {})
                    ospec = old.get("spec", {})
                    if spec.get("clusterIP") in (None, ""):
                        spec["clusterIP"] = ospec.get("clusterIP")
                        spec["clusterIPs"] = ospec.get("clusterIPs")
                    elif spec["clusterIP"] != ospec.get("clusterIP"):
                        raise invalid(rtype, name, [("spec.clusterIPs[0]", "FieldValueInvalid",
                                                     "Invalid value: []string{%s}: may not "
                                                     "change once set" % json.dumps(
                                                         spec["clusterIP"]))])
                if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                    self._check_crd(new)
            new["apiVersion"], new["kind"] = rtype.gv, rtype.kind
            if rtype.crd is not None:
                self.validate_custom(rtype, new, self._field_validation(query), warnings, name,
                                     old=old)
            validation.validate(rtype, new)
            if _strip_for_compare(new) == _strip_for_compare(old):
                return old, False
            if subresource != "status":
                if _content_without(new, "status") != _content_without(old, "status"):
                    new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            if self._dry_run(query):
                return new, False
            if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers") \
                    and not self._graceful_pending(rtype, new):
                self.store.put(rtype, new, "DELETED", old)
                self.store.gc_queue.put(new["metadata"]["uid"])
                return new, False
            self.store.put(rtype, new, "MODIFIED", old)
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self.install_crd(new)
            return new, False

    def _graceful_pending(self, rtype, obj):
        return (rtype.group, rtype.plural) == ("", "pods") and \
            obj["metadata"].get("deletionGracePeriodSeconds", 0) > 0

    def patch(self, rtype, namespace, name, content_type, raw, query, warnings, subresource=None,
              user=None):
        ctype = content_type.split(";")[0].strip()
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise ApiError(400, "BadRequest", "error decoding patch: %s" % e)
        ns = namespace if rtype.namespaced else ""
        with self.store.lock:
            old = self.store.get(rtype, ns, name)
            if ctype == "application/apply-patch+yaml":
                if old is None:
                    if subresource:
                        raise not_found(rtype, name)
                    obj, _ = self.update(rtype, namespace, name, patch, query, warnings,
                                         from_patch=True, create_if_missing=True, user=user)
                    return obj, True
                patched = patches.json_merge_patch(old, patch)
            else:
                if old is None:
                    raise not_found(rtype, name)
                if ctype == "application/merge-patch+json" or ctype == "application/json" and \
                        isinstance(patch, dict):
                    patched = patches.json_merge_patch(old, patch)
                elif ctype == "application/json-patch+json":
                    try:
                        patched = patches.json_patch(old, patch)
                    except (patches.PatchError, KeyError, ValueError, TypeError) as e:
                        raise ApiError(422, "Invalid", str(e))
                elif ctype == "application/strategic-merge-patch+json":
                    if rtype.crd is not None:
                        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in "
                                       "an unknown format - accepted media types include: "
                                       "application/json-patch+json, application/merge-patch+json, "
                                       "application/apply-patch+yaml")
                    patched = patches.strategic_merge_patch(old, patch)
                else:
                    raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                                   "unknown format - accepted media types include: "
                                   "application/json-patch+json, application/merge-patch+json, "
                                   "application/apply-patch+yaml" + (
                                       ", application/strategic-merge-patch+json"
                                       if rtype.crd is None else ""))
            if not isinstance(patched, dict):
                raise ApiError(422, "Invalid", "the patched object is not an object")
            obj, _ = self.update(rtype, namespace, name, patched, query, warnings,
                                 subresource=subresource, from_patch=True, user=user)
            return obj, False

    def delete(self, rtype, namespace, name, options, query):
        ns = namespace if rtype.namespaced else ""
        with self.store.lock:
            old = self.store.get(rtype, ns, name)
            if old is None:
                raise not_found(rtype, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": '
                               'Precondition failed: UID in precondition: %s, UID in object meta: '
                               '%s' % (rtype.qualified, name, pre["uid"], old["metadata"]["uid"]))
            if pre.get("resourceVersion") and pre["resourceVersion"] != \
                    old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": '
                               'Precondition failed: ResourceVersion in precondition: %s, '
                               'ResourceVersion in object meta: %s' % (
                                   rtype.qualified, name, pre["resourceVersion"],
                                   old["metadata"]["resourceVersion"]))
            if self._dry_run(query) or "All" in (options.get("dryRun") or []):
                return old
            policy = options.get("propagationPolicy") or query.get("propagationPolicy")
            if options.get("orphanDependents") is True:
                policy = "Orphan"
            grace = options.get("gracePeriodSeconds")
            if grace is None and "gracePeriodSeconds" in query:
                grace = int(query["gracePeriodSeconds"])
            obj = copy.deepcopy(old)
            md = obj["metadata"]
            # graceful deletion of a pod bound to a node that may still run it
            if (rtype.group, rtype.plural) == ("", "pods"):
                if grace is None:
                    grace = obj["spec"].get("terminationGracePeriodSeconds", 30)
                phase = obj.get("status", {}).get("phase")
                if not obj["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
                    grace = 0
                if grace > 0:
                    current = md.get("deletionGracePeriodSeconds")
                    if md.get("deletionTimestamp") and current is not None and current <= grace:
                        return old
                    md["deletionTimestamp"] = datetime.datetime.fromtimestamp(
                        time.time() + grace, datetime.timezone.utc).strftime(
                            "%Y-%m-%dT%H:%M:%SZ")
                    md["deletionGracePeriodSeconds"] = grace
                    if policy == "Orphan":
                        self._orphan(old["metadata"]["uid"])
                    self.store.put(rtype, obj, "MODIFIED", old)
                    return obj
                md["deletionGracePeriodSeconds"] = 0
            if md.get("finalizers"):
                if md.get("deletionTimestamp"):
                    return old
                md["deletionTimestamp"] = now_iso()
                md.setdefault("deletionGracePeriodSeconds", 0)
                self.store.put(rtype, obj, "MODIFIED", old)
                return obj
            if policy == "Orphan":
                self._orphan(old["metadata"]["uid"])
            md.setdefault("deletionTimestamp", now_iso())
            self.store.put(rtype, obj, "DELETED", old)
            self.store.gc_queue.put(md["uid"])
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self.uninstall_crd(name)
            if (rtype.group, rtype.plural) == ("", "services"):
                self.used_service_ips.discard(obj.get("spec", {}).get("clusterIP"))
            if (rtype.group, rtype.plural) == ("", "namespaces"):
                self._delete_namespace_content(name)
            return obj

    def _bookmark_loop(self):
        while True:
            time.sleep(self.args.bookmark_interval)
            self.send_bookmarks()

    def send_bookmarks(self):
        with self.store.lock:
            for w in list(self.store.watchers):
                if w.bookmarks:
                    w.q.put(("BOOKMARK", self.store.rv))

    def bind(self, namespace, name, body):
        t = self.served[("", "v1", "pods")]
        with self.store.lock:
            old = self.store.get(t, namespace, name)
            if old is None:
                raise not_found(t, name)
            if old["spec"].get("nodeName"):
                raise ApiError(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "%s":'
                               ' pod %s is already assigned to node "%s"' % (
                                   name, name, old["spec"]["nodeName"]))
            new = copy.deepcopy(old)
            new["spec"]["nodeName"] = (body.get("target") or {}).get("name")
            conds = new.setdefault("status", {}).setdefault("conditions", [])
            conds.append({"type": "PodScheduled", "status": "True",
                          "lastTransitionTime": now_iso(), "lastProbeTime": None})
            self.store.put(t, new, "MODIFIED", old)
            return status_success()
