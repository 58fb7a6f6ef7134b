"""kubeps.torch with model=: each module of the model waits for its own parameters' new
values just before its forward pass (a forward pre-hook), so that step() need not wait for
them all and the next forward pass starts on the first layers while the last still travel."""

import torch

from kubeps._torch_params import (first_forward_pre_hook, modules_and_their_parameters,
                                  outside_compiled_graphs)
from kubeps.errors import FailedPrecondition, InvalidArgument, RolledBack
from kubeps.shared_tensors import describe_names


def unwaited(handles):
    """Each handle once (one push_pull may cover several parameters), those not yet waited for."""
    return list({id(h): h for h in handles if not h.waited}.values())


class ForwardWaits:
    """The DistributedOptimizer's methods for model= (torch.py's _DistributedOptimizer)."""

    # A forward pass under autograd found a rollback: its resume step, until the iteration
    # it drops has ended (step(), or steps() where the body calls none).
    _kubeps_rollback_due = None

    def _kubeps_hook_forward(self, model):
        """Each module of `model` that holds declared parameters waits for them before its
        forward (a forward pre-hook)."""
        if not isinstance(model, torch.nn.Module):
            raise InvalidArgument("DistributedOptimizer: model= expects a torch.nn.Module, got %s"
                                  % type(model).__name__)
        self._kubeps_model = model
        by_param = {id(b.param): b for b in self._kubeps_bindings}
        covered = set()
        for module, params in modules_and_their_parameters(model):
            own = [by_param[id(p)] for p in params if id(p) in by_param]
            if own:
                covered.update(b.name for b in own)
                self._kubeps_forward_hooks.append(first_forward_pre_hook(
                    module, self._kubeps_make_forward_hook(own)))
        outside = [b.name for b in self._kubeps_bindings if b.name not in covered]
        if outside:
            raise InvalidArgument(
                "DistributedOptimizer: %s are not parameters of model=%s's modules; pass the model "
                "that holds every parameter of the optimizer" % (describe_names(outside),
                                                                  type(model).__name__))

    def _kubeps_make_forward_hook(self, bindings):
        def before_forward(module, *unused):
            if getattr(module, "_is_replica", False):
                # nn.DataParallel's copy, made before this wait: it would train on the values
                # of the step before.
                raise FailedPrecondition(
                    "model=%s runs inside an nn.DataParallel, which copies its parameters to "
                    "the GPUs before the modules wait for their new values: pass the "
                    "DataParallel as model=" % type(self._kubeps_model).__name__)
            if not self._kubeps_closed:
                self._kubeps_resolve(bindings)
        return outside_compiled_graphs(before_forward)

    def _kubeps_defers(self):
        """Whether step() leaves the waiting to the next forward pass."""
        return bool(self._kubeps_forward_hooks) and self._kubeps_servers_optimize()

    def _kubeps_resolve(self, bindings):
        """Waits for the last step's exchanges of `bindings` and copies their new values
        into the parameters.  False when the job rolled back instead: this iteration is
        dropped, and every parameter goes back to the values of the step to resume from, at
        once outside autograd, else once the iteration has ended."""
        if self._kubeps_rollback_due is not None:
            return False  # this pass found the rollback in an earlier module
        with self._kubeps_lock:
            handles = {b.name: self._kubeps_pending.pop(b.name) for b in bindings
                       if b.name in self._kubeps_pending}
        if not handles:
            return True
        try:
            self._kubeps_session.wait(unwaited(handles.values()))
        except RolledBack as rollback:
            self._kubeps_drop_pending()
            # This iteration's gradients would come partly from the values before: they are
            # dropped.  steps() ends the discarding when it yields the resume step, so a
            # pass after step() (an evaluation) costs no step.
            self._kubeps_discard = True
            if torch.is_grad_enabled():
                # The modules before this one ran on their parameters, which autograd saved
                # for this pass's backward: put back under it, they would fail it ("modified
                # by an inplace operation").  They go back once the iteration has ended.
                self._kubeps_rollback_due = rollback.resume_step
            else:
                self._kubeps_roll_back(rollback.resume_step)
            return False
        with torch.no_grad():
            for binding in bindings:
                if binding.name in handles:
                    binding.param.copy_(binding.values)
        return True

    def _kubeps_drop_pending(self):
        """After a rollback: waits out what is still in flight (its outcome no longer
        matters), so that no request of the old step holds a region."""
        with self._kubeps_lock:
            pending, self._kubeps_pending = self._kubeps_pending, {}
        try:
            self._kubeps_session.wait(unwaited(pending.values()))
        except RolledBack:
            pass

    def _kubeps_end_dropped_iteration(self):
        """The iteration a forward pass found a rollback in has ended (its backward pass
        too): the rollback it found goes through now, and its exchanges are forgotten.
        False where it found none."""
        due, self._kubeps_rollback_due = self._kubeps_rollback_due, None
        if due is not None:
            self._kubeps_roll_back(due)
        return due is not None

    def _kubeps_drop_iteration(self):
        """step() of an iteration whose forward pass found a rollback: the parameters go
        back to the resume step's values (or hold them already), and its exchanges are
        forgotten."""
        self._kubeps_discard = False
        if not self._kubeps_end_dropped_iteration():
            with self._kubeps_lock:
                self._kubeps_exchanges = {}
                self._kubeps_new_backward()

    def _kubeps_resolve_all(self):
        """Brings every parameter up to date; False when the job rolled back instead."""
        if self._kubeps_end_dropped_iteration():
            self._kubeps_discard = False  # ended: nothing of it left to drop
            return False
        if not self._kubeps_resolve(self._kubeps_bindings):
            self._kubeps_discard = False  # no iteration in flight to drop
            return False
        return True
