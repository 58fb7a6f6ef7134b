"""The shared-memory file that holds the declared tensors' bytes.

At `declare` the agent creates one file in the shared directory and answers,
for each tensor, two byte offsets into it: its `values` region (parameters
pulled from the servers, or initial values written before `init`) and its
`grads` region (gradients a `push` reads).  Both processes map the file, so
tensor bytes never cross the socket: the agent pushes straight from the
mapping and pulls straight into it.

This module maps the file and hands out views with no copy: `memoryview`s of
float32 here (standard library only), and `kubeps.torch` makes torch tensors
over the same mapping with `torch.frombuffer`.
"""

import math
import mmap
import os

from kubeps.errors import FailedPrecondition, Internal, NotFound

FLOAT32_BYTES = 4


class TensorSlot:
    """Where one declared tensor lives in the mapping (byte offsets) and what it is."""

    __slots__ = ("name", "key", "shape", "numel", "values_offset", "grads_offset")

    def __init__(self, name, key, shape, numel, values_offset, grads_offset):
        self.name = name
        self.key = key
        self.shape = tuple(shape)
        self.numel = numel
        self.values_offset = values_offset
        self.grads_offset = grads_offset

    @property
    def nbytes(self):
        return self.numel * FLOAT32_BYTES

    def __repr__(self):
        return "TensorSlot(%r, key=%d, shape=%s)" % (self.name, self.key, list(self.shape))


class SharedTensors:
    """The mapped file of one session and the slot of each declared tensor.

    Not thread-safe to close while views are in use; views themselves are
    plain memory and follow the protocol's rule: write a `grads` region only
    after the push that reads it was waited for, read a `values` region only
    after its pull was waited for.
    """

    def __init__(self, path, size_bytes, slots):
        self.path = path
        self.size_bytes = size_bytes
        self.slots = list(slots)
        self._by_name = {slot.name: slot for slot in self.slots}
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual < size_bytes:
                raise Internal("the kubeps agent's tensor file %s has %d bytes; its declare "
                               "reply said %d" % (path, actual, size_bytes))
            self.buffer = mmap.mmap(fd, size_bytes, mmap.MAP_SHARED,
                                    mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping keeps the file; the agent deletes it at session end

    @classmethod
    def from_declare_reply(cls, socket_dir, requested, reply):
        """Checks the agent's `declare` reply against the request and maps its file.

        `requested` is the declared list of (name, shape) in key order.
        """
        answered = reply.get("tensors")
        if not isinstance(answered, list) or len(answered) != len(requested):
            raise Internal("declare: the kubeps agent answered %s tensors for %d declared"
                           % (len(answered) if isinstance(answered, list) else "no",
                              len(requested)))
        size_bytes = int(reply["bytes"])
        slots = []
        for (name, shape), entry in zip(requested, answered):
            numel = math.prod(shape)
            if entry.get("name") != name or int(entry.get("numel", -1)) != numel:
                raise Internal("declare: the kubeps agent answered %r with %s elements where %r "
                               "with %d was declared" % (entry.get("name"), entry.get("numel"),
                                                         name, numel))
            slot = TensorSlot(name, int(entry["key"]), shape, numel, int(entry["values"]),
                              int(entry["grads"]))
            for region, offset in (("values", slot.values_offset), ("grads", slot.grads_offset)):
                if offset < 0 or offset + slot.nbytes > size_bytes:
                    raise Internal("declare: the %s region of %r (offset %d, %d bytes) lies "
                                   "outside the %d-byte file" % (region, name, offset,
                                                                 slot.nbytes, size_bytes))
            slots.append(slot)
        return cls(os.path.join(socket_dir, reply["file"]), size_bytes, slots)

    def slot(self, name):
        """The slot of a declared tensor; NotFound names the tensor otherwise."""
        slot = self._by_name.get(name)
        if slot is None:
            raise NotFound("no tensor named %r was declared (declared: %s)"
                           % (name, describe_names(self._by_name)))
        return slot

    def __contains__(self, name):
        return name in self._by_name

    def values(self, name):
        """A writable float32 memoryview of the tensor's values region (flat)."""
        slot = self.slot(name)
        return self._view(slot.values_offset, slot.nbytes)

    def grads(self, name):
        """A writable float32 memoryview of the tensor's grads region (flat)."""
        slot = self.slot(name)
        return self._view(slot.grads_offset, slot.nbytes)

    def _view(self, offset, nbytes):
        if self.buffer is None:
            raise FailedPrecondition("the tensors in %s are no longer mapped: their session "
                                     "with the kubeps agent ended" % self.path)
        return memoryview(self.buffer)[offset:offset + nbytes].cast("f")

    def close(self):
        """Lets go of the mapping; it is unmapped once the last view of it is gone.

        Never unmapped explicitly: a torch tensor made by torch.frombuffer holds
        a reference to the mmap object but no buffer export, so closing the
        mmap under it would leave the tensor pointing at unmapped memory.
        """
        self.buffer = None


def describe_names(names, limit=8):
    """'a, b, c' for error messages, cut after `limit` names."""
    names = list(names)
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += ", ... (%d in all)" % len(names)
    return shown or "none"
