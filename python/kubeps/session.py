"""One session with the pod's kubeps agent: the protocol's requests as methods.

`kubeps/__init__.py` keeps one Session per process behind module functions;
this class is the whole of it, usable on its own (tests make several).
"""

import collections
import os
import threading

from kubeps import client
from kubeps.errors import FailedPrecondition, InvalidArgument, NotFound
from kubeps.shared_tensors import SharedTensors, describe_names

DTYPE = "float32"


class Handle:
    """A push, pull or push_pull in flight; pass it to `wait`.

    The request was sent when the handle was made; its reply (the agent's
    handle number) is collected by `wait`, so making a handle never blocks.
    """

    __slots__ = ("op", "names", "step", "_reply", "waited")

    def __init__(self, op, names, step, reply):
        self.op = op
        self.names = names
        self.step = step
        self._reply = reply
        self.waited = False

    def agent_handle(self):
        """The agent's handle number; raises the request's own error if it failed."""
        return int(self._reply.result()["handle"])

    def __repr__(self):
        return "Handle(%s %s, step %s)" % (self.op, describe_names(self.names, limit=3), self.step)


class Membership(collections.namedtuple("Membership", [
        "member", "position", "count", "first_example", "end_example", "global_batch",
        "next_member_step", "scaled_away"])):
    """What this worker does at one step (the agent's answer to `membership`).

    member: it computes the step, on the examples [first_example, end_example)
    of the step's global batch of global_batch (its run `position` of `count`
    in rank order).  Not a member: it is taken in from next_member_step (pull
    that step's parameters and start there); with none, scaled_away says it
    computed steps before and has left the job (finish), else it waits to be
    taken in.  A fixed job's worker is a member of every step.
    """

    @classmethod
    def from_reply(cls, reply):
        later = reply.get("next_member_step")
        return cls(bool(reply["member"]), int(reply["position"]), int(reply["count"]),
                   int(reply["first_example"]), int(reply["end_example"]),
                   int(reply["global_batch"]), None if later is None else int(later),
                   bool(reply.get("scaled_away", False)))


class Session:
    """A connection to the agent after `hello`, with what the agent told about the worker.

    Thread-safe for push, pull, push_pull, wait and barrier (each handle
    waited for once); declare and init_tensors come once, in that order.
    """

    def __init__(self, socket_dir, timeout_s):
        self.socket_dir = socket_dir
        self._connection, self.agent_info = client.connect(socket_dir, timeout_s)
        try:
            nonce = self.agent_info.get("nonce")
            hello = self._connection.call("hello", protocol=client.PROTOCOL_VERSION,
                                          nonce=nonce, pid=os.getpid())
        except BaseException:
            self._connection.close()
            raise
        self.rank = int(hello["rank"])
        self.size = int(hello["size"])
        self.num_servers = int(hello.get("num_servers", 0))
        # spec.nonFinite: what a step whose mean holds NaN or Inf does (Fail, SkipStep).
        self.non_finite = hello.get("non_finite", "Fail")
        self.mode = hello.get("mode", "sync")
        self.server_optimizer = hello.get("optimizer", "")
        # The job's workers may change (elasticPolicy): ask `membership` before each step.
        self.elastic = bool(hello.get("elastic", False))
        self.batch_size = int(hello.get("batch_size", 0))  # spec.batchSize, per worker
        # spec.checkpoint.intervalSteps: the steps a rollback may go back to are its multiples.
        self.checkpoint_interval = int(hello.get("checkpoint_interval", 0))
        self._answers_checkpoints = True  # until an older agent says "unknown op"
        self.tensors = None  # SharedTensors after declare
        self.start_step = None  # the step init_tensors returned
        self._lock = threading.Lock()

    def declare(self, tensors):
        """Declares [(name, shape), ...] in key order; returns the mapped SharedTensors."""
        requested = _check_declaration(tensors)
        with self._lock:
            if self.tensors is not None:
                raise FailedPrecondition(
                    "declare: the tensors are declared once per session, and this session "
                    "declared %s already" % describe_names(s.name for s in self.tensors.slots))
            reply = self._connection.call("declare", tensors=[
                {"name": name, "shape": list(shape), "dtype": DTYPE} for name, shape in requested])
            self.tensors = SharedTensors.from_declare_reply(self.socket_dir, requested, reply)
        return self.tensors

    def init_tensors(self, restores_own_state=False, own_state_steps=None):
        """Sends `init`: the values regions hold this worker's initial values before it, the
        servers' values (rank 0's on a new job) after it.  Returns the step to start from.
        restores_own_state: the program puts back its own state of that step, which the
        agent requires past step 0 when the servers' optimizer is `none`; own_state_steps
        (a list), where given: the only steps it can, so that the job goes back to one."""
        self._require_declared("init")
        fields = {}
        if restores_own_state:
            fields["restores_own_state"] = True
        if own_state_steps is not None:
            fields["own_state_steps"] = [int(step) for step in own_state_steps]
        reply = self._connection.call("init", **fields)
        self.start_step = int(reply["step"])
        return self.start_step

    def push(self, names, step):
        """Pushes the grads regions of `names` as gradients of `step`; returns a Handle."""
        return self._data_request("push", names, step=step)

    def pull(self, names=None, min_version=0):
        """Pulls version >= `min_version` of `names` (all when None) into their values regions."""
        return self._data_request("pull", names, min_version=min_version)

    def push_pull(self, names, step):
        """Pushes gradients of `step`, then pulls version step+1 into the values regions."""
        return self._data_request("push_pull", names, step=step)

    def _data_request(self, op, names, step=None, min_version=None):
        tensors = self._require_declared(op)
        fields = {}
        if names is None:
            slots = tensors.slots
        else:
            if isinstance(names, str):
                names = [names]
            slots = [self._slot(op, name) for name in names]
            fields["keys"] = [slot.key for slot in slots]
        if op == "pull":
            fields["min_version"] = int(min_version)
        else:
            fields["step"] = int(step)
            fields["numel"] = [slot.numel for slot in slots]
        reply = self._connection.submit(op, **fields)
        return Handle(op, [slot.name for slot in slots], step if op != "pull" else min_version,
                      reply)

    def _slot(self, op, name):
        try:
            return self.tensors.slot(name)
        except NotFound as error:
            raise NotFound("%s: %s" % (op, error.message))

    def wait(self, handles):
        """Blocks until every request of `handles` is done; raises the first failure
        (RolledBack when the job rolled back)."""
        if isinstance(handles, Handle):
            handles = [handles]
        handles = list(handles)
        if not handles:
            return
        for handle in handles:
            if handle.waited:
                raise FailedPrecondition("wait: %r was already waited for" % (handle,))
        numbers = []
        refused = None  # the first request the agent refused outright
        for handle in handles:
            handle.waited = True
            try:
                numbers.append(handle.agent_handle())
            except Exception as error:
                refused = refused or error
        # The accepted requests are waited for even when one was refused, so
        # none is left in flight behind the caller's back.
        if numbers:
            self._connection.call("wait", handles=numbers)
        if refused is not None:
            raise refused

    def membership(self, step):
        """What this worker does at `step` (a Membership); blocks until the job's
        scheduler has fixed who computes it."""
        return Membership.from_reply(self._connection.call("membership", step=int(step)))

    def newest_common_checkpoint(self):
        """The newest step every server holds a checkpoint of, as the job's scheduler last
        said: a sync rollback goes back to the newest such step when it happens (or to one
        before, where a server finds that checkpoint damaged or lost).  None where none is
        known yet, or the agent is older than the `checkpoints` request."""
        if self._answers_checkpoints:
            try:
                step = int(self._connection.call("checkpoints")["newest_common_step"])
                return step if step >= 0 else None
            except InvalidArgument:  # "unknown op": an agent older than this client
                self._answers_checkpoints = False
        return None

    def barrier(self, name):
        """Blocks until every worker of the job reached the barrier `name`."""
        self._connection.call("barrier", name=str(name))

    def finish(self):
        """Tells the job this worker is done, then ends the session (the agent serves no other)."""
        self._connection.call("finish")
        self.close()

    def close(self):
        """Ends the session (`bye`) and unmaps the tensors; the worker stays registered."""
        try:
            self._connection.call("bye")
        except client.Unavailable:
            pass  # already gone: the session is over either way
        finally:
            self._connection.close()
            if self.tensors is not None:
                self.tensors.close()

    def _require_declared(self, op):
        if self.tensors is None:
            raise FailedPrecondition("%s: no tensors are declared yet: call declare() first"
                                     % op)
        return self.tensors


def _check_declaration(tensors):
    """[(name, shape)] from pairs or {"name", "shape"} dicts, checked as the agent checks them."""
    requested = []
    seen = set()
    for entry in tensors:
        if isinstance(entry, dict):
            name, shape = entry.get("name"), entry.get("shape")
            if entry.get("dtype", DTYPE) != DTYPE:
                raise InvalidArgument("declare: tensor %r has dtype %r; kubeps carries %s only"
                                      % (name, entry.get("dtype"), DTYPE))
        else:
            name, shape = entry
        if not isinstance(name, str) or not name:
            raise InvalidArgument("declare: a tensor name must be a non-empty string, got %r"
                                  % (name,))
        shape = tuple(int(d) for d in shape)
        if any(d < 1 for d in shape):
            raise InvalidArgument("declare: tensor %r has shape %s; every dimension must be >= 1"
                                  % (name, list(shape)))
        if name in seen:
            raise InvalidArgument("declare: tensor name %r appears twice" % name)
        seen.add(name)
        requested.append((name, shape))
    if not requested:
        raise InvalidArgument("declare: the list of tensors is empty")
    return requested
