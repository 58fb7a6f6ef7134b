"""The order of a DistributedOptimizer's calls in a step, where kubeps differs from a local
optimizer: backward's hooks send each gradient to the servers as soon as it is computed, so
what a program does to the gradients after backward reaches no server, and a step one worker
leaves out leaves a sync job's servers waiting for its gradients.  Each such misuse is refused,
naming what to do instead (Horovod refuses the first too), where it would otherwise be lost
silently or desynchronize the job."""

import contextlib

from kubeps._torch_params import check_sent_gradients_unchanged, forget_sent
from kubeps.errors import FailedPrecondition


class CallOrder:
    """The DistributedOptimizer's methods that keep a step's calls in order (torch.py's
    _DistributedOptimizer)."""

    _kubeps_left_out = None  # a step steps() moved past with nothing of it sent

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's zero_grad(), refused between backward and step() (or
        synchronize()): the gradients of the step have gone to the servers, which apply
        them whatever .grad holds now."""
        with self._kubeps_lock:
            sent = self._kubeps_ready > 0 and not self._kubeps_discard
        if sent:
            raise FailedPrecondition(
                "optimizer.zero_grad() was called after backward and before optimizer.step(): "
                "backward sent the step's gradients to the servers as it computed them, and "
                "they apply them whatever .grad holds now. Call zero_grad() before backward "
                "(or after step())")
        return super().zero_grad(*args, **kwargs)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's: step() in the block does not synchronize again.  kubeps' step() never
        does after synchronize(); the block is there for programs written for Horovod
        (synchronize(), clip the averaged gradients, then step() in this block)."""
        yield

    def load_state_dict(self, state_dict):
        """The wrapped optimizer's, which replaces param_groups and state: the optimizer
        given to DistributedOptimizer() shares them again, so that a learning-rate scheduler
        made before the wrapping still sets the rate this one steps with."""
        super().load_state_dict(state_dict)
        original = self._kubeps_original
        original.param_groups, original.state = self.param_groups, self.state

    def _kubeps_check_unchanged_since_synchronize(self):
        """step(), synchronized, with the servers' optimizer: the update was made from the
        gradients backward sent, so a gradient changed since (clipped between synchronize()
        and step(), as Horovod's programs do) would be lost: refused.  What synchronize()
        recorded is forgotten either way."""
        if self._kubeps_servers_optimize():
            check_sent_gradients_unchanged(self._kubeps_bindings)

    def _kubeps_left_without_step(self, step):
        """steps(): the body did not call step().  A synchronized step ends skipped (a loss
        scaler found its mean not finite).  Any other leaves the servers waiting for this
        worker's gradients of `step`: refused here where backward sent some, else (a body
        that only looks at the step) once this worker exchanges a later step, or finishes."""
        with self._kubeps_lock:
            if self._kubeps_synchronized:
                forget_sent(self._kubeps_bindings)
                self._kubeps_note_skipped()
                return
            if self._kubeps_session.mode != "sync":
                return  # an async shard takes each push as it comes: none waits for this step
            started = self._kubeps_ready > 0 or bool(self._kubeps_exchanges)
        if self._kubeps_left_out is None:
            self._kubeps_left_out = step
        if started:
            self._kubeps_check_none_left_out()

    def _kubeps_check_none_left_out(self):
        if self._kubeps_left_out is not None:
            raise FailedPrecondition(
                "the body of kubeps.torch.steps() for step %d ended without optimizer.step(): "
                "every worker's gradients of every step go to the servers, which wait for them, "
                "so a step cannot be left out. To skip a step's update, decide it from what every "
                "worker sees alike, as a GradScaler does from the averaged gradients: with the "
                "servers' optimizer 'none' (spec.optimizer.name), call optimizer.synchronize() "
                "and leave step() out when they say so" % self._kubeps_left_out)
