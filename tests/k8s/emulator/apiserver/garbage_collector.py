"""Garbage collection: when an object goes away, every object whose
ownerReferences all point at objects that are gone is deleted (background
propagation), recursively; orphaning removes the references instead; a
deleted namespace takes its content with it.

A mixin of Api (api.py): deletions go through Api.delete.
"""
import copy
import sys
import time

from .errors import ApiError


class GarbageCollector:
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
            # Kubernetes' garbage collector deletes dependents in the
            # background, seconds after their owner on a busy cluster.
            put_at, uid = self.store.gc_queue.get()
            time.sleep(max(0.0, put_at + self.gc_delay - time.monotonic()))
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
