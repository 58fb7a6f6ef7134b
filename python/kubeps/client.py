"""The wire side of the sidecar protocol (docs/sidecar-protocol.md).

A message, both ways, is a 4-byte little-endian length and that many bytes of
one UTF-8 JSON object.  Every request carries a client-chosen `id` that its
reply echoes, and replies may come out of order: a `wait` or a `barrier`
blocks in the agent while later requests are answered.  So one
`AgentConnection` owns a reader thread that matches each reply to its
request by id, and requests may be sent from any thread (gradient hooks run
on autograd's threads) while another thread blocks on an earlier reply.

`find_agent` and `connect` implement the rendezvous: wait for the agent's
`agent.json` in the shared directory, then connect to its `agent.sock`.
"""

import json
import os
import socket
import struct
import threading
import time

from kubeps.errors import Internal, InvalidArgument, Unavailable, error_from_reply

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 << 20  # a declaration of tens of thousands of tensors is several MiB
AGENT_JSON = "agent.json"
AGENT_SOCKET = "agent.sock"

_LENGTH = struct.Struct("<I")
# How often the rendezvous looks again for agent.json and agent.sock.
_RENDEZVOUS_POLL_S = 0.05


def encode_message(message):
    """The frame of one JSON object; raises InvalidArgument past the protocol's 64 MiB."""
    body = json.dumps(message, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_MESSAGE_BYTES:
        raise InvalidArgument(
            "%s: the request is %d bytes, over the sidecar protocol's limit of %d bytes "
            "(64 MiB)" % (message.get("op", "message"), len(body), MAX_MESSAGE_BYTES))
    return _LENGTH.pack(len(body)) + body


def _receive_exactly(sock, count):
    """`count` bytes from `sock`, or None when the peer closed before the first byte."""
    buffer = bytearray(count)
    view = memoryview(buffer)
    received = 0
    while received < count:
        n = sock.recv_into(view[received:])
        if n == 0:
            if received == 0:
                return None
            raise Unavailable("the kubeps agent closed the connection in the middle of a message")
        received += n
    return bytes(buffer)


def read_message(sock):
    """The next JSON object from `sock`, or None at a clean end of stream."""
    header = _receive_exactly(sock, _LENGTH.size)
    if header is None:
        return None
    (length,) = _LENGTH.unpack(header)
    if length > MAX_MESSAGE_BYTES:
        raise Internal("the kubeps agent sent a message of %d bytes, over the protocol's 64 MiB"
                       % length)
    body = _receive_exactly(sock, length) if length else b""
    if body is None:
        raise Unavailable("the kubeps agent closed the connection in the middle of a message")
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise Internal("the kubeps agent sent a message that is not UTF-8 JSON: %s" % error)
    if not isinstance(message, dict):
        raise Internal("the kubeps agent sent a JSON %s, not an object" % type(message).__name__)
    return message


class PendingReply:
    """The reply to one request, filled in by the connection's reader thread."""

    __slots__ = ("op", "_done", "_reply", "_error")

    def __init__(self, op):
        self.op = op
        self._done = threading.Event()
        self._reply = None
        self._error = None

    def _set_reply(self, reply):
        self._reply = reply
        self._done.set()

    def _set_error(self, error):
        self._error = error
        self._done.set()

    def done(self):
        return self._done.is_set()

    def result(self):
        """The reply's fields; raises the KubepsError of a failed reply."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        if self._reply.get("ok") is True:
            return self._reply
        raise error_from_reply(self._reply, self.op)


class AgentConnection:
    """One session with the kubeps agent over its Unix socket.

    Thread-safe: `submit` and `call` may be used from several threads at once;
    each reply reaches the request with its id whatever the order the agent
    answers in.  When the connection breaks, every request waiting and every
    later one fails with Unavailable naming the socket.
    """

    def __init__(self, sock, socket_path):
        self._sock = sock
        self._socket_path = socket_path
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._pending = {}
        self._next_id = 1
        self._broken = None  # the error every request gets once the connection is gone
        self._reader = threading.Thread(target=self._read_replies, name="kubeps-agent-reader",
                                        daemon=True)
        self._reader.start()

    @property
    def socket_path(self):
        return self._socket_path

    def submit(self, op, **fields):
        """Sends request `op` at once and returns its PendingReply without waiting."""
        pending = PendingReply(op)
        with self._state_lock:
            if self._broken is not None:
                raise self._broken
            request_id = self._next_id
            self._next_id += 1
            self._pending[request_id] = pending
        message = dict(fields, op=op, id=request_id)
        try:
            frame = encode_message(message)
            with self._send_lock:
                self._sock.sendall(frame)
        except OSError as error:
            self._fail_all(Unavailable("the connection to the kubeps agent at %s broke while "
                                       "sending %s: %s" % (self._socket_path, op, error)))
        except BaseException:
            with self._state_lock:
                self._pending.pop(request_id, None)
            raise
        return pending

    def call(self, op, **fields):
        """Sends request `op` and returns its reply's fields, or raises its error."""
        return self.submit(op, **fields).result()

    def close(self):
        """Closes the socket; requests still waiting fail with Unavailable."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(timeout=5)
        self._sock.close()
        self._fail_all(Unavailable("the connection to the kubeps agent at %s is closed"
                                   % self._socket_path))

    def _read_replies(self):
        try:
            while True:
                reply = read_message(self._sock)
                if reply is None:
                    self._fail_all(Unavailable(
                        "the kubeps agent at %s closed the connection" % self._socket_path))
                    return
                self._dispatch(reply)
        except Exception as error:  # the reader must never die silently
            if not isinstance(error, Unavailable) and not isinstance(error, Internal):
                error = Unavailable("the connection to the kubeps agent at %s broke: %s"
                                    % (self._socket_path, error))
            self._fail_all(error)

    def _dispatch(self, reply):
        request_id = reply.get("id")
        with self._state_lock:
            pending = self._pending.pop(request_id, None) if request_id is not None else None
        if pending is not None:
            pending._set_reply(reply)
            return
        if reply.get("ok") is False:
            # An error that answers no request of ours (a frame the agent could
            # not read, or a refused session) concerns the whole connection.
            self._fail_all(error_from_reply(reply, "kubeps agent"))
            return
        self._fail_all(Internal("the kubeps agent at %s answered request id %r, which this "
                                "client did not send or already had an answer to"
                                % (self._socket_path, request_id)))

    def _fail_all(self, error):
        with self._state_lock:
            if self._broken is None:
                self._broken = error
            pending, self._pending = self._pending, {}
        for waiting in pending.values():
            waiting._set_error(error)


def read_agent_json(socket_dir):
    """The agent's agent.json as a dict, or None while it is missing or unreadable."""
    try:
        with open(os.path.join(socket_dir, AGENT_JSON), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _describe_missing_agent(socket_dir, timeout_s):
    if not os.path.isdir(socket_dir):
        found = "the directory does not exist"
    else:
        found = "the directory holds %s" % (sorted(os.listdir(socket_dir)) or "nothing")
    return ("no kubeps agent in KUBEPS_SOCKET_DIR=%s after %.1f s: expected %s there, which the "
            "kubeps-agent sidecar writes once it is registered and serving (%s). Is the agent "
            "running in this pod with the same directory mounted?"
            % (socket_dir, timeout_s, AGENT_JSON, found))


def connect(socket_dir, timeout_s):
    """Waits for the agent in `socket_dir` and connects: (AgentConnection, agent.json's dict).

    Raises Unavailable naming the directory when no agent appears in
    `timeout_s`, and InvalidArgument when the agent speaks another protocol.
    """
    deadline = time.monotonic() + timeout_s
    socket_path = os.path.join(socket_dir, AGENT_SOCKET)
    last_error = None
    while True:
        info = read_agent_json(socket_dir)
        if info is not None:
            if info.get("protocol") != PROTOCOL_VERSION:
                raise InvalidArgument(
                    "the kubeps agent in %s speaks sidecar protocol %r; this client speaks %d"
                    % (socket_dir, info.get("protocol"), PROTOCOL_VERSION))
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(socket_path)
                return AgentConnection(sock, socket_path), info
            except OSError as error:
                # agent.json of an agent that is gone (or not yet listening): look again.
                sock.close()
                last_error = error
        if time.monotonic() >= deadline:
            if info is not None:
                raise Unavailable("the kubeps agent in %s wrote %s but %s does not accept "
                                  "connections after %.1f s: %s"
                                  % (socket_dir, AGENT_JSON, socket_path, timeout_s, last_error))
            raise Unavailable(_describe_missing_agent(socket_dir, timeout_s))
        time.sleep(_RENDEZVOUS_POLL_S)
