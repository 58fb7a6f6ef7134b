"""The object store, what etcd and the watch cache are to the real server:
the objects of every resource type, one global resourceVersion counter, the
window of recent changes a watch can resume from (older ones get 410 Gone),
and the fan-out of each change to the open watches that match it.
"""
import collections
import queue
import threading
import time

from ..selector import fields_match, labels_match


class StampedQueue(queue.Queue):
    """A queue whose get() answers (when it was put, item), so a consumer
    can hold an item back until a delay after its put has passed."""

    def put(self, item, block=True, timeout=None):
        super().put((time.monotonic(), item), block, timeout)


class Watcher:
    """One open watch: what it selects and the queue of events for its stream."""

    def __init__(self, rtype, namespace, label_reqs, field_reqs, bookmarks, name=None):
        self.rtype, self.namespace = rtype, namespace
        self.label_reqs, self.field_reqs = label_reqs, field_reqs
        self.bookmarks = bookmarks
        self.q = StampedQueue()

    def matches(self, obj):
        if obj is None:
            return False
        md = obj.get("metadata", {})
        if self.namespace is not None and md.get("namespace") != self.namespace:
            return False
        return labels_match(self.label_reqs, md.get("labels")) and \
            fields_match(self.field_reqs, obj)


class Store:
    """Every object, by resource type and (namespace, name). Writers hold
    `lock` around read-modify-write; put() gives each write the next
    resourceVersion and records it for the watches."""

    def __init__(self, event_window=1000):
        self.lock = threading.RLock()
        self.rv = 1
        # called with the lock held after every write: what follows a change
        # at once (the quota usage of a namespace)
        self.after_put = None
        self.types = {}        # (group, plural) -> ResourceType (storage/served version)
        self.objects = collections.defaultdict(dict)   # (group, plural) -> {(ns, name): obj}
        self.by_uid = {}       # uid -> ((group, plural), (ns, name))
        self.log = collections.deque(maxlen=event_window)   # (rv, key, type, obj, old)
        self.compacted = 1     # a watch from rv >= compacted can be served
        self.watchers = set()
        self.gc_queue = StampedQueue()
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
                self.deliver(w, etype, obj, old)
        self.log_changed.notify_all()

    @staticmethod
    def deliver(w, etype, obj, old):
        """Queues one change on watch `w` as the event that watch sees: an
        object that stops matching is DELETED for it, one that starts to
        match ADDED."""
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

    def replay(self, w, since):
        """Queues on `w` the recorded changes of its type after resourceVersion
        `since` (the caller checked that `since` is not compacted away)."""
        for erv, key, etype, obj, old in self.log:
            if erv > since and key == w.rtype.key:
                self.deliver(w, etype, obj, old)

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
            if self.after_put is not None:
                self.after_put(rtype, obj)
            return obj

    def find_uid(self, uid):
        with self.lock:
            loc = self.by_uid.get(uid)
            if not loc:
                return None
            return self.objects[loc[0]].get(loc[1])
