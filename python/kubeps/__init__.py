"""kubeps: the training process's side of the kubeps sidecar.

A worker pod runs the user's training process beside `kubeps-agent --serve`,
which holds the worker's registration, rank and the parameter-server client.
This package talks to that agent over a Unix socket in $KUBEPS_SOCKET_DIR
(docs/sidecar-protocol.md); tensor bytes stay in a shared-memory file.

Framework-free API (standard library only; `kubeps.torch` builds on it):

    import kubeps
    kubeps.init()                                  # rank, size
    tensors = kubeps.declare([("w", (784, 10)), ("b", (10,))])
    tensors.values("w")[:] = ...                   # initial values, float32
    step = kubeps.init_tensors()                   # rank 0's values win; all get them
    while step < total:
        share = kubeps.membership(step)            # elastic jobs: see Membership
        ... the examples [share.first_example, share.end_example) of the step's batch:
        ... write gradients into tensors.grads(name) ...
        kubeps.wait(kubeps.push_pull(["w", "b"], step))   # values regions: version step+1
        step += 1
    kubeps.finish()

`wait` raises `kubeps.RolledBack(resume_step)` when the job rolled back; the
values regions then hold the parameters of `resume_step`.
"""

import os
import threading

from kubeps.errors import (Aborted, AlreadyExists, FailedPrecondition, Internal, InvalidArgument,
                           KubepsError, NotFound, RolledBack, Unavailable)
from kubeps.session import Handle, Membership, Session
from kubeps.shared_tensors import SharedTensors, TensorSlot

__all__ = [
    "init", "is_initialized", "rank", "size", "num_servers", "mode", "server_optimizer",
    "declare", "init_tensors", "push", "pull", "push_pull", "wait", "barrier", "membership",
    "is_elastic", "finish", "shutdown", "session", "Handle", "Membership", "Session", "SharedTensors", "TensorSlot", "KubepsError",
    "InvalidArgument", "FailedPrecondition", "NotFound", "AlreadyExists", "Aborted",
    "RolledBack", "Unavailable", "Internal",
]

SOCKET_DIR_ENV = "KUBEPS_SOCKET_DIR"
AGENT_WAIT_ENV = "KUBEPS_AGENT_WAIT_S"
# The agent writes agent.json only once its worker is registered, which waits
# for the whole job's pods: as long as a node waits for the scheduler.
DEFAULT_AGENT_WAIT_S = 600.0

_lock = threading.Lock()
_session = None
_finished = False


def init(socket_dir=None, timeout=None):
    """Connects this process to its pod's kubeps agent; returns the Session.

    `socket_dir` defaults to $KUBEPS_SOCKET_DIR; `timeout` (seconds to wait
    for the agent's agent.json) to $KUBEPS_AGENT_WAIT_S or 600.
    """
    global _session
    with _lock:
        if _session is not None:
            raise FailedPrecondition(
                "kubeps.init() was called twice: this process already has a session with the "
                "kubeps agent in %s (rank %d of %d)" % (_session.socket_dir, _session.rank,
                                                        _session.size))
        if _finished:
            raise FailedPrecondition("kubeps.init() after kubeps.finish(): this worker told the "
                                     "job it is done, and its agent has exited")
        if socket_dir is None:
            socket_dir = os.environ.get(SOCKET_DIR_ENV)
            if not socket_dir:
                raise FailedPrecondition(
                    "kubeps.init(): %s is not set: it names the directory this process shares "
                    "with its kubeps-agent sidecar, where the agent writes agent.json and "
                    "agent.sock (/var/run/kubeps on Kubernetes; `kubeps run` sets it); or pass "
                    "kubeps.init(socket_dir=...)" % SOCKET_DIR_ENV)
        if timeout is None:
            timeout = _agent_wait_from_environment()
        _session = Session(socket_dir, timeout)
        return _session


def _agent_wait_from_environment():
    text = os.environ.get(AGENT_WAIT_ENV)
    if not text:
        return DEFAULT_AGENT_WAIT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise InvalidArgument("%s=%r: expected a number of seconds > 0" % (AGENT_WAIT_ENV, text))
    return seconds


def is_initialized():
    return _session is not None


def session(caller="kubeps"):
    """The process's Session; FailedPrecondition naming `caller` before init()."""
    current = _session
    if current is None:
        if _finished:
            raise FailedPrecondition("%s was called after kubeps.finish(): the session with the "
                                     "kubeps agent is over" % caller)
        raise FailedPrecondition("%s was called before kubeps.init(): call kubeps.init() first "
                                 "to connect to the pod's kubeps agent" % caller)
    return current


def rank():
    """This worker's rank, 0..size()-1; stable across restarts of the process."""
    return session("kubeps.rank()").rank


def size():
    """The number of workers of the job; in an elastic job, those it started with (each step's
    own count is membership(step).count)."""
    return session("kubeps.size()").size


def num_servers():
    return session("kubeps.num_servers()").num_servers


def mode():
    """'sync' or 'async', from the job's spec."""
    return session("kubeps.mode()").mode


def server_optimizer():
    """The servers' optimizer ('sgd', 'adam', ...), or 'none' when the servers only average."""
    return session("kubeps.server_optimizer()").server_optimizer


def is_elastic():
    """Whether the job's workers may change while it trains (an elasticPolicy)."""
    return session("kubeps.is_elastic()").elastic


def declare(tensors):
    """Declares [(name, shape), ...] (float32, in key order) once; returns SharedTensors."""
    return session("kubeps.declare()").declare(tensors)


def init_tensors(restores_own_state=False, own_state_steps=None):
    """Broadcasts initial values (rank 0's win); returns the step to start from.  With the
    servers' optimizer `none`, a start past step 0 needs restores_own_state=True: the program
    puts back its own parameters of that step (the servers hold none); own_state_steps, the
    steps it holds them of, lets the job go back to one of them."""
    return session("kubeps.init_tensors()").init_tensors(restores_own_state, own_state_steps)


def push(names, step):
    return session("kubeps.push()").push(names, step)


def pull(names=None, min_version=0):
    return session("kubeps.pull()").pull(names, min_version)


def push_pull(names, step):
    return session("kubeps.push_pull()").push_pull(names, step)


def wait(handles):
    return session("kubeps.wait()").wait(handles)


def barrier(name):
    return session("kubeps.barrier()").barrier(name)


def membership(step):
    """What this worker does at `step` (a Membership: whether it computes it, and its examples
    of the step's global batch).  An elastic job's program asks before each step, and pushes
    only a step it is a member of; a fixed job's worker is a member of every step."""
    return session("kubeps.membership()").membership(step)


def finish():
    """Tells the job this worker is done and ends the session; the agent then exits 0."""
    global _session, _finished
    with _lock:
        current = session("kubeps.finish()")
        current.finish()  # a refused finish leaves the session as it was
        _session = None
        _finished = True


def shutdown():
    """Ends the session without finishing: the agent serves the next process (a restart)."""
    global _session
    with _lock:
        current, _session = _session, None
    if current is not None:
        current.close()
