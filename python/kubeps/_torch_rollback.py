"""What a rollback takes back in the program itself (kubeps.torch's part of a rollback).

A rollback (a parameter server restarted from its checkpoint) sends every worker back to the
step of the newest checkpoint all servers hold (a multiple of spec.checkpoint.intervalSteps, or
the step the job resumed at), and the steps from there are computed again.  The servers' state
goes back with their checkpoints; the program's must go back with it, or the redone steps apply
their updates a second time:

- with the servers' optimizer `none`, the parameters and the torch optimizer's state (Adam's
  moments, the learning rate a scheduler set in its param_groups) live in this process;
- the model's buffers (BatchNorm's running statistics, with model=), which every forward pass
  of a redone step would move again;
- torch's random generators (dropout), and Python's and NumPy's global ones (a program's
  augmentation), so a redone step draws what it drew the first time;
- what the program registers with `restore_on_rollback` (a GradScaler, an LR scheduler: any
  object with state_dict() and load_state_dict()).

So steps() keeps a copy of these, in host memory, at each step a checkpoint may be taken at
(Snapshots says which), the 3 a rollback is likeliest to go back to (KUBEPS_ROLLBACK_COPIES),
and a rollback to such a step puts them back before steps() yields it again: the job then ends
on the same bytes as without the rollback, as a job of the built-in trainer does.  They are put
back in place (the optimizer's state dicts and param_groups stay the same objects), so that a
scheduler or a scaler holding the optimizer still sees the one it holds.
"""

import copy
import os
import random
import sys
import types
import warnings
import weakref

import torch

from kubeps.errors import InvalidArgument

# A rollback goes to the newest step all servers hold a checkpoint of (the agent's
# `checkpoints` says which), or one before where a server finds that checkpoint damaged: the
# copy of that step, the newer ones and the one before are kept (Snapshots._worth_keeping); an
# agent that does not say keeps the newest.  Each copy costs host memory (with `none`: the
# parameters and the optimizer's state), so KUBEPS_ROLLBACK_COPIES may keep fewer; 0 keeps none.
DEFAULT_KEPT = 3


def copies_to_keep():
    text = os.environ.get("KUBEPS_ROLLBACK_COPIES", str(DEFAULT_KEPT))
    try:
        kept = int(text)
    except ValueError:
        kept = -1
    if kept < 0:
        raise InvalidArgument("KUBEPS_ROLLBACK_COPIES=%r: expected the number of copies of the "
                              "program's state kept for a rollback (0 or more; default %d)"
                              % (text, DEFAULT_KEPT))
    return kept


def _is_code(value):
    """Functions, methods, classes and weak references to them (a CyclicLR's or a OneCycleLR's
    scale function in its state_dict): kept as they are, since a copy of a bound method
    copies what it is bound to (the scheduler, its optimizer and the model).  Other callable
    objects may hold state of their own, and are copied."""
    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                              type, weakref.ref))


def _rebuilt(container, items):
    """A list or tuple (a named one too) of `container`'s type holding `items`."""
    if isinstance(container, tuple) and hasattr(container, "_fields"):
        return type(container)(*items)
    return type(container)(items)


def _host_copy(tensor, spare=None):
    """`tensor` copied to host memory: into `spare` (a host tensor no copy holds any more)
    where it fits, since fresh memory costs a page fault a page, more than the copy."""
    tensor = tensor.detach()
    if spare is not None and spare.shape == tensor.shape and spare.dtype == tensor.dtype:
        return spare.copy_(tensor)
    return tensor.to("cpu", copy=True)


class _HostCopy:
    """A tensor copied to host memory, and the device it goes back to where the program no
    longer holds a tensor in its place (a capturable Adam's step count lives on the GPU)."""

    __slots__ = ("tensor", "device")

    def __init__(self, tensor, spare=None):
        self.tensor = _host_copy(tensor, spare.tensor if isinstance(spare, _HostCopy) else None)
        self.device = tensor.device


def _to_host(value, spare=None):
    """A deep copy of a state_dict's value with every tensor copied to host memory (into the
    tensors of `spare`, an earlier copy of the same value no snapshot holds, where they fit)."""
    if torch.is_tensor(value):
        return _HostCopy(value, spare)
    if isinstance(value, dict):
        copied = copy.copy(value)  # a dict's own type (a defaultdict keeps its factory)
        for key, item in value.items():
            copied[key] = _to_host(item, spare.get(key) if isinstance(spare, dict) else None)
        return copied
    if isinstance(value, (list, tuple)):
        spares = (spare if isinstance(spare, (list, tuple)) and len(spare) == len(value)
                  else [None] * len(value))
        return _rebuilt(value, [_to_host(item, s) for item, s in zip(value, spares)])
    return value if _is_code(value) else copy.deepcopy(value)


def _check_copyable(value):
    """Raises what _to_host would on `value`, copying no tensor."""
    if isinstance(value, dict):
        for item in value.values():
            _check_copyable(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_copyable(item)
    elif not (torch.is_tensor(value) or _is_code(value)):
        copy.deepcopy(value)


def _put_back(current, saved, in_place=True):
    """A copy of `saved` (from _to_host) to be the program's value where it now holds
    `current`: a tensor on current's device (copied into it where it fits, with in_place),
    else on the device it was copied from; containers item by item (an LBFGS's history of
    tensors), so each tensor finds its own device."""
    if isinstance(saved, _HostCopy):
        if not torch.is_tensor(current):
            return saved.tensor.to(saved.device, copy=True)
        if in_place and current.shape == saved.tensor.shape and \
                current.dtype == saved.tensor.dtype:
            return current.copy_(saved.tensor)
        return saved.tensor.to(current.device, copy=True)
    if isinstance(saved, dict):
        restored = copy.copy(saved)
        for key, item in saved.items():
            here = current.get(key) if isinstance(current, dict) else None
            restored[key] = _put_back(here, item, in_place)
        return restored
    if isinstance(saved, (list, tuple)):
        here = (list(current) if isinstance(current, (list, tuple)) and
                len(current) == len(saved) else [None] * len(saved))
        return _rebuilt(saved, [_put_back(c, item, in_place) for c, item in zip(here, saved)])
    return saved if _is_code(saved) else copy.deepcopy(saved)


def _spares(spare_list, count):
    """An earlier snapshot's list of copies to copy into, where it has one for each."""
    return spare_list if spare_list is not None and len(spare_list) == count else [None] * count


class Snapshot:
    """The program's state at one step (see the module docstring).  `spare`: a snapshot no
    longer kept, whose host memory this one reuses."""

    def __init__(self, optimizer, params_too, model, objects, spare=None):
        self.first = self.last = None  # the steps it is the state at (Snapshots)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.params = None
        self.state = None
        if params_too:  # the servers hold averaged gradients only
            with torch.no_grad():
                self.params = [_host_copy(p, s) for p, s in
                               zip(params, _spares(spare and spare.params, len(params)))]
            self.state = [_to_host(dict(optimizer.state[p]), s) if p in optimizer.state else None
                          for p, s in zip(params, _spares(spare and spare.state, len(params)))]
        self.groups = [_to_host({k: v for k, v in group.items() if k != "params"})
                       for group in optimizer.param_groups]
        self.buffers = None
        if model is not None:
            buffers = list(model.buffers())
            self.buffers = [_host_copy(b, s) for b, s in
                            zip(buffers, _spares(spare and spare.buffers, len(buffers)))]
        self.rng = torch.get_rng_state()
        self.cuda_rng = (torch.cuda.get_rng_state_all() if torch.cuda.is_initialized()
                         else None)
        self.python_rng = random.getstate()
        numpy = sys.modules.get("numpy")  # a program that uses NumPy imported it
        self.numpy_rng = numpy.random.get_state() if numpy is not None else None
        earlier = dict((id(o), saved) for o, saved in spare.objects) if spare else {}
        self.objects = [(o, _to_host(o.state_dict(), earlier.get(id(o)))) for o in objects]
        # Steps a redone step skips again are not counted twice.
        self.skipped_steps = optimizer.kubeps_skipped_steps

    def restore(self, optimizer, model, objects):
        """Puts the state back; returns the objects of `objects` it holds no copy of (those
        registered after it was taken)."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            if self.params is not None:
                for p, saved in zip(params, self.params):
                    p.copy_(saved)
                for p, saved in zip(params, self.state):
                    if saved is None:
                        optimizer.state.pop(p, None)
                        continue
                    state = optimizer.state[p]
                    for key in [k for k in state if k not in saved]:
                        del state[key]
                    for key, value in saved.items():
                        state[key] = _put_back(state.get(key), value)
            for group, saved in zip(optimizer.param_groups, self.groups):
                group.update(_put_back(group, saved))
            if self.buffers is not None:
                for buffer, saved in zip(model.buffers(), self.buffers):
                    buffer.copy_(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        random.setstate(self.python_rng)
        if self.numpy_rng is not None:
            sys.modules["numpy"].random.set_state(self.numpy_rng)
        for o, saved in self.objects:
            o.load_state_dict(_put_back(o.state_dict(), saved, in_place=False))
        optimizer.kubeps_skipped_steps = self.skipped_steps
        return [o for o in objects if not any(o is copied for copied, _ in self.objects)]


class Snapshots:
    """The newest snapshots of the program, each of the steps it is the state at.

    The state steps() finds before it yields step s is the program's at every step from the
    one after the last step it yielded (nothing ran between: an elastic worker's steps that
    others compute change nothing here) up to s; at the first step of a process or a
    rollback, from that step, except an elastic worker's first: it did not compute the steps
    before it was taken in, so its state then is its state at each of them, from step 0.  A
    snapshot is taken where that run of steps holds a multiple of the interval, or starts
    the process (a resumed job's first step need not be one).

    An async job keeps none: it never rolls back (a restarted server goes on from its own
    checkpoint).  Before a snapshot, those no rollback is likely to go back to go
    (_worth_keeping), and the new one reuses the memory of one of them.
    """

    def __init__(self, interval, mode="sync", elastic=False, newest_common=lambda: None):
        self.interval = interval  # spec.checkpoint.intervalSteps; 0: the agent did not say
        self.mode = mode
        self.elastic = elastic
        # The newest step every server checkpointed (None: not known): no rollback goes back
        # further, so no copy of an earlier step is needed.
        self._newest_common = newest_common
        self.kept = copies_to_keep()
        self.objects = []  # registered with restore_on_rollback
        self._snapshots = []  # oldest first
        self._pending = None  # the Snapshot a rollback goes back to, until steps() yields
        self._pending_load = None  # or resume_with's load, where none was of the step
        self._state_from = None  # the first step the program's state is the state at
        self.kept_before_rollback = []

    def register(self, objects):
        for o in objects:
            if not (callable(getattr(o, "state_dict", None)) and
                    callable(getattr(o, "load_state_dict", None))):
                raise InvalidArgument(
                    "restore_on_rollback: %s has no state_dict() and load_state_dict(); pass "
                    "objects that do (a GradScaler, an LR scheduler), or wrap yours in one"
                    % type(o).__name__)
            try:  # found here, not at a step: a state_dict that cannot be copied
                _check_copyable(o.state_dict())
            except Exception as e:
                raise InvalidArgument(
                    "restore_on_rollback: the state_dict() of %s cannot be copied (%s: %s); "
                    "pass objects whose state_dict holds tensors, numbers, containers and code"
                    % (type(o).__name__, type(e).__name__, e)) from e
            if not any(o is known for known in self.objects):
                self.objects.append(o)

    def roll_back(self, step, load=None):
        """A rollback to `step`: its snapshot goes back in place when steps() next yields (the
        rest of the iteration that found the rollback still runs, on the state it had), and
        the later ones, of the timeline left, are forgotten.  Where none is of `step`,
        `load(step)` (resume_with's) runs then instead, if given.  False where neither."""
        self.kept_before_rollback = [(s.first, s.last) for s in self._snapshots]
        self._snapshots = [s for s in self._snapshots if s.first <= step]
        self._pending = next((s for s in self._snapshots if s.last >= step), None)
        self._pending_load = load if self._pending is None and self.mode == "sync" else None
        for s in self._snapshots:  # the steps after `step` are another timeline's now
            s.last = min(s.last, step)
        self._state_from = step
        return self._pending is not None or self._pending_load is not None

    def _worth_keeping(self, floor):
        """The copies to keep beside a new one, at most kept - 1, the likeliest rollback's
        first.  A rollback goes to the newest step every server has checkpointed, `floor`
        as far as the agent has heard (None: not known), or a later one once its checkpoint
        is written; older only where a server finds that checkpoint damaged or lost and the
        job falls back to the one before.  So: the copy of the floor, the newer ones (newest
        first), then the newest older one."""
        if self.kept <= 1:
            return []
        if floor is None:
            return self._snapshots[-(self.kept - 1):]
        at = [s for s in self._snapshots if s.first <= floor <= s.last]
        newer = [s for s in reversed(self._snapshots) if s.first > floor]
        older = [s for s in reversed(self._snapshots) if s.last < floor][:1]
        return (at + newer + older)[:self.kept - 1]

    def at_step(self, step, optimizer):
        """Before steps() yields `step`: the pending rollback's snapshot put back, then a
        snapshot taken if one is due (the class docstring)."""
        model = getattr(optimizer, "_kubeps_model", None)
        if self._pending_load is not None:
            load, self._pending_load = self._pending_load, None
            with torch.no_grad():
                load(step)
        if self._pending is not None:
            uncopied = self._pending.restore(optimizer, model, self.objects)
            self._pending = None
            if uncopied:
                warnings.warn(
                    "kubeps: the job rolled back to step %d, and %s, registered with "
                    "restore_on_rollback after this process's copy of that step was taken, "
                    "keep their values: register objects before the training loop"
                    % (step, ", ".join(type(o).__name__ for o in uncopied)))
        first, starting = self._state_from, self._state_from is None
        if starting:
            first = 0 if self.elastic else step
        self._state_from = step + 1  # the body of `step` changes it
        if self.interval <= 0 or self.kept == 0 or self.mode != "sync":
            return
        due = starting or step - step % self.interval >= first
        if not due or any(s.first <= first and step <= s.last for s in self._snapshots):
            return
        kept = self._worth_keeping(self._newest_common() if self._snapshots else None)
        dropped = [s for s in self._snapshots if not any(s is k for k in kept)]
        self._snapshots = sorted(kept, key=lambda s: s.last)
        snapshot = Snapshot(optimizer, not optimizer._kubeps_servers_optimize(), model,
                            self.objects, spare=dropped[-1] if dropped else None)
        snapshot.first, snapshot.last = first, step
        self._snapshots.append(snapshot)


def not_restored(resume_step, snapshots, servers_optimize, model_given):
    """The warning of a rollback that found no copy of the program's own state: what of it
    keeps its values."""
    if snapshots.interval <= 0:
        why = "the agent did not say spec.checkpoint.intervalSteps (an older kubeps-agent?)"
    elif snapshots.kept == 0:
        why = "KUBEPS_ROLLBACK_COPIES=0 keeps none"
    else:
        why = ("steps() keeps copies of steps %s only (a loop not driven by steps() keeps none)"
               % (", ".join("%d" % first if first == last else "%d-%d" % (first, last)
                            for first, last in snapshots.kept_before_rollback) or "none yet"))
    kept = ["the parameters and optimizer state (with the servers' optimizer 'none' they "
            "live in this process)"] if not servers_optimize else []
    if model_given:
        kept.append("the model's buffers")
    kept.append("torch's, Python's and NumPy's random generators")
    if snapshots.objects:
        kept.append("the objects given to restore_on_rollback")
    kept = ", ".join(kept[:-1]) + " and " + kept[-1] if len(kept) > 1 else kept[0]
    return ("kubeps: the job rolled back to step %d, and this process has no copy of its state "
            "there: %s. So %s keep their values; only the step goes back"
            % (resume_step, why, kept))
