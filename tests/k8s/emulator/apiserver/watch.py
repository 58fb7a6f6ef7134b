"""Watch streams (GET ...?watch=1): newline-delimited JSON events in HTTP
chunks, from a resourceVersion (replayed from the store's window of changes,
or an ERROR event with 410 Expired when it is older) or from now with the
current objects as ADDED (also with sendInitialEvents, ended by the
initial-events-end bookmark), BOOKMARKs when allowed, Table rows when asked,
until timeoutSeconds or a test hook cuts the stream.

A mixin of the request handler (routing.py).
"""
import json
import queue
import random
import socket
import ssl
import time

from ..selector import SelectorError, parse_field_selector, parse_label_selector
from .errors import ApiError
from .store import Watcher
from .tables import table_for, wants_table


class WatchStream:
    def watch(self, rtype, namespace, query):
        """Serves one watch request until it ends."""
        api = self.api
        try:
            lreqs = parse_label_selector(query.get("labelSelector"))
            freqs = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as e:
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
            else:
                try:
                    n = int(rv)
                except ValueError:
                    raise ApiError(400, "BadRequest", 'invalid resource version "%s"' % rv)
                if n < api.store.compacted:
                    gone = "too old resource version: %d (%d)" % (n, api.store.compacted)
                else:
                    api.store.replay(w, n)
            if gone is None:
                # what /_emulator/watches shows: who watches what, since when
                w.user = self._user[0] if getattr(self, "_user", None) else None
                w.path = self.path
                w.opened_after = api.requests_logged
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
                    put_at, (etype, obj) = w.q.get(timeout=min(left, 1.0))
                except queue.Empty:
                    continue
                # A real API server's watch cache delivers a change a little
                # after the write's response (per resource, with settings):
                # later events queue behind this one, so order is kept.
                delay = api.watch_delays.get(rtype.plural, 0.0)
                if delay > 0 and etype != "CUT":
                    time.sleep(max(0.0, put_at + delay - time.monotonic()))
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
