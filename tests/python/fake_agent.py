"""A stand-in for `kubeps-agent --serve`, written from docs/sidecar-protocol.md.

The Python client's tests run against it until the real agent is there; it
follows the document, not the client, so a client that drifts from the
protocol fails here as it would against the agent.  It serves one session at
a time on `agent.sock` in a directory, writes `agent.json` atomically, keeps
the declared tensors in a shared-memory file, and plays the parameter servers
itself (fake_servers.py): one value per key with a version, sync or async, the servers'
optimizer `sgd` (value -= learning_rate * gradient) or `none` (the value is
the averaged gradient), spec.nonFinite `Fail` (a push holding NaN or Inf
refused whole) or `SkipStep` (a push's update skipped whole; with `none` the
gradient is handed on as it is), and every version's values kept so a
rollback can go back exactly.  Gradients of the other workers are taken equal to this
worker's, so the average is the pushed gradient.  An elastic job's schedule is a function
of the step (`schedule`); while this worker waits to be taken in, the others compute up to
its first step, each step's mean gradient all ones.

What tests can do besides talking the protocol: read `events` (every request,
with its CLOCK_MONOTONIC arrival time in ns, comparable across processes),
`violations` (protocol rules the client broke: a grads region written before
its push was waited for, a push of a step the servers are not at), arm a
rollback, hold barriers, delay pushes.

Run alone (a subprocess, as the real agent is): python3 fake_agent.py DIR [options].
"""

import argparse
import array
import collections
import json
import mmap
import os
import secrets
import signal
import socket
import struct
import sys
import threading
import time

from fake_servers import RequestError, Servers

PROTOCOL = 1
MAX_MESSAGE = 64 << 20
ALIGN = 64
LENGTH = struct.Struct("<I")
# A pull that no push can satisfy would hang a test forever; fail it instead.
PULL_GIVE_UP_S = 30.0


def send_message(sock, lock, message):
    body = json.dumps(message).encode("utf-8")
    with lock:
        sock.sendall(LENGTH.pack(len(body)) + body)


def receive_exactly(sock, count):
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class Transfer:
    """One push or pull moving in the background; `error` is a RequestError or None."""

    def __init__(self, op, names, step, generation):
        self.op = op
        self.names = names
        self.step = step
        self.generation = generation
        self.done = threading.Event()
        self.error = None


class FakeAgent:
    def __init__(self, socket_dir, rank=0, size=1, num_servers=1, mode="sync", optimizer="sgd",
                 learning_rate=0.5, non_finite="Fail", server_values=None, start_step=0,
                 push_delay_s=0.0,
                 json_delay_s=0.0, write_json=True, nonce=None, schedule=None, batch_size=64,
                 checkpoint_interval=0, answers_checkpoints=True, damaged_checkpoint=False,
                 step_said_last=0):
        self.socket_dir = socket_dir
        # Async: the step after the one this worker's program pushed last with success (the
        # one in flight where its push was not waited for), or its agent's predecessor said:
        # where an async program starts, its steps its own.
        self.step_said_last = step_said_last
        self.rank, self.size, self.num_servers = rank, size, num_servers
        self.push_delay_s = push_delay_s
        # Elastic: step -> (member, position, count, first, end, global_batch, next_member_step).
        self.schedule = schedule
        self.batch_size = batch_size
        self.checkpoint_interval = checkpoint_interval  # 0: not said, as an older agent
        # `checkpoints`: the servers write each multiple of the interval as they reach it,
        # but those after an armed rollback's resume step; False: "unknown op", as an older
        # agent.  damaged_checkpoint: those too, and a server finds the newest damaged when
        # the armed rollback comes, which goes back further than the step said.
        self.answers_checkpoints = answers_checkpoints
        self.damaged_checkpoint = damaged_checkpoint
        self.asked_checkpoints = 0
        self.computed = False  # a push was made: not a member any more is scaled away
        self.json_delay_s = json_delay_s
        self.write_json = write_json
        self.nonce = nonce or secrets.token_hex(16)
        self.servers = Servers(mode, optimizer, learning_rate, non_finite)
        for name, values in (server_values or {}).items():
            self.servers.store_initial(name, array.array("f", values).tobytes(), start_step)
        self.events = []
        self.violations = []
        self.held_state_requests = []  # (start, own_state_steps) of each init that went back
        self.exit_code = None  # 0 once a finished session ended: the agent would exit
        self.holding_barriers = set()  # names whose barrier waits for release_barrier()
        self._released = set()
        self._rollback = None  # (at_step, resume_step)
        self._rollback_on_wait = None  # (name, resume_step)
        self._lock = threading.Lock()
        self._session = None
        self._listener = None
        self._stopping = False
        self.stopped = threading.Event()

    # ---- control, for tests
    def start(self):
        os.makedirs(self.socket_dir, exist_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.path.join(self.socket_dir, "agent.sock"))
        self._listener.listen(8)
        threading.Thread(target=self._serve, name="fake-agent", daemon=True).start()
        return self

    def stop(self):
        self._stopping = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        session = self._session
        if session is not None:
            session.close()
            session.ended.wait(PULL_GIVE_UP_S)
        self.stopped.wait(5)

    def arm_rollback(self, at_step, resume_step):
        """The first push of a step >= at_step finds a server restarted: the job rolls back."""
        self._rollback = (at_step, resume_step)

    def arm_rollback_on_wait(self, name, resume_step):
        """The next wait for an exchange of tensor `name` finds its server restarted while the
        exchange travelled: the job rolls back, and the exchanges of other tensors, waited
        for apart, are not touched."""
        self._rollback_on_wait = (name, resume_step)

    def release_barrier(self, name):
        with self.servers.cond:
            self._released.add(name)
            self.servers.cond.notify_all()

    def ops(self):
        return [op for _, op, _ in self.events]

    # ---- serving
    def _serve(self):
        if self.write_json:
            if self.json_delay_s:
                time.sleep(self.json_delay_s)
            info = {"protocol": PROTOCOL, "job": "fake-job", "replica": "worker-%d" % self.rank,
                    "nonce": self.nonce, "pid": os.getpid()}
            temporary = os.path.join(self.socket_dir, ".agent.json.tmp")
            with open(temporary, "w") as f:
                json.dump(info, f)
            os.rename(temporary, os.path.join(self.socket_dir, "agent.json"))
        try:
            while not self._stopping:
                try:
                    conn, _ = self._listener.accept()
                except OSError:
                    break
                with self._lock:
                    busy = self._session is not None
                    if not busy:
                        self._session = Session(self, conn)
                        threading.Thread(target=self._session.run, daemon=True).start()
                if busy:
                    threading.Thread(target=self._refuse, args=(conn,), daemon=True).start()
        finally:
            self.stopped.set()

    def _refuse(self, conn):
        header = receive_exactly(conn, 4)
        request = {}
        if header is not None:
            body = receive_exactly(conn, LENGTH.unpack(header)[0]) or b"{}"
            try:
                request = json.loads(body)
            except ValueError:
                pass
        holder = self._session.client_pid if self._session else None
        send_message(conn, threading.Lock(), {
            "id": request.get("id"), "ok": False, "code": "FailedPrecondition",
            "error": "this kubeps agent already serves a training process (pid %s); a worker "
                     "pod runs one" % holder})
        conn.close()

    def await_session_end(self, timeout=5.0):
        """Returns once the agent has seen its program's connection close (a restarted
        program's hello is refused until then, as the real agent's)."""
        deadline = time.monotonic() + timeout
        while self._session is not None:
            if time.monotonic() > deadline:
                raise AssertionError("the agent still serves a session after %.0f s" % timeout)
            time.sleep(0.01)

    def _session_ended(self, session):
        with self._lock:
            self._session = None
        if session.finished:
            self.exit_code = 0
            self._stopping = True
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Session:
    """One client connection: requests answered as they come, blocking ones on threads."""

    def __init__(self, agent, conn):
        self.agent = agent
        self.servers = agent.servers
        self.conn = conn
        self.send_lock = threading.Lock()
        self.client_pid = None
        self.said_hello = False
        self.tensors = None  # name -> dict(key, numel, values, grads)
        self.by_key = {}
        self.mapping = None
        self.file = None
        self.initialized = False
        # The steps membership said this worker computes: the agent keeps its last 8 answers.
        self.member_steps = collections.deque(maxlen=8)
        self.finished = False
        self.transfers = {}  # handle -> list of Transfer
        self.waited = set()
        self.next_handle = 1
        self.generation = self.servers.generation  # the generation the client has seen
        self.threads = []
        self.ended = threading.Event()
        self.closing = False

    def run(self):
        try:
            while True:
                header = receive_exactly(self.conn, 4)
                if header is None:
                    break
                (length,) = LENGTH.unpack(header)
                if length > MAX_MESSAGE:
                    self.reply_error(None, RequestError(
                        "InvalidArgument", "message of %d bytes, over the 64 MiB limit" % length))
                    break
                body = receive_exactly(self.conn, length)
                if body is None:
                    break
                try:
                    request = json.loads(body.decode("utf-8"))
                except ValueError as error:
                    self.reply_error(None, RequestError("InvalidArgument", "not JSON: %s" % error))
                    break
                self.handle(request)
        except OSError:
            pass
        finally:
            self.end()

    def close(self):
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def end(self):
        with self.servers.cond:
            self.closing = True  # a barrier nobody will hear of is abandoned
            self.servers.cond.notify_all()
        for thread in list(self.threads):
            thread.join(PULL_GIVE_UP_S)
        self.conn.close()
        if self.mapping is not None:
            self.mapping.close()
            try:
                os.unlink(self.file)
            except FileNotFoundError:
                pass
        self.agent._session_ended(self)
        self.ended.set()

    def reply(self, request_id, **fields):
        try:
            send_message(self.conn, self.send_lock, dict(fields, id=request_id, ok=True))
        except OSError:
            pass

    def reply_error(self, request_id, error):
        try:
            send_message(self.conn, self.send_lock, dict(
                error.fields, id=request_id, ok=False, code=error.code, error=str(error)))
        except OSError:
            pass

    def handle(self, request):
        op, request_id = request.get("op"), request.get("id")
        self.agent.events.append((time.monotonic_ns(), op, request))
        if not isinstance(request_id, int) or request_id < 0:
            self.reply_error(request_id, RequestError("InvalidArgument", "no unsigned id"))
            return
        method = getattr(self, "op_" + str(op), None)
        if method is None:
            self.reply_error(request_id, RequestError("InvalidArgument", "unknown op %r" % op))
            return
        try:
            if op != "hello" and not self.said_hello:
                raise RequestError("FailedPrecondition", "%s before hello" % op)
            result = method(request)
        except RequestError as error:
            self.reply_error(request_id, error)
            return
        if callable(result):  # blocks: answer from a thread
            def answer():
                try:
                    self.reply(request_id, **(result() or {}))
                except RequestError as error:
                    self.reply_error(request_id, error)
            thread = threading.Thread(target=answer, daemon=True)
            self.threads.append(thread)
            thread.start()
            return
        self.reply(request_id, **(result or {}))
        if op == "bye":
            self.close()

    # ---- the requests of the protocol's table
    def op_hello(self, request):
        if self.said_hello:
            raise RequestError("FailedPrecondition", "hello was already said")
        if request.get("protocol") != PROTOCOL:
            raise RequestError("InvalidArgument", "protocol %r; this agent speaks %d"
                               % (request.get("protocol"), PROTOCOL))
        if request.get("nonce") != self.agent.nonce:
            raise RequestError("InvalidArgument", "nonce %r is not this agent's (%s): a "
                               "mis-mounted directory?" % (request.get("nonce"),
                                                          self.agent.socket_dir))
        self.said_hello = True
        self.client_pid = request.get("pid")
        answer = {"rank": self.agent.rank, "size": self.agent.size,
                  "num_servers": self.agent.num_servers, "mode": self.servers.mode,
                  "optimizer": self.servers.optimizer, "non_finite": self.servers.non_finite,
                  "elastic": self.agent.schedule is not None,
                  "checkpoint_interval": self.agent.checkpoint_interval}
        if self.agent.batch_size is not None:  # None: not said, as an older agent
            answer["batch_size"] = self.agent.batch_size
        return answer

    def op_declare(self, request):
        if self.tensors is not None:
            raise RequestError("FailedPrecondition", "declare was already done")
        tensors = request.get("tensors")
        if not isinstance(tensors, list) or not tensors:
            raise RequestError("InvalidArgument", "tensors: an empty list")
        layout, offset, seen = [], 0, set()
        for entry in tensors:
            name, shape = entry.get("name"), entry.get("shape")
            if entry.get("dtype") != "float32":
                raise RequestError("InvalidArgument", "tensor %r: dtype %r, only float32"
                                   % (name, entry.get("dtype")))
            if not isinstance(shape, list) or any(  # [] is a scalar: no dimension < 1
                    not isinstance(d, int) or d < 1 for d in shape):
                raise RequestError("InvalidArgument", "tensor %r: shape %r, every dimension "
                                   "must be >= 1" % (name, shape))
            if name in seen:
                raise RequestError("InvalidArgument", "tensor %r declared twice" % name)
            seen.add(name)
            numel = 1
            for d in shape:
                numel *= d
            values = offset
            grads = align(values + 4 * numel)
            offset = align(grads + 4 * numel)
            layout.append({"name": name, "key": len(layout), "numel": numel, "values": values,
                           "grads": grads})
        file_name = "tensors-%s.shm" % self.agent.nonce[:8]
        self.file = os.path.join(self.agent.socket_dir, file_name)
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, offset)
        self.mapping = mmap.mmap(fd, offset)
        os.close(fd)
        self.tensors = {t["name"]: t for t in layout}
        self.by_key = {t["key"]: t for t in layout}
        return {"file": file_name, "bytes": offset, "tensors": layout}

    def region(self, tensor, which):
        start = tensor[which]
        return start, start + 4 * tensor["numel"]

    def op_init(self, request):
        if self.tensors is None:
            raise RequestError("FailedPrecondition", "init before declare")
        if self.initialized:
            raise RequestError("FailedPrecondition", "init was already done")
        for name, tensor in self.tensors.items():
            start, end = self.region(tensor, "values")
            self.servers.store_initial(name, bytes(self.mapping[start:end]), 0)
        for name, tensor in self.tensors.items():
            start, end = self.region(tensor, "values")
            self.mapping[start:end] = self.servers.current(name)
        start = min(self.servers.version[name] for name in self.tensors)
        if self.servers.mode == "async":
            start = self.agent.step_said_last  # the versions count every worker's updates
        needs_own_state = (start > 0 and self.servers.mode == "sync" and
                           self.servers.optimizer == "none")
        held = request.get("own_state_steps")
        if needs_own_state and held is not None and start not in held:
            # As the agent, with servers holding every step: the job goes back to the
            # newest step the program holds.
            self.agent.held_state_requests.append((start, list(held)))
            back = [step for step in held if step <= start]
            if not back:
                raise RequestError("FailedPrecondition", "init: the program holds its own "
                                   "state of steps %s, not of step %d" % (held, start),
                                   reason="ProgramStateMissing")
            start = max(back)
            self.servers.go_back_to(start)
        if needs_own_state and not request.get("restores_own_state"):
            # As the agent: the servers hold averaged gradients, not parameters.
            raise RequestError("FailedPrecondition", "init: this process starts at step %d, "
                               "but the servers' optimizer is none" % start,
                               reason="ProgramStateMissing")
        self.initialized = True
        return {"step": start}

    def check_keys(self, request, with_numel):
        if not self.initialized:
            raise RequestError("FailedPrecondition", "%s before init" % request["op"])
        keys = request.get("keys")
        if keys is None and not with_numel:
            return [t["name"] for t in self.by_key.values()]
        if not isinstance(keys, list) or not keys:
            raise RequestError("InvalidArgument", "keys: expected a non-empty list")
        for key in keys:
            if key not in self.by_key:
                raise RequestError("NotFound", "no tensor has key %r" % (key,))
        if with_numel:
            numel = request.get("numel")
            if not isinstance(numel, list) or len(numel) != len(keys):
                raise RequestError("InvalidArgument", "numel: expected one per key")
            for key, n in zip(keys, numel):
                tensor = self.by_key[key]
                if n != tensor["numel"]:
                    raise RequestError("InvalidArgument", "tensor %r (key %d): numel %r, but it "
                                       "was declared with %d" % (tensor["name"], key, n,
                                                                 tensor["numel"]))
        return [self.by_key[key]["name"] for key in keys]

    def new_handle(self, transfers):
        handle = self.next_handle
        self.next_handle += 1
        self.transfers[handle] = transfers
        return {"handle": handle}

    def op_membership(self, request):
        if not self.initialized:
            raise RequestError("FailedPrecondition", "membership before init")
        step = int(request["step"])
        if self.agent.schedule is None:
            size, rank = self.agent.size, self.agent.rank
            batch = self.agent.batch_size * size
            share = (True, rank, size, batch * rank // size, batch * (rank + 1) // size, batch,
                     None)
        else:
            share = self.agent.schedule(step)
        member, position, count, first, end, global_batch, later = share
        if member:
            self.member_steps.append(step)
        elif later is not None:
            self.servers.others_compute_to(later)
        answer = {"member": member, "position": position, "count": count,
                  "first_example": first, "end_example": end, "global_batch": global_batch,
                  "scaled_away": not member and later is None and self.agent.computed}
        if later is not None:
            answer["next_member_step"] = later
        return answer

    def op_checkpoints(self, request):
        if not self.agent.answers_checkpoints:
            raise RequestError("InvalidArgument", "unknown op 'checkpoints'")
        if not self.initialized or self.finished:
            raise RequestError("FailedPrecondition", "checkpoints before init or after finish")
        self.agent.asked_checkpoints += 1
        interval = self.agent.checkpoint_interval
        if not interval:
            return {"newest_common_step": -1}
        with self.servers.cond:
            reached = min(self.servers.version.values(), default=0)
        common = reached - reached % interval
        for armed in (self.agent._rollback, self.agent._rollback_on_wait):
            if armed is not None and not self.agent.damaged_checkpoint:
                common = min(common, armed[1])  # the checkpoints after it are not all written
        return {"newest_common_step": common}

    def check_member(self, step):
        if self.agent.schedule is not None and step not in self.member_steps:
            self.agent.violations.append("push of step %d, which membership did not say this "
                                         "worker computes" % step)
        self.agent.computed = True

    def op_push(self, request):
        names = self.check_keys(request, with_numel=True)
        self.check_member(int(request.get("step", -1)))
        return self.new_handle([self.start_push(names, int(request.get("step", -1)))])

    def op_pull(self, request):
        names = self.check_keys(request, with_numel=False)
        return self.new_handle([self.start_pull(names, int(request.get("min_version", 0)))])

    def op_push_pull(self, request):
        names = self.check_keys(request, with_numel=True)
        step = int(request.get("step", -1))
        self.check_member(step)
        push = self.start_push(names, step)
        return self.new_handle([push, self.start_pull(names, step + 1, after=push)])

    def start_push(self, names, step):
        rollback = self.agent._rollback
        if rollback is not None and step >= rollback[0]:
            self.agent._rollback = None
            self.servers.roll_back(rollback[1])  # a server restarted from its checkpoint
        if self.servers.mode == "async":
            self.agent.step_said_last = max(self.agent.step_said_last, step)  # in flight
        transfer = Transfer("push", names, step, self.generation)
        snapshot = {name: bytes(self.mapping[slice(*self.region(self.tensors[name], "grads"))])
                    for name in names}

        def move():
            if self.agent.push_delay_s:
                time.sleep(self.agent.push_delay_s)
            if transfer.generation != self.servers.generation:
                transfer.error = self.aborted()
            else:
                gradients = {}
                for name in names:
                    data = bytes(self.mapping[slice(*self.region(self.tensors[name], "grads"))])
                    if data != snapshot[name]:
                        self.agent.violations.append(
                            "the grads region of %r was written while its push of step %d was "
                            "in flight" % (name, step))
                    gradients[name] = data
                transfer.error, skip = self.servers.judge_non_finite(gradients, step)
                for name, data in gradients.items():
                    if transfer.error is not None:
                        break
                    violation = self.servers.apply_push(name, data, step, skip)
                    if violation:
                        self.agent.violations.append(violation)
            transfer.done.set()
        self.spawn(move)
        return transfer

    def start_pull(self, names, min_version, after=None):
        transfer = Transfer("pull", names, min_version, self.generation)

        def move():
            if after is not None:
                after.done.wait()
                if after.error is not None:  # the push failed: nothing to pull
                    transfer.done.set()
                    return
            deadline = time.monotonic() + PULL_GIVE_UP_S
            with self.servers.cond:
                while (transfer.generation == self.servers.generation and
                       any(self.servers.version[n] < min_version for n in names)):
                    if not self.servers.cond.wait(max(0.0, deadline - time.monotonic())):
                        transfer.error = RequestError(
                            "Unavailable", "pull of version %d: no such version after %.0f s"
                            % (min_version, PULL_GIVE_UP_S))
                        break
                if transfer.error is None and transfer.generation != self.servers.generation:
                    transfer.error = self.aborted()
                if transfer.error is None:
                    for name in names:
                        start, end = self.region(self.tensors[name], "values")
                        self.mapping[start:end] = self.servers.values_for_pull(name, min_version)
            transfer.done.set()
        self.spawn(move)
        return transfer

    def aborted(self):
        return RequestError("Aborted", "the job rolled back to step %d"
                            % self.servers.resume_step, resume_step=self.servers.resume_step)

    def spawn(self, target):
        thread = threading.Thread(target=target, daemon=True)
        self.threads.append(thread)
        thread.start()

    def op_wait(self, request):
        handles = request.get("handles")
        if not isinstance(handles, list) or not handles:
            raise RequestError("InvalidArgument", "handles: expected a non-empty list")
        for handle in handles:
            if handle in self.waited:
                raise RequestError("FailedPrecondition", "handle %r was already waited for"
                                   % (handle,))
            if handle not in self.transfers:
                raise RequestError("NotFound", "no handle %r" % (handle,))
        self.waited.update(handles)
        transfers = [t for handle in handles for t in self.transfers.pop(handle)]

        def finish_wait():
            for transfer in transfers:
                transfer.done.wait()
            armed = self.agent._rollback_on_wait
            if armed and any(armed[0] in t.names for t in transfers):
                self.agent._rollback_on_wait = None
                self.servers.roll_back(armed[1])
                for transfer in transfers:
                    transfer.error = self.aborted()
            errors = [t.error for t in transfers if t.error is not None]
            if any(e.code == "Aborted" for e in errors):
                self.recover()
                raise self.aborted()
            if errors:
                raise errors[0]
            if self.servers.mode == "async":
                for transfer in transfers:  # a push waited for: its step is done
                    if transfer.op == "push":
                        self.agent.step_said_last = max(self.agent.step_said_last,
                                                        transfer.step + 1)
        return finish_wait

    def recover(self):
        """Before the Aborted reply: values of the resume step in every values region."""
        with self.servers.cond:
            for name, tensor in self.tensors.items():
                start, end = self.region(tensor, "values")
                self.mapping[start:end] = self.servers.current(name)
            self.generation = self.servers.generation

    def op_barrier(self, request):
        name = request.get("name")

        def reach():
            with self.servers.cond:
                while (name in self.agent.holding_barriers and name not in self.agent._released
                       and not self.closing):
                    self.servers.cond.wait()
        return reach

    def op_finish(self, request):
        if not self.initialized:
            raise RequestError("FailedPrecondition", "finish before init")
        self.finished = True

    def op_bye(self, request):
        return None


def align(offset):
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def main():
    parser = argparse.ArgumentParser(description="A stand-in kubeps agent (sidecar protocol 1)")
    parser.add_argument("socket_dir")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--mode", default="sync")
    parser.add_argument("--learning-rate", type=float, default=0.5)
    parser.add_argument("--rollback-at", type=int, help="roll back at the first push of this step")
    parser.add_argument("--resume-step", type=int, default=0)
    args = parser.parse_args()
    agent = FakeAgent(args.socket_dir, rank=args.rank, size=args.size, mode=args.mode,
                      optimizer=args.optimizer, learning_rate=args.learning_rate)
    if args.rollback_at is not None:
        agent.arm_rollback(args.rollback_at, args.resume_step)
    signal.signal(signal.SIGTERM, lambda *unused: agent.stop())
    agent.start()
    agent.stopped.wait()
    for violation in agent.violations:
        print("fake agent: protocol violation: %s" % violation, file=sys.stderr)
    sys.exit(1 if agent.violations else (agent.exit_code if agent.exit_code is not None else 1))


if __name__ == "__main__":
    main()
