"""kubeps.torch: PyTorch training on kubeps' parameter servers, through the pod's agent.

    import kubeps.torch as kps
    kps.init()
    optimizer = kps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kps.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in kps.steps(total_steps):
        ...forward, loss.backward(), optimizer.step()...
    kps.finish()

How a step goes. `DistributedOptimizer` declares every trainable parameter (by name, as float32)
and hooks each one's gradient accumulator: as soon as backward has the gradient of a parameter,
the hook copies it into the parameter's `grads` region of the shared-memory file, and once the
gradients copied so far hold KUBEPS_BUCKET_BYTES (1 MiB, DistributedDataParallel's first bucket;
0: every parameter alone), or every gradient of the step is in, sends one `push_pull` for their
keys: the last layers' gradients travel while backward still works on the first ones, small ones
together (a request has a fixed cost that a bias does not repay). "Every gradient of the step"
counts the parameters that got one in the step before (all of them in the first step), as
DistributedDataParallel learns a static graph's unused parameters: a parameter the forward pass
leaves out has no gradient, and the last bucket would otherwise wait for `step()`, which sends
zeros for it. Each request's version step+1 comes back into the `values` regions as soon as the
servers have applied those keys' update, not after the whole step's pushes. The agent sends
queued requests lowest key first (declaration order, which is the model's: the first layers,
which the next forward pass needs first, go first). What a program does to the gradients after
backward, or a step it leaves out, reaches no server: _torch_call_order.py refuses each, saying
what to do instead. `step()` waits for the exchanges and
then, by the servers' optimizer (`hello` says which):

- a real optimizer (sgd, adam, ...): the servers hold the parameters and the
  optimizer state and apply the averaged gradient; the pulled values are the
  new parameters, copied into `p.data`; the wrapped torch optimizer is not
  stepped (its hyperparameters are the TrainingJob's);
- `none`: the servers only average; the pulled values are the averaged
  gradients, copied into `p.grad`, and the wrapped optimizer's `step()` runs.

Views over the mapping are made once per parameter (`torch.frombuffer`): one
`copy_` each way, and no bytes cross the socket.

With `DistributedOptimizer(..., model=model)` (and the servers' optimizer),
`step()` does not wait for the exchanges either: each module of `model` waits,
just before its own forward, for its own parameters' new values, so the next
forward pass starts on the first layers while the last ones still travel.
The loop of `steps()` brings every parameter up to date when it ends, and
`synchronize()` does so at any time (before reading the parameters outside a
forward pass).  A parameter used in a forward pass outside its own module
(tied weights) is caught at its gradient, with an error that says so.

Mixed precision (a GradScaler) needs the servers' optimizer `none` and
`spec.nonFinite: SkipStep`: the scaled gradients go to the servers as backward
computes them, and the servers hand their mean on, NaN and Inf included, so
that every worker's scaler sees the same overflow and skips the same step.
Call `optimizer.synchronize()` before `scaler.step(optimizer)` (which then
unscales the averaged gradients, and calls `step()` only when they are
finite), and leave the iteration when it returns False (a rollback).
Without a scaler, `step()` itself skips a step whose mean is not finite
under SkipStep (`optimizer.kubeps_skipped_steps` counts the steps left
without an update).

A rollback (a parameter server restarted from its checkpoint) surfaces as
`RolledBack(resume_step)` from the agent; `step()` handles it: the values of
`resume_step` are already in the mapping, they are copied into the
parameters, and `steps()` yields `resume_step` next (in an elastic job the
first step from there that this worker computes).  What lives in the program
goes back too, from copies steps() keeps at each checkpoint step: with the
servers' optimizer `none` the parameters and the optimizer's state, the
model's buffers (model=), torch's generators, and the objects given to
`restore_on_rollback` (a GradScaler, an LR scheduler; _torch_rollback.py).  A
start past step 0 with `none` needs the program's own state: `resume_with`
(_torch_start.py).

Each step's examples: `examples()` is this worker's run [first, end) of the
step's global batch (`global_batch()`, spec.batchSize x the first workers:
the job's first start, kept over its checkpoints), so that the batch is a
pure function of the step whoever computes it.  In a job with
an elasticPolicy the workers change while it trains: `steps()` yields only
the steps this worker computes, takes it in at a later step with the
servers' parameters, and ends when it is scaled away (`scaled_away()`
then says so; _torch_elastic.py).
"""

import threading
import warnings

import torch

import kubeps
from kubeps._torch_call_order import CallOrder
from kubeps._torch_counter import StepCounter
from kubeps._torch_elastic import batch_run, fixed_global_batch, next_member_step
from kubeps._torch_forward import ForwardWaits, unwaited
from kubeps._torch_params import (CARRIED_DTYPES, Binding, all_finite, check_declared_unchanged,
                                  check_sent_gradients_unchanged, copy_gradient, forget_sent,
                                  frozen_params, outside_compiled_graphs, param_count,
                                  declared_names, register_gradient_hook, trainable_params)
from kubeps._torch_rollback import Snapshots, not_restored
from kubeps._torch_start import begin
from kubeps._torch_settings import (bucket_bytes, group_settings, settings_changed,
                                    warn_if_groups_differ)
from kubeps.errors import FailedPrecondition, InvalidArgument, RolledBack
from kubeps.shared_tensors import describe_names

__all__ = ["init", "rank", "size", "DistributedOptimizer", "broadcast_parameters", "steps",
           "examples", "global_batch", "scaled_away", "restore_on_rollback", "resume_with",
           "checkpoint_interval", "finish", "shutdown"]

SERVERS_AVERAGE_ONLY = "none"


_counter = StepCounter()
_optimizer = None  # the process's one DistributedOptimizer, which holds the declaration


def init(socket_dir=None, timeout=None):
    """Connects to the pod's kubeps agent (see kubeps.init)."""
    return kubeps.init(socket_dir=socket_dir, timeout=timeout)


def rank():
    return kubeps.rank()


def size():
    return kubeps.size()


class _DistributedOptimizer(CallOrder, ForwardWaits):
    """The methods a DistributedOptimizer adds to the user's optimizer class.

    `DistributedOptimizer()` makes a subclass of the user's optimizer's class
    with these methods first, so it is still an instance of that class (LR
    schedulers accept it) and keeps the same param_groups and state.
    Thread-safe where autograd needs it: hooks may run on autograd's device
    threads while another hook pushes.
    """

    def _kubeps_setup(self, session, named_parameters, backward_passes_per_step, model):
        if int(backward_passes_per_step) < 1:
            raise InvalidArgument("DistributedOptimizer: backward_passes_per_step=%r must be >= 1"
                                  % (backward_passes_per_step,))
        self._kubeps_session = session
        # The servers' optimizer applies the job's settings: those of the wrapped
        # one, per group, are noted to say so when they differ or change.
        self._kubeps_settings = None
        if self._kubeps_servers_optimize():
            self._kubeps_settings = group_settings(self)
            warn_if_groups_differ(self._kubeps_settings)
        self._kubeps_passes_per_step = int(backward_passes_per_step)
        self._kubeps_lock = threading.Lock()
        self._kubeps_exchanges = {}  # name -> Handle of this step's push_pull
        self._kubeps_bucket_bytes = bucket_bytes()
        # With model=: name -> Handle of the last step's exchange, waited for
        # by the parameter's module before its forward.
        self._kubeps_pending = {}
        self._kubeps_discard = False  # a forward pass found a rollback: drop this iteration
        self._kubeps_forward_hooks = []
        self._kubeps_new_backward()
        self._kubeps_synchronized = False
        # The synchronized mean holds NaN or Inf (spec.nonFinite: SkipStep with the servers'
        # optimizer 'none'): its update is skipped, by a loss scaler or by step().
        self._kubeps_overflowed = False
        self._kubeps_resumed = False  # synchronize() rolled back; this iteration is over
        self.kubeps_skipped_steps = 0
        self._kubeps_closed = False
        self._kubeps_warned_rollback = False
        self._kubeps_resume_loader = self._kubeps_held_steps = None  # resume_with's
        self._kubeps_snapshots = Snapshots(session.checkpoint_interval, session.mode,
                                           session.elastic, session.newest_common_checkpoint)
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        params = trainable_params(self, named_parameters)
        self._kubeps_frozen = frozen_params(self, named_parameters)
        self._kubeps_param_count = param_count(self)
        tensors = session.declare([(name, tuple(p.shape)) for name, p in params])
        self._kubeps_bindings = [Binding(name, p, tensors.slot(name), tensors.buffer)
                                 for name, p in params]
        # Gradients that complete a step's backward: what the step before brought.
        self._kubeps_expected = len(self._kubeps_bindings)
        self._kubeps_by_name = {b.name: b for b in self._kubeps_bindings}
        self._kubeps_gradient_hooks = [
            register_gradient_hook(b.param, self._kubeps_make_hook(b))
            for b in self._kubeps_bindings]
        if model is not None:
            self._kubeps_hook_forward(model)

    def _kubeps_end_backward(self):
        """The step's backward passes are over: returns the exchanges their hooks sent
        (name -> Handle; a bucket still gathering goes with what backward did not reach).
        The gradients they completed are what the next step's last bucket waits for."""
        with self._kubeps_lock:
            exchanges, self._kubeps_exchanges = self._kubeps_exchanges, {}
            if self._kubeps_ready:
                self._kubeps_expected = self._kubeps_ready
            self._kubeps_new_backward()
        return exchanges

    def _kubeps_new_backward(self):
        """What the hooks gather over a step's backward passes starts over (under the lock,
        or before any hook runs)."""
        self._kubeps_passes = {}  # name -> backward passes seen this step
        self._kubeps_ready = 0  # parameters whose gradient of the step is complete
        # Gradients copied but not yet sent: they go with the next ones until the request
        # holds bucket_bytes, or every parameter's gradient is in.
        self._kubeps_bucket = []
        self._kubeps_bucket_held = 0

    @property
    def kubeps_parameter_names(self):
        """The declared names in key order."""
        return [b.name for b in self._kubeps_bindings]

    def _kubeps_servers_optimize(self):
        return self._kubeps_session.server_optimizer != SERVERS_AVERAGE_ONLY

    def _kubeps_make_hook(self, binding):
        def on_gradient_ready(*unused):
            if not self._kubeps_closed:
                self._kubeps_push_gradient(binding)
        return outside_compiled_graphs(on_gradient_ready)

    def _kubeps_push_gradient(self, binding):
        """Runs in backward as soon as `binding`'s gradient is accumulated: copy and push."""
        if self._kubeps_discard:
            return  # the forward pass found a rollback: this iteration's gradients are dropped
        self._kubeps_resumed = False  # a new iteration's backward pass
        if self._kubeps_synchronized and not self._kubeps_end_skipped_step():
            raise FailedPrecondition(
                "backward ran after optimizer.synchronize() ended step %d's exchange: call "
                "optimizer.step() first (the step's gradients have reached the servers, so it "
                "cannot be skipped or computed again)"
                % _current_step("the gradient hook of %r" % binding.name))
        with self._kubeps_lock:
            stale = binding.name in self._kubeps_pending
        if stale:
            raise FailedPrecondition(
                "%r was used in the forward pass before its own module ran, so with the value of "
                "the step before: its module waits for its new value. A tied weight? Pass the "
                "DistributedOptimizer no model= (step() then waits for every parameter). A model "
                "run by torch.compile before model= hooked it? Its compiled code does not run "
                "hooks added later: wrap the optimizer first" % binding.name)
        with self._kubeps_lock:
            passes = self._kubeps_passes.get(binding.name, 0) + 1
            if passes > self._kubeps_passes_per_step:
                forget_sent(self._kubeps_bindings)  # accumulated since it was sent: said here
                raise FailedPrecondition(
                    "the gradient of %r was computed %d times before optimizer.step(); pass "
                    "backward_passes_per_step=%d to kubeps.torch.DistributedOptimizer to "
                    "accumulate that many backward passes per step (with a GradScaler, which "
                    "skips step() when a gradient overflowed: call optimizer.synchronize() "
                    "before scaler.step())" % (binding.name, passes, passes))
            self._kubeps_passes[binding.name] = passes
            if passes < self._kubeps_passes_per_step:
                return
        step = _current_step("the gradient hook of %r" % binding.name)
        # Without a gradient nothing is sent here: step() pushes zeros for it.
        if binding.param.grad is not None:
            copy_gradient(binding)
            binding.sent = (binding.param.grad, binding.param.grad._version)
        with self._kubeps_lock:
            self._kubeps_ready += 1
            if binding.param.grad is not None:
                self._kubeps_bucket.append(binding)
                self._kubeps_bucket_held += binding.grads.numel() * 4
            if not self._kubeps_bucket or (
                    self._kubeps_bucket_held < self._kubeps_bucket_bytes and
                    self._kubeps_ready < self._kubeps_expected):
                return
            bucket = self._kubeps_bucket
            self._kubeps_bucket, self._kubeps_bucket_held = [], 0
        handle = self._kubeps_session.push_pull([b.name for b in bucket], step)
        with self._kubeps_lock:
            for b in bucket:
                self._kubeps_exchanges[b.name] = handle

    def synchronize(self):
        """Finishes this step's communication: exchanges what backward did not (zeros for
        parameters without a gradient, so every key of the step arrives), waits for every
        key's exchange (its push, then its pull of the next version) and copies the pulled
        values into the parameters (or, with the servers' optimizer 'none', into their
        gradients).

        Returns False when the job rolled back instead (the parameters then hold the
        values of the step to resume from).  step() calls it; with the servers' optimizer
        'none', call it yourself to clip the averaged gradients before step().

        With model= (step() leaves the waiting to the next forward pass): waits for the
        last step's exchanges and copies their values into the parameters, so that they
        can be read outside a forward pass.
        """
        if self._kubeps_defers():
            return self._kubeps_resolve_all()
        if self._kubeps_synchronized:
            return True
        step = _current_step("optimizer.step()")
        session = self._kubeps_session
        exchanges = self._kubeps_end_backward()
        self._kubeps_check_gradients()
        missing = [b.name for b in self._kubeps_bindings if b.name not in exchanges]
        for name in missing:
            copy_gradient(self._kubeps_by_name[name])
        try:
            if missing:
                exchanges[None] = session.push_pull(missing, step)
            session.wait(unwaited(exchanges.values()))
        except RolledBack as rollback:
            self._kubeps_roll_back(rollback.resume_step)
            # A step() of this iteration must not exchange its stale gradient again as the
            # resume step's (a loss scaler calls it); the next backward pass ends this.
            self._kubeps_resumed = True
            return False
        with torch.no_grad():
            if self._kubeps_servers_optimize():
                for binding in self._kubeps_bindings:
                    binding.param.copy_(binding.values)
                    grad = binding.param.grad  # applied: step() checks it is unchanged
                    binding.sent = None if grad is None else (grad, grad._version)
            else:
                for binding in self._kubeps_bindings:
                    grad = binding.param.grad
                    if grad is None:
                        binding.param.grad = binding.values.to(
                            binding.param.device, binding.param.dtype, copy=True)
                    elif grad.is_sparse:
                        # As sparse as it went (an embedding's rows), for optimizers that
                        # take nothing else (SparseAdam); a row whose mean is all zeros
                        # counts as untouched.
                        binding.param.grad = binding.values.to(
                            binding.param.device, binding.param.dtype,
                            copy=True).to_sparse(grad.sparse_dim())
                    else:
                        grad.copy_(binding.values)
                # Under Fail the servers refused a NaN; under SkipStep they hand it on.
                self._kubeps_overflowed = (self._kubeps_session.non_finite == "SkipStep" and
                                           not all_finite(self._kubeps_bindings))
        self._kubeps_synchronized = True
        return True

    def _kubeps_check_gradients(self):
        """What step() sends is what the servers must see: nothing changed since the hooks
        sent it, and no parameter left out of the declaration."""
        check_sent_gradients_unchanged(self._kubeps_bindings)
        check_declared_unchanged(self, self._kubeps_frozen, self._kubeps_param_count)

    def _kubeps_end_skipped_step(self):
        """A synchronized step left without step() (a loss scaler found its mean not finite
        and skipped it, or a steps() body moved on): the next step begins.  False when the
        step's mean was finite, outside steps(): step() was forgotten."""
        with self._kubeps_lock:
            if not self._kubeps_synchronized:
                return True  # another hook of this backward pass ended it
            if not self._kubeps_overflowed:
                return False
            # The step moves on before the flag clears: a hook on another thread that
            # reads the flag cleared reads the new step.
            _counter.advance()
            self._kubeps_note_skipped()
        return True

    def _kubeps_note_skipped(self):
        self._kubeps_synchronized = False
        self._kubeps_overflowed = False
        self.kubeps_skipped_steps += 1

    def step(self, closure=None, **kwargs):
        """Synchronizes (see synchronize()), then applies the update and moves to the next
        step.  A closure is called once, before the communication.  Keyword arguments go to
        the wrapped optimizer's step() (torch 1.13's GradScaler passes grad_scaler= to an
        optimizer that unscales and skips by itself: a fused Adam)."""
        # A scaler that hands the unscaling to the optimizer (torch 1.13: grad_scaler=;
        # 2.x: the grad_scale attribute) leaves it the decision to skip, too.
        scaler_steps = "grad_scaler" in kwargs or hasattr(self, "grad_scale")
        if scaler_steps and self._kubeps_servers_optimize():
            raise FailedPrecondition(
                "a GradScaler needs the servers' optimizer 'none' (spec.optimizer.name): the "
                "servers' own optimizer would apply the scaled gradients backward sent")
        if self._kubeps_resumed:
            self._kubeps_resumed = False
            return None  # synchronize() found a rollback: steps() goes on from the resume step
        if self._kubeps_settings is not None and settings_changed(self._kubeps_settings, self):
            self._kubeps_settings = None  # said once
        counted = self.__dict__.get("_kubeps_steps_counted_on")
        if counted is not None:  # what torch 1.x's schedulers count, and 2.x's check
            counted._step_count = getattr(counted, "_step_count", 0) + 1
            counted._opt_called = True
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._kubeps_discard:
            # This iteration's forward pass found a rollback: steps() yields its resume step next.
            self._kubeps_drop_iteration()
            return loss
        if self._kubeps_defers():
            if self._kubeps_exchange_rest():
                _counter.advance()
            return loss  # else rolled back: steps() goes on from the resume step
        if not self.synchronize():
            self._kubeps_resumed = False
            return loss  # rolled back: steps() goes on from the resume step
        self._kubeps_check_unchanged_since_synchronize()
        if self._kubeps_overflowed and not scaler_steps:
            self._kubeps_note_skipped()
            if self.kubeps_skipped_steps == 1:
                warnings.warn(
                    "kubeps: step %d's averaged gradient holds NaN or Inf: its update is skipped, "
                    "as spec.nonFinite: SkipStep says (optimizer.kubeps_skipped_steps counts "
                    "them; said once)" % _counter.step, stacklevel=2)
        elif not self._kubeps_servers_optimize():
            super().step(**kwargs)
        self._kubeps_synchronized = False
        self._kubeps_overflowed = False
        _counter.advance()
        return loss

    def _kubeps_exchange_rest(self):
        """model=: sends what backward did not (zeros for parameters without a gradient)
        and leaves every exchange of the step for the next forward pass to wait for.
        False when the job rolled back instead (the counter is at the resume step)."""
        step = _current_step("optimizer.step()")
        exchanges = self._kubeps_end_backward()
        self._kubeps_check_gradients()
        missing = [b for b in self._kubeps_bindings if b.name not in exchanges]
        # A parameter left out of this forward pass still has its last exchange pending:
        # it must end before the same regions are used again.
        if missing and not self._kubeps_resolve(missing):
            # This step's exchanges so far belong to the timeline rolled back: waited out
            # (nothing may hold a region), and dropped.
            with self._kubeps_lock:
                self._kubeps_pending.update(exchanges)
            self._kubeps_drop_pending()
            return False
        for binding in missing:
            copy_gradient(binding)
        if missing:
            handle = self._kubeps_session.push_pull([b.name for b in missing], step)
            exchanges.update((b.name, handle) for b in missing)
        with self._kubeps_lock:
            self._kubeps_pending.update(exchanges)
        return True

    def _kubeps_roll_back(self, resume_step):
        servers_optimize = self._kubeps_servers_optimize()
        # Where no copy is of that step (this process started after it), its own load is.
        restored = self._kubeps_snapshots.roll_back(
            resume_step, None if servers_optimize else self._kubeps_resume_loader)
        if servers_optimize:
            with torch.no_grad():
                for binding in self._kubeps_bindings:
                    binding.param.copy_(binding.values)
        if not restored and not self._kubeps_warned_rollback:
            self._kubeps_warned_rollback = True
            warnings.warn(not_restored(resume_step, self._kubeps_snapshots, servers_optimize,
                                       getattr(self, "_kubeps_model", None) is not None))
        with self._kubeps_lock:
            self._kubeps_exchanges = {}
            self._kubeps_new_backward()
        self._kubeps_left_out = None  # not pushed, so at or after the resume step
        self._kubeps_synchronized = False
        self._kubeps_overflowed = False
        _counter.roll_back(resume_step)

    def _kubeps_close(self):
        self._kubeps_closed = True
        for handle in [h for _, h in self._kubeps_gradient_hooks] + self._kubeps_forward_hooks:
            handle.remove()


def DistributedOptimizer(optimizer, named_parameters=None, backward_passes_per_step=1,
                         model=None):
    """Wraps a torch optimizer so that each step goes through kubeps' parameter servers.

    Declares every trainable parameter of `optimizer` to the agent, by its name in
    `named_parameters` (model.named_parameters(); without it, names by position),
    and pushes each gradient from backward as soon as it is ready.  Parameters are
    float32, bfloat16 or float16 (the servers keep float32 values); frozen ones
    (requires_grad False) stay out.  One per process.

    With `model` (the module that holds the parameters) and the servers' optimizer,
    step() returns without waiting and each module waits for its own parameters just
    before its next forward (the module docstring says more).

    Returns an optimizer of a subclass of `optimizer`'s class, sharing its
    param_groups and state: use it in place of `optimizer`.
    """
    global _optimizer
    session = kubeps.session("kubeps.torch.DistributedOptimizer()")
    if _optimizer is not None:
        raise FailedPrecondition(
            "kubeps.torch.DistributedOptimizer() was called twice: the parameters are declared "
            "once per session, and %s are declared already"
            % describe_names(_optimizer.kubeps_parameter_names))
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgument("DistributedOptimizer: expected a torch.optim.Optimizer, got %s"
                              % type(optimizer).__name__)
    cls = type(type(optimizer).__name__, (_DistributedOptimizer, type(optimizer)), {})
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._kubeps_original = optimizer  # shares param_groups and state (load_state_dict)
    # A learning-rate scheduler made before the wrapping patched step() on the
    # optimizer itself, to count calls there. Copied, that patch ran the
    # original optimizer's own step and bypassed kubeps: the wrapper's step
    # counts on the original instead, where the scheduler looks.
    if wrapped.__dict__.pop("step", None) is not None:
        wrapped._kubeps_steps_counted_on = optimizer
    wrapped._kubeps_setup(session, named_parameters, backward_passes_per_step, model)
    _optimizer = wrapped
    return wrapped


def broadcast_parameters(params, root_rank=0):
    """Starts every worker from the same parameters: rank 0's, or the servers' on a restart.

    `params` is a state_dict or (name, tensor) pairs.  Only the tensors that the
    DistributedOptimizer declared (its trainable parameters, by name) go through
    kubeps; the others (buffers such as BatchNorm's running statistics, integer or
    float64 tensors, frozen parameters) are left alone: each worker keeps its own.
    Each declared tensor's value is written into its values region and `init` sent;
    the servers keep the first values they get (rank 0's on a new job, their own on a
    restarted process) and every worker receives them back into the tensors.
    """
    if root_rank != 0:
        raise InvalidArgument("broadcast_parameters: root_rank=%r; kubeps broadcasts rank 0's "
                              "values (the servers keep the first values they get)" % root_rank)
    optimizer = _require_optimizer("kubeps.torch.broadcast_parameters()")
    items = list(params.items()) if hasattr(params, "items") else list(params)
    given = {}
    names = declared_names((key for key, _ in items), optimizer._kubeps_by_name)
    for name, (_, tensor) in zip(names, items):
        if name is None or not torch.is_tensor(tensor) or tensor.dtype not in CARRIED_DTYPES:
            continue
        binding = optimizer._kubeps_by_name[name]
        if tuple(tensor.shape) != binding.shape:
            raise InvalidArgument("broadcast_parameters: %r has shape %s; it was declared with "
                                  "shape %s" % (name, list(tensor.shape), list(binding.shape)))
        given[name] = tensor
    if items and not given:
        raise InvalidArgument(
            "broadcast_parameters: none of the tensors given (%s) is a declared parameter "
            "(declared: %s); pass model.state_dict() of the model whose named_parameters() "
            "the DistributedOptimizer got" % (describe_names(name for name, _ in items),
                                              describe_names(optimizer.kubeps_parameter_names)))
    _broadcast(optimizer, given)


def _broadcast(optimizer, given):
    if _counter.step is not None:
        raise FailedPrecondition("broadcast_parameters: the initial values were already "
                                 "broadcast in this session (by broadcast_parameters or steps())")
    _counter.start(begin(optimizer, given))


def steps(total_steps):
    """Yields the global steps this worker computes, from where the job is up to
    `total_steps` (exclusive): 0 on a new job, the servers' step after a restart, and
    after a rollback the step to resume from.  Broadcasts the parameters first if
    broadcast_parameters() was not called."""
    optimizer = _require_optimizer("kubeps.torch.steps()")
    if _counter.step is None:
        _broadcast(optimizer, {})
    elastic = optimizer._kubeps_session.elastic
    while True:
        while _counter.step < total_steps:
            if elastic:
                _counter.share = next_member_step(optimizer, _counter, total_steps)
                if _counter.left:
                    return
                if _counter.share is None:
                    continue  # taken in at the last step: nothing left to compute
            step, moves = _counter.step, _counter.moves
            optimizer._kubeps_discard = False  # a new iteration: nothing of it to drop
            optimizer._kubeps_snapshots.at_step(step, optimizer)
            yield step
            optimizer._kubeps_end_dropped_iteration()  # one without step(): rolled back now
            if _counter.moves == moves:
                # A body without optimizer.step() still moves on (a loss scaler skipped it).
                optimizer._kubeps_left_without_step(step)
                _counter.advance()
        # model=: the last step's values are still in flight; a rollback found
        # here goes on from the resume step.
        if optimizer._kubeps_resolve_all():
            return


def examples():
    """This worker's examples of the step steps() yielded last: (first, end), a run of
    that step's global batch (global_batch()), in rank order among the step's workers.

    Take them from the step's order of the data set, as examples/pytorch/fashion_mnist.py
    does, and every example of an epoch is used once whoever computes each step.  In a
    fixed job each worker's run is spec.batchSize examples, by rank; in an elastic job the
    runs change with the workers.
    """
    session = kubeps.session("kubeps.torch.examples()")
    if session.elastic:
        if _counter.share is None:
            raise FailedPrecondition("kubeps.torch.examples() in an elastic job is the step's "
                                     "that kubeps.torch.steps() yielded: iterate steps() first")
        return _counter.share.first_example, _counter.share.end_example
    return batch_run(fixed_global_batch(session, "examples"), session.rank, session.size)


def global_batch():
    """The examples of one step over all its workers: spec.batchSize x the workers (an
    elastic job's: x the workers it started with, whoever computes each step)."""
    session = kubeps.session("kubeps.torch.global_batch()")
    if not session.elastic:
        return fixed_global_batch(session, "global_batch")
    if _counter.share is not None:
        return _counter.share.global_batch
    if _counter.step is None:
        raise FailedPrecondition(
            "kubeps.torch.global_batch() in an elastic job is the job's scheduler's, which the "
            "agent asks once the parameters are initialized: call "
            "kubeps.torch.broadcast_parameters(model.state_dict()) first")
    return session.membership(_counter.step).global_batch


def scaled_away():
    """Whether steps() ended because this worker left the job before its last step: scaled
    away, or dropped as lost while the job went on.  Its parameters are then of that step,
    not the job's result: evaluate and save on a worker that has not left."""
    return _counter.left


def restore_on_rollback(*objects):
    """Registers objects of the program (a GradScaler, an LR scheduler: anything with
    state_dict() and load_state_dict()) whose state a rollback takes back to the resume
    step, with the parameters, the optimizer's state and torch's generators
    (_torch_rollback.py)."""
    _require_optimizer("kubeps.torch.restore_on_rollback()")._kubeps_snapshots.register(objects)


def resume_with(load, held=None):
    """Registers `load(step)`, which puts back the program's own state of `step` (the
    parameters and the optimizer's state it saved itself, at that step) when this process
    starts a sync job past step 0: broadcast_parameters() or steps() calls it once, under
    torch.no_grad(), with the step the servers are at.  Needed with the servers' optimizer
    `none`, where the servers hold no parameters: without it such a start is refused
    (_torch_start.py).  In every mode it also brings back what only the program keeps
    (buffers, a scaler, a scheduler); the servers' parameters then replace the ones it
    loaded.  `held()`, where given, lists the steps it can load: with `none`, a start at
    another (a save cut short by the process's death) takes the job back to one of them."""
    optimizer = _require_optimizer("kubeps.torch.resume_with()")
    if not callable(load) or not (held is None or callable(held)):
        raise InvalidArgument("resume_with: expected functions, got %r and %r" % (load, held))
    if _counter.step is not None:
        raise FailedPrecondition("resume_with: this process started already (at step %d); "
                                 "register before broadcast_parameters() or steps()"
                                 % _counter.step)
    optimizer._kubeps_resume_loader, optimizer._kubeps_held_steps = load, held


def checkpoint_interval():
    """spec.checkpoint.intervalSteps (0: not said): the servers checkpoint its multiples,
    so a job resumes at one of them (or at its last step); a program with state of its own
    saves it at those steps for resume_with."""
    return kubeps.session("kubeps.torch.checkpoint_interval()").checkpoint_interval


def finish():
    """Tells the job this worker is done and ends the session (see kubeps.finish)."""
    if _optimizer is not None:
        _optimizer._kubeps_check_none_left_out()
        _optimizer._kubeps_resolve_all()
    kubeps.finish()
    _forget()


def shutdown():
    """Ends the session without finishing (see kubeps.shutdown)."""
    kubeps.shutdown()
    _forget()


def _forget():
    global _optimizer, _counter
    if _optimizer is not None:
        _optimizer._kubeps_close()
    _optimizer = None
    _counter = StepCounter()


def _current_step(caller):
    """The step being exchanged, where every step before it was (a step left out: refused)."""
    if _optimizer is not None:
        _optimizer._kubeps_check_none_left_out()
    if _counter.step is None:
        raise FailedPrecondition(
            "%s ran before the servers had initial values: call "
            "kubeps.torch.broadcast_parameters(model.state_dict()) or iterate "
            "kubeps.torch.steps(), before the first backward" % caller)
    return _counter.step


def _require_optimizer(caller):
    kubeps.session(caller)
    if _optimizer is None:
        raise FailedPrecondition(
            "%s needs the parameters declared: make kubeps.torch.DistributedOptimizer(optimizer, "
            "named_parameters=model.named_parameters()) first" % caller)
    return _optimizer
