"""The test hooks under /_emulator/ (admin token only): compact the change
window, cut or abort every open watch, send bookmarks now, add a bearer
token, list the last requests and the open watches, make a node NotReady
and Ready again (node_lifecycle.py). See the package's docstring.

A mixin of the request handler (routing.py).
"""
import collections
import json
import time

from .errors import ApiError


class EmulatorHooks:
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
            if "expiresIn" in body:
                api.token_expiry[body["token"]] = time.time() + float(body["expiresIn"])
            self.send_json(200, {"ok": True})
        elif path == "/_emulator/settings":
            body = json.loads(raw)
            if "watchDelay" in body:
                api.watch_delays = {k: float(v) for k, v in body["watchDelay"].items()}
            if "gcDelay" in body:
                api.gc_delay = float(body["gcDelay"])
            if "ownerReferencesEnforcement" in body:
                api.owner_references_enforcement = bool(body["ownerReferencesEnforcement"])
            if "requestLogSize" in body:   # a long run's checks need every request
                with api.store.lock:
                    api.requests = collections.deque(api.requests,
                                                     maxlen=int(body["requestLogSize"]))
            if "throttle" in body:
                api.flow_control.configure(body["throttle"])
            self.send_json(200, {"watchDelay": api.watch_delays, "gcDelay": api.gc_delay,
                                 "requestLogSize": api.requests.maxlen,
                                 "throttle": api.flow_control.describe()})
        elif path == "/_emulator/node-not-ready":
            ok = api.node_not_ready(query.get("node", "kubeps-node"),
                                    float(query.get("evictAfterSeconds", "300")))
            self.send_json(200 if ok else 404, {"ok": ok})
        elif path == "/_emulator/node-ready":
            ok = api.node_ready(query.get("node", "kubeps-node"))
            self.send_json(200 if ok else 404, {"ok": ok})
        elif path == "/_emulator/expire-token":
            api.token_expiry[json.loads(raw)["token"]] = time.time()
            self.send_json(200, {"ok": True})
        elif path == "/_emulator/requests":
            self.send_json(200, list(api.requests))
        elif path == "/_emulator/watches":
            with api.store.lock:
                watches = [{"user": w.user, "path": w.path, "openedAfter": w.opened_after}
                           for w in api.store.watchers]
            self.send_json(200, watches)
        else:
            raise ApiError(404, "NotFound", "no such hook")
