#!/usr/bin/env python3
"""A Kubernetes API server emulator for tests: the REST semantics that the
real `kubectl` and a controller rely on, in one process, in memory.

    python3 tests/k8s/apiserver.py --dir DIR [--port 0] [--host 127.0.0.1]

It creates a CA and a serving certificate in DIR (openssl CLI), serves HTTPS
(HTTP/1.1) and writes DIR/kubeconfig (cluster-admin token), DIR/kubelet.kubeconfig
and DIR/operator.kubeconfig (the service account kubeps-system/kubeps-operator,
subject to RBAC when --rbac is given), then prints one line
`READY https://127.0.0.1:PORT` on stdout.

What is emulated
  * discovery: /version, /api, /api/v1, /apis, /apis/G/V (legacy JSON; the
    aggregated-discovery Accept types are answered with plain JSON, which
    client-go accepts and falls back on), /openapi/v2 (an empty protobuf
    document: kubectl then skips client-side validation and leaves field
    validation to this server), /openapi/v3 (a root that lists no group
    versions: kubectl falls back to its compiled-in strategic-merge types).
  * resources: core/v1 pods (+status, binding, log), services (+status),
    secrets, configmaps, events, namespaces (+status), serviceaccounts,
    endpoints, nodes (+status); apps/v1 deployments, statefulsets, replicasets
    (stored only, nothing runs them); coordination.k8s.io/v1 leases;
    rbac.authorization.k8s.io/v1 (cluster)roles and (cluster)rolebindings;
    scheduling.k8s.io/v1 priorityclasses; apiextensions.k8s.io/v1
    customresourcedefinitions; and every served version of every registered
    CRD (dynamic, appears in discovery at once).
  * metadata: uid, resourceVersion (one global counter, as in etcd),
    generation (bumped when anything but metadata/status changes),
    creationTimestamp, deletionTimestamp/deletionGracePeriodSeconds,
    generateName, finalizers (deletion waits for them to be removed).
  * create/get/list/update/patch/delete/deletecollection, dryRun=All.
    PUT with a stale metadata.resourceVersion -> 409 Conflict; PUT without one
    is unconditional for built-ins and 422 for custom resources (as upstream).
    An update that changes nothing is not written (no new resourceVersion,
    no watch event).
  * PATCH: merge-patch+json, json-patch+json, strategic-merge-patch+json for
    built-in types (see patches.strategic_merge_patch for the covered subset;
    custom resources answer 415 like the real server), apply-patch+yaml
    (server-side apply, simplified: the applied object is merged like a merge
    patch and created when missing; no field managers, JSON bodies only).
  * list/watch: labelSelector (=, ==, !=, in, notin, exists, !key),
    fieldSelector (any dotted field path, =, ==, !=), resourceVersion,
    resourceVersionMatch, watch=1 (newline-delimited JSON events, chunked),
    allowWatchBookmarks (BOOKMARK every --bookmark-interval seconds and on
    request), sendInitialEvents (initial-events-end bookmark), timeoutSeconds.
    The last --event-window changes are kept; a watch from an older
    resourceVersion gets an ERROR event with a Status of code 410 (reason
    Expired), as the watch cache does; a list with resourceVersionMatch=Exact
    gets HTTP 410.
  * status subresource: for pods, services, nodes, namespaces and CRs that
    enable it, writes to /status change only .status and writes to the main
    resource never change .status (creation drops it for CRs).
  * CRDs: structural checks (type required, properties and additionalProperties
    mutually exclusive, metadata.name = plural.group), Established condition,
    per-request pruning, defaulting and validation against openAPIV3Schema
    (type, enum, minimum/maximum with exclusive bounds, min/maxLength,
    pattern, min/maxItems, required, nullable, additionalProperties,
    x-kubernetes-preserve-unknown-fields). Unknown fields are pruned; with
    fieldValidation=Strict (kubectl's default) they are rejected with 400
    `strict decoding error: unknown field "spec.x"`, with Warn they come back
    as Warning headers. Invalid objects get 422 with details.causes[].
    Deleting a CRD deletes its objects.
  * Tables (Accept: application/json;as=Table;g=meta.k8s.io;v=v1): printer
    columns of CRDs (simple JSONPath), and kubectl-like columns for pods,
    services, namespaces, events, nodes; Name/Age for the rest; also on watch.
  * pods: defaults (restartPolicy Always, terminationGracePeriodSeconds 30,
    schedulerName default-scheduler, dnsPolicy, enableServiceLinks, image pull
    policy, phase Pending); graceful deletion: a pod bound to a node (spec.nodeName)
    and not finished gets deletionTimestamp and stays until the kubelet deletes
    it with gracePeriodSeconds=0; pods/log reads the log files that
    kubelet.py writes under --log-dir (follow, previous, tailLines,
    container); services get a clusterIP from --service-cidr (or keep None).
    secrets: stringData is folded into data.
  * ownerReferences garbage collection: when an object goes away, every
    object whose ownerReferences all point at objects that are gone is
    deleted (background propagation; Orphan removes the references;
    Foreground is treated as Background), recursively.
  * authentication with bearer tokens (401 otherwise); with --rbac, requests
    of service-account tokens are authorised against the stored
    (Cluster)Role(Binding)s (403 with the upstream message otherwise).

Test hooks (POST, admin token required):
  /_emulator/compact        forget every change so far: any watch or exact
                            list from an older resourceVersion gets 410 Gone
  /_emulator/cut-watches    end every open watch stream (?mode=abort drops the
                            TCP connection without the final chunk)
  /_emulator/bookmark       send a BOOKMARK now on every watch that allows them
  /_emulator/token          body {"token":..., "user":..., "groups":[...]}
                            adds a bearer token
  GET /_emulator/requests   the last 2000 requests: [{verb, path, code, user}]
  GET /_emulator/healthz    "ok" (also /healthz, /readyz, /livez)
"""
import argparse
import base64
import collections
import copy
import datetime
import http.server
import ipaddress
import json
import os
import queue
import random
import re
import socket
import socketserver
import ssl
import string
import sys
import threading
import time
import urllib.parse
import uuid

from . import certificates, kubeconfig, lifetime, patches, protobuf, selector
from .clock import now_iso
from .crd_schema import go_value, prune_and_default, validate_schema, check_structural
from .tables import table_for, wants_table

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-kubeps-emulator",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
    "platform": "linux/amd64",
}

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def status_success(details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        s["details"] = details
    return s


# --------------------------------------------------------------------------
# Resource types


class ResourceType:
    def __init__(self, group, version, plural, kind, namespaced=True, singular=None,
                 short_names=(), categories=(), status=False, subresources=(),
                 verbs=None, schema=None, printer_columns=None, crd=None,
                 allow_unconditional_update=True):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced = namespaced
        self.singular = singular or kind.lower()
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.status = status
        self.subresources = list(subresources)
        self.verbs = verbs or list(ALL_VERBS)
        self.schema = schema
        self.printer_columns = printer_columns
        self.crd = crd
        self.allow_unconditional_update = allow_unconditional_update

    @property
    def gv(self):
        return self.group + "/" + self.version if self.group else self.version

    @property
    def key(self):
        return (self.group, self.plural)

    @property
    def qualified(self):
        return self.plural + ("." + self.group if self.group else "")

    def discovery(self):
        out = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                "kind": self.kind, "verbs": self.verbs}]
        if self.short_names:
            out[0]["shortNames"] = self.short_names
        if self.categories:
            out[0]["categories"] = self.categories
        if self.status:
            out.append({"name": self.plural + "/status", "singularName": "",
                        "namespaced": self.namespaced, "kind": self.kind,
                        "verbs": ["get", "patch", "update"]})
        for sub, kind, verbs in self.subresources:
            out.append({"name": self.plural + "/" + sub, "singularName": "",
                        "namespaced": self.namespaced, "kind": kind, "verbs": verbs})
        return out


def builtin_types():
    R = ResourceType
    return [
        R("", "v1", "pods", "Pod", short_names=["po"], categories=["all"], status=True,
          subresources=[("binding", "Binding", ["create"]), ("log", "Pod", ["get"])]),
        R("", "v1", "services", "Service", short_names=["svc"], categories=["all"], status=True),
        R("", "v1", "secrets", "Secret"),
        R("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
        R("", "v1", "events", "Event", short_names=["ev"]),
        R("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], status=True,
          verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
        R("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
        R("", "v1", "endpoints", "Endpoints", short_names=["ep"]),
        R("", "v1", "nodes", "Node", namespaced=False, short_names=["no"], status=True),
        R("apps", "v1", "deployments", "Deployment", short_names=["deploy"], categories=["all"],
          status=True),
        R("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"], categories=["all"],
          status=True),
        R("apps", "v1", "replicasets", "ReplicaSet", short_names=["rs"], categories=["all"],
          status=True),
        R("coordination.k8s.io", "v1", "leases", "Lease"),
        R("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
        R("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
          namespaced=False),
        R("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        R("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        R("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False,
          short_names=["pc"]),
        R("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
          namespaced=False, short_names=["crd", "crds"], status=True),
    ]


# --------------------------------------------------------------------------
# Store


class Watcher:
    def __init__(self, rtype, namespace, label_reqs, field_reqs, bookmarks, name=None):
        self.rtype, self.namespace = rtype, namespace
        self.label_reqs, self.field_reqs = label_reqs, field_reqs
        self.bookmarks = bookmarks
        self.q = queue.Queue()

    def matches(self, obj):
        if obj is None:
            return False
        md = obj.get("metadata", {})
        if self.namespace is not None and md.get("namespace") != self.namespace:
            return False
        return selector.labels_match(self.label_reqs, md.get("labels")) and \
            selector.fields_match(self.field_reqs, obj)


def _strip_for_compare(obj):
    o = copy.deepcopy(obj)
    md = o.get("metadata", {})
    for k in ("resourceVersion", "managedFields"):
        md.pop(k, None)
    return o


def _content_without(obj, *keys):
    return {k: v for k, v in obj.items() if k not in ("metadata",) + keys}


class Store:
    def __init__(self, event_window=1000):
        self.lock = threading.RLock()
        self.rv = 1
        self.types = {}        # (group, plural) -> ResourceType (storage/served version)
        self.objects = collections.defaultdict(dict)   # (group, plural) -> {(ns, name): obj}
        self.by_uid = {}       # uid -> ((group, plural), (ns, name))
        self.log = collections.deque(maxlen=event_window)   # (rv, key, type, obj, old)
        self.compacted = 1     # a watch from rv >= compacted can be served
        self.watchers = set()
        self.gc_queue = queue.Queue()
        self.log_changed = threading.Condition(self.lock)

    def next_rv(self):
        self.rv += 1
        return self.rv

    def record(self, rtype, etype, obj, old):
        entry = (int(obj["metadata"]["resourceVersion"]), rtype.key, etype, obj, old)
        if len(self.log) == self.log.maxlen:
            self.compacted = self.log[0][0]
        self.log.append(entry)
        for w in list(self.watchers):
            if w.rtype.key == rtype.key:
                self._deliver(w, etype, obj, old)
        self.log_changed.notify_all()

    @staticmethod
    def _deliver(w, etype, obj, old):
        new_match = w.matches(obj)
        if etype == "ADDED":
            if new_match:
                w.q.put(("ADDED", obj))
        elif etype == "DELETED":
            if new_match:
                w.q.put(("DELETED", obj))
        else:
            old_match = w.matches(old)
            if new_match and old_match:
                w.q.put(("MODIFIED", obj))
            elif new_match:
                w.q.put(("ADDED", obj))
            elif old_match:
                w.q.put(("DELETED", obj))

    def compact(self):
        with self.lock:
            self.log.clear()
            self.compacted = self.rv

    def list(self, rtype, namespace=None):
        with self.lock:
            items = self.objects[rtype.key]
            return [o for (ns, _), o in sorted(items.items())
                    if namespace is None or ns == namespace]

    def get(self, rtype, namespace, name):
        with self.lock:
            return self.objects[rtype.key].get((namespace or "", name))

    def put(self, rtype, obj, etype, old=None):
        """Writes `obj` with a new resourceVersion and records the event."""
        with self.lock:
            obj["metadata"]["resourceVersion"] = str(self.next_rv())
            md = obj["metadata"]
            k = (md.get("namespace", ""), md["name"])
            if etype == "DELETED":
                self.objects[rtype.key].pop(k, None)
                self.by_uid.pop(md.get("uid"), None)
            else:
                self.objects[rtype.key][k] = obj
                self.by_uid[md["uid"]] = (rtype.key, k)
            self.record(rtype, etype, obj, old)
            return obj

    def find_uid(self, uid):
        with self.lock:
            loc = self.by_uid.get(uid)
            if not loc:
                return None
            return self.objects[loc[0]].get(loc[1])


# --------------------------------------------------------------------------
# The API


class Api:
    def __init__(self, args):
        self.args = args
        self.store = Store(args.event_window)
        self.tokens = {}    # token -> (user, groups)
        self.rbac = args.rbac
        self.requests = collections.deque(maxlen=2000)
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

    @staticmethod
    def not_found(rtype, name):
        return ApiError(404, "NotFound", '%s "%s" not found' % (rtype.qualified, name),
                        {"name": name, "group": rtype.group, "kind": rtype.plural})

    @staticmethod
    def invalid(rtype, name, causes):
        msgs = ["%s: %s" % (f, m) if f else m for f, _, m in causes]
        text = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
        return ApiError(422, "Invalid", '%s.%s "%s" is invalid: %s' % (
            rtype.kind, rtype.group, name, text) if rtype.group else '%s "%s" is invalid: %s' % (
            rtype.kind, name, text),
            {"name": name, "group": rtype.group, "kind": rtype.kind,
             "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})

    def conflict(self, rtype, name):
        return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has '
                        'been modified; please apply your changes to the latest version and try '
                        'again' % (rtype.qualified, name),
                        {"name": name, "group": rtype.group, "kind": rtype.plural})

    # -- type-specific preparation

    def validate_custom(self, rtype, obj, field_validation, warnings, name):
        """Prunes, defaults and validates a custom resource in place."""
        schema = rtype.schema
        if schema is None:
            return obj
        unknown = []
        pruned = prune_and_default(obj, schema, "", unknown, root=True)
        if unknown:
            if field_validation == "Strict":
                raise ApiError(400, "BadRequest", '%s in version "%s" cannot be handled as a %s: '
                               'strict decoding error: %s' % (
                                   rtype.kind, rtype.version, rtype.kind,
                                   ", ".join('unknown field "%s"' % u for u in unknown)))
            if field_validation == "Warn":
                warnings.extend('unknown field "%s"' % u for u in unknown)
        errors = []
        body = {k: v for k, v in pruned.items() if k not in ("apiVersion", "kind", "metadata")}
        root = {k: v for k, v in schema.items() if k not in ("required",)}
        root_required = [r for r in schema.get("required", []) if r not in
                         ("apiVersion", "kind", "metadata")]
        if root_required:
            root["required"] = root_required
        root["properties"] = {k: v for k, v in (schema.get("properties") or {}).items()
                              if k not in ("apiVersion", "kind", "metadata")}
        validate_schema(body, root, "", errors)
        if errors:
            raise self.invalid(rtype, name, errors)
        obj.clear()
        obj.update(pruned)
        return obj

    def prepare_create(self, rtype, obj, namespace):
        md = obj["metadata"]
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now_iso()
        md["generation"] = 1
        if rtype.namespaced:
            md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(k, None)
        if rtype.crd is not None and rtype.status:
            obj.pop("status", None)
        kind = (rtype.group, rtype.plural)
        if kind == ("", "pods"):
            self._default_pod(obj)
        elif kind == ("", "services"):
            self._default_service(obj)
        elif kind == ("", "secrets"):
            self._fold_string_data(obj)
        elif kind == ("", "namespaces"):
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
        elif kind == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._check_crd(obj)

    @staticmethod
    def _fold_string_data(obj):
        sd = obj.pop("stringData", None)
        if sd:
            data = obj.setdefault("data", {})
            for k, v in sd.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
        if not obj.get("type"):
            obj["type"] = "Opaque"

    @staticmethod
    def _default_pod(obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("securityContext", {})
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            image = c.get("image", "")
            tag = image.rsplit("/", 1)[-1]
            latest = ":" not in tag or tag.endswith(":latest")
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            c.setdefault("resources", {})
            for p in c.get("ports", []):
                p.setdefault("protocol", "TCP")
        qos = "BestEffort"
        if any(c.get("resources", {}).get("requests") or c.get("resources", {}).get("limits")
               for c in spec.get("containers", [])):
            qos = "Burstable"
        obj["status"] = {"phase": "Pending", "qosClass": qos}

    def _default_service(self, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for p in spec.get("ports", []):
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        if spec.get("clusterIP") in (None, ""):
            for ip in self.service_ips:
                if ip not in self.used_service_ips:
                    self.used_service_ips.add(ip)
                    spec["clusterIP"] = ip
                    break
        if spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
        else:
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        obj.setdefault("status", {"loadBalancer": {}})

    def _check_crd(self, obj):
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        name = obj["metadata"].get("name", "")
        errors = []
        if not group:
            errors.append(("spec.group", "FieldValueRequired", "Required value"))
        if not names.get("plural"):
            errors.append(("spec.names.plural", "FieldValueRequired", "Required value"))
        if not names.get("kind"):
            errors.append(("spec.names.kind", "FieldValueRequired", "Required value"))
        if names.get("plural") and group and name != names["plural"] + "." + group:
            errors.append(("metadata.name", "FieldValueInvalid",
                           'Invalid value: "%s": must be spec.names.plural+"."+spec.group' % name))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errors.append(("spec.scope", "FieldValueNotSupported",
                           'Unsupported value: %s: supported values: "Cluster", "Namespaced"'
                           % go_value(spec.get("scope"))))
        versions = spec.get("versions") or []
        if not versions:
            errors.append(("spec.versions", "FieldValueInvalid",
                           "Invalid value: null: must have exactly one version marked as storage "
                           "version"))
        if sum(1 for v in versions if v.get("storage")) != 1 and versions:
            errors.append(("spec.versions", "FieldValueInvalid", "Invalid value: %s: must have "
                           "exactly one version marked as storage version" % "[]"))
        for i, v in enumerate(versions):
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            path = "spec.versions[%d].schema.openAPIV3Schema" % i
            if schema is None:
                errors.append((path, "FieldValueRequired",
                               "Required value: schemas are required"))
                continue
            check_structural(schema, path, errors)
            if schema.get("type") != "object":
                errors.append((path + ".type", "FieldValueInvalid",
                               "Invalid value: %s: must be object at the root"
                               % go_value(schema.get("type"))))
        if errors:
            raise self.invalid(self.served[("apiextensions.k8s.io", "v1",
                                            "customresourcedefinitions")], name, errors)
        spec.setdefault("conversion", {"strategy": "None"})
        names.setdefault("singular", names.get("kind", "").lower())
        names.setdefault("listKind", names.get("kind", "") + "List")

    def _crd_established(self, obj):
        spec = obj["spec"]
        t = now_iso()
        obj["status"] = {
            "acceptedNames": copy.deepcopy(spec["names"]),
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": t},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": t}],
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
        }

    def install_crd(self, crd):
        """(Re)registers the resource types a CRD defines."""
        spec = crd["spec"]
        names = spec["names"]
        self.uninstall_crd(crd["metadata"]["name"], delete_objects=False)
        types = []
        storage = None
        for v in spec["versions"]:
            if not v.get("served", True):
                continue
            cols = v.get("additionalPrinterColumns")
            t = ResourceType(spec["group"], v["name"], names["plural"], names["kind"],
                             namespaced=spec.get("scope") == "Namespaced",
                             singular=names.get("singular"),
                             short_names=names.get("shortNames", []),
                             categories=names.get("categories", []),
                             status="status" in (v.get("subresources") or {}),
                             schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                             printer_columns=cols, crd=crd["metadata"]["name"],
                             allow_unconditional_update=False)
            types.append(t)
            if v.get("storage"):
                storage = t
        self.crd_types[crd["metadata"]["name"]] = types
        for t in types:
            self.served[(t.group, t.version, t.plural)] = t
        if storage is not None:
            self.store.types[storage.key] = storage

    def uninstall_crd(self, name, delete_objects=True):
        types = self.crd_types.pop(name, [])
        for t in types:
            self.served.pop((t.group, t.version, t.plural), None)
        if delete_objects and types:
            t = types[0]
            with self.store.lock:
                for obj in list(self.store.objects[t.key].values()):
                    o = copy.deepcopy(obj)
                    self.store.put(t, o, "DELETED", obj)
                    self.store.gc_queue.put(obj["metadata"]["uid"])
            self.store.types.pop(t.key, None)

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
                raise self.invalid(rtype, "", [("metadata.name", "FieldValueRequired",
                                                "Required value: name or generateName is "
                                                "required")])
        name = md["name"]
        if not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name) or len(name) > 253:
            raise self.invalid(rtype, name, [("metadata.name", "FieldValueInvalid",
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
            if self.store.get(rtype, namespace if rtype.namespaced else "", name) is not None:
                raise ApiError(409, "AlreadyExists", '%s "%s" already exists' % (
                    rtype.qualified, name), {"name": name, "group": rtype.group,
                                             "kind": rtype.plural})
            if rtype.crd is not None:
                self.validate_custom(rtype, obj, self._field_validation(query), warnings, name)
            self.prepare_create(rtype, obj, namespace)
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self._crd_established(obj)
            if (rtype.group, rtype.plural) == ("", "pods"):
                self._admit_pod(obj, namespace)
            obj["apiVersion"], obj["kind"] = rtype.gv, rtype.kind
            if self._dry_run(query):
                obj["metadata"]["resourceVersion"] = ""
                return obj
            self.store.put(rtype, obj, "ADDED")
            if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                self.install_crd(obj)
            return obj

    def _admit_pod(self, obj, namespace):
        pc = obj.get("spec", {}).get("priorityClassName")
        if pc and pc not in ("system-cluster-critical", "system-node-critical"):
            t = self.served[("scheduling.k8s.io", "v1", "priorityclasses")]
            if self.store.get(t, "", pc) is None:
                raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: no PriorityClass with '
                               'name %s was found' % (obj["metadata"]["name"], pc))
            obj["spec"]["priority"] = self.store.get(t, "", pc).get("value", 0)

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
                raise self.not_found(rtype, name)
            rv = md.get("resourceVersion")
            if rv:
                if rv != old["metadata"]["resourceVersion"]:
                    raise self.conflict(rtype, name)
            elif not rtype.allow_unconditional_update and not from_patch:
                raise self.invalid(rtype, name, [("metadata.resourceVersion", "FieldValueInvalid",
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
                if (rtype.group, rtype.plural) == ("", "services"):
                    spec = new.setdefault("spec", {})
                    ospec = old.get("spec", {})
                    if spec.get("clusterIP") in (None, ""):
                        spec["clusterIP"] = ospec.get("clusterIP")
                        spec["clusterIPs"] = ospec.get("clusterIPs")
                    elif spec["clusterIP"] != ospec.get("clusterIP"):
                        raise self.invalid(rtype, name, [("spec.clusterIPs[0]", "FieldValueInvalid",
                                                          "Invalid value: []string{%s}: may not "
                                                          "change once set" % json.dumps(
                                                              spec["clusterIP"]))])
                if rtype.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
                    self._check_crd(new)
            new["apiVersion"], new["kind"] = rtype.gv, rtype.kind
            if rtype.crd is not None:
                self.validate_custom(rtype, new, self._field_validation(query), warnings, name)
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

    def _check_pod_update(self, rtype, old, new):
        ospec, nspec = copy.deepcopy(old.get("spec", {})), copy.deepcopy(new.get("spec", {}))
        self._default_pod({"spec": nspec})
        for s in (ospec, nspec):
            for c in s.get("containers", []) + s.get("initContainers", []):
                c.pop("image", None)
            s.pop("activeDeadlineSeconds", None)
            s.pop("tolerations", None)
            s.pop("terminationGracePeriodSeconds", None)
        if ospec != nspec:
            raise self.invalid(rtype, new["metadata"]["name"], [(
                "spec", "FieldValueForbidden",
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
                ",`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)")])

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
                        raise self.not_found(rtype, name)
                    obj, _ = self.update(rtype, namespace, name, patch, query, warnings,
                                         from_patch=True, create_if_missing=True, user=user)
                    return obj, True
                patched = patches.json_merge_patch(old, patch)
            else:
                if old is None:
                    raise self.not_found(rtype, name)
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
                raise self.not_found(rtype, name)
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

    def _delete_namespace_content(self, namespace):
        for key, t in list(self.store.types.items()):
            if not t.namespaced:
                continue
            for obj in self.store.list(t, namespace):
                try:
                    self.delete(t, namespace, obj["metadata"]["name"], {"gracePeriodSeconds": 0},
                                {})
                except ApiError:
                    pass

    def _orphan(self, uid):
        with self.store.lock:
            for key, objs in self.store.objects.items():
                t = self.store.types.get(key)
                for obj in list(objs.values()):
                    refs = obj["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == uid for r in refs):
                        new = copy.deepcopy(obj)
                        new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                        if not new["metadata"]["ownerReferences"]:
                            del new["metadata"]["ownerReferences"]
                        self.store.put(t, new, "MODIFIED", obj)

    def _gc_loop(self):
        while True:
            uid = self.store.gc_queue.get()
            time.sleep(0.05)
            try:
                self._collect(uid)
            except Exception as e:  # keep collecting
                print("gc error: %r" % e, file=sys.stderr)

    def _collect(self, uid):
        with self.store.lock:
            victims = []
            for key, objs in self.store.objects.items():
                t = self.store.types.get(key)
                if t is None:
                    continue
                for obj in objs.values():
                    refs = obj["metadata"].get("ownerReferences") or []
                    if not any(r.get("uid") == uid for r in refs):
                        continue
                    alive = [r for r in refs if r.get("uid") != uid and
                             self.store.find_uid(r.get("uid")) is not None]
                    if not alive and not obj["metadata"].get("deletionTimestamp"):
                        victims.append((t, obj))
            for t, obj in victims:
                md = obj["metadata"]
                try:
                    self.delete(t, md.get("namespace", ""), md["name"],
                                {"propagationPolicy": "Background"}, {})
                except ApiError:
                    pass

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
                raise self.not_found(t, name)
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


# --------------------------------------------------------------------------
# RBAC


RESOURCE_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                  "DELETE": "delete"}


def rbac_rule_allows(rule, verb, group, resource, subresource, name):
    if "*" not in rule.get("verbs", []) and verb not in rule.get("verbs", []):
        return False
    if "*" not in rule.get("apiGroups", []) and group not in rule.get("apiGroups", []):
        return False
    res = resource + ("/" + subresource if subresource else "")
    resources = rule.get("resources", [])
    if "*" not in resources and res not in resources and \
            not (subresource and resource + "/*" in resources):
        return False
    names = rule.get("resourceNames")
    if names and name not in names:
        return False
    return True


# --------------------------------------------------------------------------
# HTTP


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-emulator"
    api = None  # set by main

    def log_message(self, fmt, *args):
        if self.api.args.verbose:
            sys.stderr.write("apiserver: %s\n" % (fmt % args))

    # -- responses

    def send_json(self, code, obj, extra_headers=None, content_type="application/json"):
        body = json.dumps(obj, separators=(",", ":")).encode() if not isinstance(obj, bytes) \
            else obj
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for k, v in (extra_headers or {}).items():
            if isinstance(v, list):
                for x in v:
                    self.send_header(k, x)
            else:
                self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._code = code

    def send_error_status(self, err):
        self.send_json(err.code, err.status(), err.headers)

    # -- dispatch

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("GET")

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def dispatch(self, method):
        self._code = 0
        parsed = urllib.parse.urlsplit(self.path)
        path = parsed.path
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query,
                                                           keep_blank_values=True).items()}
        user = None
        try:
            raw = self.read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
            if path in ("/healthz", "/readyz", "/livez", "/_emulator/healthz"):
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(body)
                self._code = 200
                return
            user = self.authenticate()
            if path.startswith("/_emulator/"):
                self.hook(method, path, query, raw, user)
                return
            self.route(method, path, query, raw, user)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # an emulator bug: answer 500, keep serving
            import traceback
            traceback.print_exc()
            try:
                self.send_error_status(ApiError(500, "InternalError", "emulator error: %r" % e))
            except Exception:
                self.close_connection = True
        finally:
            self.api.requests.append({"verb": method, "path": self.path, "code": self._code,
                                      "user": user[0] if user else None})

    def authenticate(self):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            who = self.api.tokens.get(auth[7:].strip())
            if who:
                return who
        raise ApiError(401, "Unauthorized", "Unauthorized")

    def authorize(self, user, verb, group, resource, subresource, namespace, name):
        if not self.api.rbac:
            return
        username, groups = user
        if "system:masters" in groups:
            return
        store = self.api.store
        served = self.api.served
        allowed = False
        with store.lock:
            subjects_ok = lambda subs: any(  # noqa: E731
                (s.get("kind") == "User" and s.get("name") == username) or
                (s.get("kind") == "Group" and s.get("name") in groups) or
                (s.get("kind") == "ServiceAccount" and
                 "system:serviceaccount:%s:%s" % (s.get("namespace"), s.get("name")) == username)
                for s in subs or [])
            bindings = [(b, None) for b in store.list(
                served[("rbac.authorization.k8s.io", "v1", "clusterrolebindings")])]
            if namespace:
                bindings += [(b, namespace) for b in store.list(
                    served[("rbac.authorization.k8s.io", "v1", "rolebindings")], namespace)]
            for b, ns in bindings:
                if not subjects_ok(b.get("subjects")):
                    continue
                ref = b.get("roleRef", {})
                if ref.get("kind") == "ClusterRole":
                    role = store.get(served[("rbac.authorization.k8s.io", "v1", "clusterroles")],
                                     "", ref.get("name"))
                else:
                    role = store.get(served[("rbac.authorization.k8s.io", "v1", "roles")],
                                     ns or "", ref.get("name"))
                for rule in (role or {}).get("rules") or []:
                    if rbac_rule_allows(rule, verb, group, resource, subresource, name):
                        allowed = True
        if not allowed:
            scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
            res = resource + ("/" + subresource if subresource else "")
            raise ApiError(403, "Forbidden", '%s%s is forbidden: User "%s" cannot %s resource "%s" '
                           'in API group "%s" %s' % (
                               res + (("." + group) if group else ""),
                               (' "%s"' % name) if name else "", username, verb, res, group,
                               scope), {"name": name or "", "group": group, "kind": resource})

    def hook(self, method, path, query, raw, user):
        api = self.api
        if "system:masters" not in user[1]:
            raise ApiError(403, "Forbidden", "test hooks need the admin token")
        if path == "/_emulator/compact":
            api.store.compact()
            self.send_json(200, {"compactedResourceVersion": str(api.store.compacted)})
        elif path == "/_emulator/cut-watches":
            mode = query.get("mode", "end")
            with api.store.lock:
                n = len(api.store.watchers)
                for w in list(api.store.watchers):
                    w.q.put(("CUT", mode))
            self.send_json(200, {"cut": n})
        elif path == "/_emulator/bookmark":
            api.send_bookmarks()
            self.send_json(200, {"resourceVersion": str(api.store.rv)})
        elif path == "/_emulator/token":
            body = json.loads(raw)
            api.tokens[body["token"]] = (body["user"], body.get("groups", []))
            self.send_json(200, {"ok": True})
        elif path == "/_emulator/requests":
            self.send_json(200, list(api.requests))
        else:
            raise ApiError(404, "NotFound", "no such hook")

    # -- routing

    def route(self, method, path, query, raw, user):
        api = self.api
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        accept = self.headers.get("Accept", "")
        if path == "/version" or path == "/version/":
            return self.send_json(200, VERSION)
        if path.startswith("/openapi/v2"):
            return self.send_json(200, b"",
                                  content_type="application/octet-stream")
        if path.startswith("/openapi/v3"):
            if path.rstrip("/") == "/openapi/v3":
                return self.send_json(200, {"paths": {}})
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts == ["api"]:
            return self.send_json(200, {
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": self.server.address_str}]})
        if parts == ["apis"]:
            groups = []
            for g, versions in api.groups().items():
                if not g:
                    continue
                groups.append({"name": g, "versions": [
                    {"groupVersion": g + "/" + v, "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": g + "/" + versions[0],
                                         "version": versions[0]}})
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                        "groups": groups})
        if not parts or parts[0] not in ("api", "apis"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts[0] == "api":
            if len(parts) < 2:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 2:
                g = parts[1]
                versions = api.groups().get(g)
                if not versions:
                    raise ApiError(404, "NotFound", "the server could not find the requested "
                                   "resource")
                return self.send_json(200, {
                    "kind": "APIGroup", "apiVersion": "v1", "name": g,
                    "versions": [{"groupVersion": g + "/" + v, "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": g + "/" + versions[0],
                                         "version": versions[0]}})
            if len(parts) < 3:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            types = [t for (g, v, _), t in api.served.items() if g == group and v == version]
            if not types:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            resources = []
            for t in types:
                resources.extend(t.discovery())
            return self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                        "groupVersion": group + "/" + version if group else version,
                                        "resources": resources})
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (
                group == "" and len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        rtype = api.find_type(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if rtype.namespaced and namespace is None and (name is not None or method == "POST"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rtype.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub is not None and sub != "status" and sub not in [s[0] for s in rtype.subresources]:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "status" and not rtype.status:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = namespace or ""
        watch = query.get("watch") in ("1", "true")
        if method == "GET" and name is None:
            verb = "watch" if watch else "list"
        elif method == "DELETE" and name is None:
            verb = "deletecollection"
        else:
            verb = RESOURCE_VERBS[method]
        if sub == "log":
            verb = "get"
        self.authorize(user, verb, group, rtype.plural, sub, namespace, name)
        warnings = []
        if method == "GET":
            if name is None:
                if watch:
                    return self.watch(rtype, namespace, query)
                return self.list(rtype, namespace, query, accept)
            if sub == "log":
                return self.pod_log(namespace, name, query)
            obj = api.store.get(rtype, ns, name)
            if obj is None:
                raise api.not_found(rtype, name)
            if wants_table(accept) and sub is None:
                return self.send_json(200, table_for(rtype, [obj], query.get("includeObject",
                                                                             "Metadata")))
            return self.send_json(200, obj)
        ctype = self.headers.get("Content-Type", "")
        if raw and "protobuf" in ctype:
            # kubectl's typed clients (`kubectl create secret ...`) send protobuf
            try:
                raw = json.dumps(protobuf.decode_protobuf_object(raw)).encode()
            except (protobuf.ProtobufError, UnicodeDecodeError, ValueError) as e:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                               "unknown format - accepted media types include: application/json, "
                               "application/yaml (%s)" % e)
        body = None
        if method in ("POST", "PUT") or (method == "DELETE" and raw):
            try:
                body = json.loads(raw) if raw else {}
            except ValueError as e:
                raise ApiError(400, "BadRequest", "the body of the request could not be decoded "
                               "as JSON: %s" % e)
        headers = {}
        if method == "POST":
            if sub == "binding":
                return self.send_json(201, api.bind(ns, name, body))
            if name is not None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                               "the requested resource")
            obj = api.create(rtype, ns, body, query, warnings, user)
            code = 201
        elif method == "PUT":
            if name is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                               "the requested resource")
            obj, created = api.update(rtype, ns, name, body, query, warnings, subresource=sub,
                                      user=user)
            code = 201 if created else 200
        elif method == "PATCH":
            if name is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                               "the requested resource")
            obj, created = api.patch(rtype, ns, name, self.headers.get("Content-Type", ""), raw,
                                     query, warnings, subresource=sub, user=user)
            code = 201 if created else 200
        elif method == "DELETE":
            options = body or {}
            if name is None:
                reqs = selector.parse_label_selector(query.get("labelSelector"))
                freqs = selector.parse_field_selector(query.get("fieldSelector"))
                deleted = []
                for o in api.store.list(rtype, namespace):
                    if selector.labels_match(reqs, o["metadata"].get("labels")) and \
                            selector.fields_match(freqs, o):
                        try:
                            deleted.append(api.delete(rtype, o["metadata"].get("namespace", ""),
                                                      o["metadata"]["name"], options, query))
                        except ApiError:
                            pass
                return self.send_json(200, {"kind": rtype.kind + "List", "apiVersion": rtype.gv,
                                            "metadata": {"resourceVersion": str(api.store.rv)},
                                            "items": deleted})
            obj = api.delete(rtype, ns, name, options, query)
            code = 200
        if warnings:
            headers["Warning"] = ['299 - "%s"' % w.replace('"', '\\"') for w in warnings]
        return self.send_json(code, obj, headers)

    def list(self, rtype, namespace, query, accept):
        api = self.api
        try:
            lreqs = selector.parse_label_selector(query.get("labelSelector"))
            freqs = selector.parse_field_selector(query.get("fieldSelector"))
        except selector.SelectorError as e:
            raise ApiError(400, "BadRequest", "unable to parse requirement: %s" % e)
        rv = query.get("resourceVersion")
        with api.store.lock:
            current = api.store.rv
            if rv and rv != "0":
                try:
                    n = int(rv)
                except ValueError:
                    raise ApiError(400, "BadRequest", 'invalid resource version "%s"' % rv)
                if query.get("resourceVersionMatch") == "Exact":
                    if n < api.store.compacted or n != current:
                        raise ApiError(410, "Expired", "The resourceVersion for the provided list "
                                       "is too old.")
                if n > current:
                    raise ApiError(504, "Timeout", "Too large resource version: %d, current: %d"
                                   % (n, current), {"causes": [{
                                       "reason": "ResourceVersionTooLarge",
                                       "message": "Too large resource version"}],
                                       "retryAfterSeconds": 1})
            items = [o for o in api.store.list(rtype, namespace)
                     if selector.labels_match(lreqs, o["metadata"].get("labels")) and
                     selector.fields_match(freqs, o)]
        if wants_table(accept):
            t = table_for(rtype, items, query.get("includeObject", "Metadata"))
            t["metadata"]["resourceVersion"] = str(current)
            return self.send_json(200, t)
        self.send_json(200, {"kind": rtype.kind + "List", "apiVersion": rtype.gv,
                             "metadata": {"resourceVersion": str(current)}, "items": items})

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, rtype, namespace, query):
        api = self.api
        try:
            lreqs = selector.parse_label_selector(query.get("labelSelector"))
            freqs = selector.parse_field_selector(query.get("fieldSelector"))
        except selector.SelectorError as e:
            raise ApiError(400, "BadRequest", "unable to parse requirement: %s" % e)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        send_initial = query.get("sendInitialEvents") == "true"
        timeout = query.get("timeoutSeconds")
        deadline = time.time() + (int(timeout) if timeout else 1800 + random.random() * 1800)
        rv = query.get("resourceVersion", "")
        as_table = wants_table(self.headers.get("Accept"))
        w = Watcher(rtype, namespace, lreqs, freqs, bookmarks)
        initial = []
        gone = None
        with api.store.lock:
            if rv in ("", "0") or send_initial:
                for o in api.store.list(rtype, namespace):
                    if w.matches(o):
                        initial.append(("ADDED", o))
                if send_initial and bookmarks:
                    initial.append(("INITIAL-END", api.store.rv))
                if send_initial and rv not in ("", "0"):
                    pass
            else:
                try:
                    n = int(rv)
                except ValueError:
                    raise ApiError(400, "BadRequest", 'invalid resource version "%s"' % rv)
                if n < api.store.compacted:
                    gone = "too old resource version: %d (%d)" % (n, api.store.compacted)
                else:
                    for erv, key, etype, obj, old in api.store.log:
                        if erv > n and key == rtype.key:
                            before = w.q.qsize()
                            api.store._deliver(w, etype, obj, old)
                            del before
            if gone is None:
                api.store.watchers.add(w)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._code = 200
        first_table = [True]

        def emit(etype, obj):
            if as_table and etype in ("ADDED", "MODIFIED", "DELETED"):
                obj = table_for(rtype, [obj], query.get("includeObject", "Metadata"),
                                with_columns=first_table[0])
                first_table[0] = False
            self.write_chunk(json.dumps({"type": etype, "object": obj},
                                        separators=(",", ":")).encode() + b"\n")

        def bookmark(rv_value, initial_end=False):
            md = {"resourceVersion": str(rv_value)}
            if initial_end:
                md["annotations"] = {"k8s.io/initial-events-end": "true"}
            emit("BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.gv, "metadata": md})

        try:
            if gone is not None:
                emit("ERROR", ApiError(410, "Expired", gone).status())
                self.write_chunk(b"")
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True
                return
            for etype, obj in initial:
                if etype == "INITIAL-END":
                    bookmark(obj, True)
                else:
                    emit(etype, obj)
            while True:
                left = deadline - time.time()
                if left <= 0:
                    if bookmarks:
                        bookmark(api.store.rv)
                    break
                try:
                    item = w.q.get(timeout=min(left, 1.0))
                except queue.Empty:
                    continue
                etype, obj = item
                if etype == "CUT":
                    if obj == "abort":
                        self.close_connection = True
                        try:
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
                    break
                if etype == "BOOKMARK":
                    bookmark(obj)
                    continue
                emit(etype, obj)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            with api.store.lock:
                api.store.watchers.discard(w)

    def pod_log(self, namespace, name, query):
        api = self.api
        t = api.served[("", "v1", "pods")]
        pod = api.store.get(t, namespace, name)
        if pod is None:
            raise api.not_found(t, name)
        containers = [c["name"] for c in pod["spec"].get("containers", [])]
        container = query.get("container")
        if not container:
            if len(containers) != 1:
                raise ApiError(400, "BadRequest", "a container name must be specified for pod %s, "
                               "choose one of: %s" % (name, containers))
            container = containers[0]
        directory = os.path.join(api.args.log_dir or "", "%s_%s_%s" % (
            namespace, name, pod["metadata"]["uid"]))
        restarts = 0
        for cs in pod.get("status", {}).get("containerStatuses", []) + \
                pod.get("status", {}).get("initContainerStatuses", []):
            if cs["name"] == container:
                restarts = cs.get("restartCount", 0)
        attempt = restarts - 1 if query.get("previous") == "true" else restarts
        path = os.path.join(directory, "%s.%d.log" % (container, attempt))
        if not api.args.log_dir or not os.path.exists(path):
            if query.get("previous") == "true":
                raise ApiError(400, "BadRequest", 'previous terminated container "%s" in pod "%s" '
                               'not found' % (container, name))
            raise ApiError(400, "BadRequest", 'container "%s" in pod "%s" is waiting to start: '
                           'ContainerCreating' % (container, name))
        with open(path, "rb") as f:
            data = f.read()
        if query.get("tailLines"):
            n = int(query["tailLines"])
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n > 0 else b""
        if query.get("follow") != "true":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._code = 200
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._code = 200
        try:
            if data:
                self.write_chunk(data)
            with open(path, "rb") as f:
                f.seek(0, 2)
                while True:
                    chunk = f.read(65536)
                    if chunk:
                        self.write_chunk(chunk)
                        continue
                    cur = api.store.get(t, namespace, name)
                    running = cur is not None and cur["metadata"]["uid"] == pod["metadata"]["uid"] \
                        and any(cs["name"] == container and cs.get("restartCount", 0) == attempt
                                and "running" in cs.get("state", {})
                                for cs in cur.get("status", {}).get("containerStatuses", []) +
                                cur.get("status", {}).get("initContainerStatuses", []))
                    if not running:
                        chunk = f.read()
                        if chunk:
                            self.write_chunk(chunk)
                        break
                    time.sleep(0.2)
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, handler, ssl_ctx):
        self.ssl_ctx = ssl_ctx
        super().__init__(addr, handler)
        self.address_str = "%s:%d" % self.server_address[:2]

    def finish_request(self, request, client_address):
        try:
            request.settimeout(60)
            tls = self.ssl_ctx.wrap_socket(request, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, OSError)):
            return
        super().handle_error(request, client_address)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="where certificates and kubeconfigs go")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token", default=None, help="the admin token (random when not given)")
    p.add_argument("--event-window", type=int, default=1000,
                   help="how many changes are kept for watches (older: 410 Gone)")
    p.add_argument("--bookmark-interval", type=float, default=5.0)
    p.add_argument("--service-cidr", default="127.1.0.0/16",
                   help="where ClusterIPs come from (kubelet.py proxies them on loopback)")
    p.add_argument("--log-dir", default=None, help="the kubelet's container log folder, for "
                   "pods/log")
    p.add_argument("--rbac", action="store_true",
                   help="authorise non-admin tokens with the stored RBAC objects")
    p.add_argument("--verbose", "-v", action="store_true")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit when the process that started this one ends")
    args = p.parse_args(argv)
    if args.exit_with_parent:
        lifetime.exit_with_parent(lambda: os._exit(0))
    args.port_hint = args.port
    os.makedirs(args.dir, exist_ok=True)
    paths = certificates.make_certificates(os.path.join(args.dir, "pki"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths["server.crt"], paths["server.key"])
    api = Api(args)
    Handler.api = api
    server = Server((args.host, args.port), Handler, ctx)
    port = server.server_address[1]
    url = "https://%s:%d" % (args.host, port)

    def tok():
        return base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")

    admin = args.token or tok()
    kubelet_token, operator_token = tok(), tok()
    api.tokens[admin] = ("kubernetes-admin", ["system:masters", "system:authenticated"])
    api.tokens[kubelet_token] = ("system:node:kubeps-node", ["system:nodes", "system:masters",
                                                             "system:authenticated"])
    api.tokens[operator_token] = ("system:serviceaccount:kubeps-system:kubeps-operator",
                                  ["system:serviceaccounts", "system:serviceaccounts:kubeps-system",
                                   "system:authenticated"])
    kubeconfig.write_kubeconfig(os.path.join(args.dir, "kubelet.kubeconfig"), url, paths["ca.crt"],
                             kubelet_token, user="kubelet")
    kubeconfig.write_kubeconfig(os.path.join(args.dir, "operator.kubeconfig"), url, paths["ca.crt"],
                             operator_token, user="kubeps-operator", namespace="kubeps-system")
    kubeconfig.write_kubeconfig(os.path.join(args.dir, "kubeconfig"), url, paths["ca.crt"], admin)
    with open(os.path.join(args.dir, "apiserver.url"), "w") as f:
        f.write(url + "\n")
    print("READY %s" % url, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
