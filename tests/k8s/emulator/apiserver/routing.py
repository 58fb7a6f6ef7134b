"""The API server's request handler: authentication (bearer tokens),
dispatch of a request to discovery, the test hooks or a resource, parsing of
resource paths (/api/v1/namespaces/NS/pods/NAME/status...), authorisation,
request bodies (JSON, and protobuf from kubectl's typed clients) and the
verbs: get, list, create, update, patch, delete, deletecollection, with
watch streams (watch.py) and pods/log (pod_log.py) as mixins.
"""
import json
import ssl
import sys
import time
import urllib.parse
import uuid

from ..http_server import StreamingHandler
from ..selector import (SelectorError, fields_match, labels_match, parse_field_selector,
                        parse_label_selector)
from . import discovery, protobuf, rbac
from .errors import ApiError, not_found
from .hooks import EmulatorHooks
from .pod_log import PodLogStream
from .tables import table_for, wants_table
from .watch import WatchStream


def written_summary(obj):
    """What the request log keeps of a written object, as an audit log's
    objectRef does, plus its controller and phase: enough for a test to order
    a pod's creation after its owner's terminal status by resourceVersion
    (one global counter) and to see an object change owners."""
    meta = obj.get("metadata", {})
    controller = next((r.get("uid") for r in meta.get("ownerReferences") or []
                       if r.get("controller")), None)
    return {"name": meta.get("name"), "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"), "controllerUid": controller,
            "phase": (obj.get("status") or {}).get("phase")}


class Handler(WatchStream, PodLogStream, EmulatorHooks, StreamingHandler):
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
        if err.plain:
            body = (err.message + "\n").encode()
            self.send_response(err.code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self._code = err.code
            return
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

    def dispatch(self, method):
        self._code = 0
        self._written = None
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
            self._user = user
            if user[0] in self.api.cut_off_users:
                # a NotReady node's kubelet: as if the network had cut it off
                self.close_connection = True
                raise ApiError(503, "ServiceUnavailable", "the node is cut off (emulated)")
            if path.startswith("/_emulator/"):
                self.hook(method, path, query, raw, user)
                return
            self.api.flow_control.admit(user[0])
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
            entry = {"verb": method, "path": self.path, "code": self._code,
                     "user": user[0] if user else None, "time": time.time()}
            if self._written is not None:
                entry["object"] = self._written
            self.api.log_request(entry)

    def authenticate(self):
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[7:].strip()
            who = self.api.tokens.get(token)
            # An expired token is refused like an unknown one, as a real API
            # server refuses a projected service-account token past its expiry.
            if who and time.time() < self.api.token_expiry.get(token, float("inf")):
                return who
        raise ApiError(401, "Unauthorized", "Unauthorized")

    # -- routing

    def route(self, method, path, query, raw, user):
        api = self.api
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
        accept = self.headers.get("Accept", "")
        doc = discovery.document(api, path, parts, self.server.address_str)
        if doc is not None:
            doc_body, content_type = doc
            return self.send_json(200, doc_body, content_type=content_type)
        group, version, rest = discovery.split_path(parts)
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
        if sub is not None and not (sub == "status" and rtype.status or
                                    sub in [s[0] for s in rtype.subresources]):
            # the CRD handler answers with http.Error, not a Status
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           plain=rtype.crd is not None)
        ns = namespace or ""
        watch = query.get("watch") in ("1", "true")
        if method == "GET" and name is None:
            verb = "watch" if watch else "list"
        elif method == "DELETE" and name is None:
            verb = "deletecollection"
        else:
            verb = rbac.RESOURCE_VERBS[method]
        if sub == "log":
            verb = "get"
        rbac.authorize(api, user, verb, group, rtype.plural, sub, namespace, name)
        warnings = []
        if sub == "scale":
            return self.serve_scale(rtype, ns, name, verb, query, raw, accept, warnings, user)
        if method == "GET":
            if name is None:
                if watch:
                    return self.watch(rtype, namespace, query)
                return self.list(rtype, namespace, query, accept)
            if sub == "log":
                return self.pod_log(namespace, name, query)
            obj = api.store.get(rtype, ns, name)
            if obj is None:
                raise not_found(rtype, name)
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
            if sub == "eviction":
                return self.send_json(201, api.evict(ns, name, body))
            if name is not None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                               "the requested resource")
            rbac.check_owner_references(api, user, rtype, namespace, body)
            obj = api.create(rtype, ns, body, query, warnings, user)
            code = 201
        elif method == "PUT":
            if name is None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                               "the requested resource")
            rbac.check_owner_references(api, user, rtype, namespace, body)
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
                reqs = parse_label_selector(query.get("labelSelector"))
                freqs = parse_field_selector(query.get("fieldSelector"))
                deleted = []
                for o in api.store.list(rtype, namespace):
                    if labels_match(reqs, o["metadata"].get("labels")) and \
                            fields_match(freqs, o):
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
        if method != "DELETE" and query.get("dryRun") != "All":
            self._written = written_summary(obj)
        return self.send_json(code, obj, headers)

    def serve_scale(self, rtype, ns, name, verb, query, raw, accept, warnings, user):
        """The scale subresource of a custom resource (scale.py)."""
        api = self.api
        if verb == "get":
            obj = api.get_scale(rtype, ns, name)
            if wants_table(accept):
                # the CRD's own columns, over the Scale, as upstream's scope does
                return self.send_json(200, table_for(rtype, [obj], query.get("includeObject",
                                                                             "Metadata")))
            return self.send_json(200, obj)
        if verb == "update":
            try:
                body = json.loads(raw) if raw else {}
            except ValueError as e:
                raise ApiError(400, "BadRequest", "the body of the request could not be decoded "
                               "as JSON: %s" % e)
            obj = api.update_scale(rtype, ns, name, body, query, warnings, user)
        elif verb == "patch":
            obj = api.patch_scale(rtype, ns, name, self.headers.get("Content-Type", ""), raw,
                                  query, warnings, user)
        else:
            raise ApiError(405, "MethodNotAllowed", "unhandled verb %s" % json.dumps(verb),
                           plain=True)
        headers = {}
        if warnings:
            headers["Warning"] = ['299 - "%s"' % w.replace('"', '\\"') for w in warnings]
        if query.get("dryRun") != "All":
            self._written = written_summary(obj)
        return self.send_json(200, obj, headers)

    def list(self, rtype, namespace, query, accept):
        api = self.api
        try:
            lreqs = parse_label_selector(query.get("labelSelector"))
            freqs = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as e:
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
                     if labels_match(lreqs, o["metadata"].get("labels")) and
                     fields_match(freqs, o)]
        if wants_table(accept):
            t = table_for(rtype, items, query.get("includeObject", "Metadata"))
            t["metadata"]["resourceVersion"] = str(current)
            return self.send_json(200, t)
        self.send_json(200, {"kind": rtype.kind + "List", "apiVersion": rtype.gv,
                             "metadata": {"resourceVersion": str(current)}, "items": items})
