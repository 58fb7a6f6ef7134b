"""kubeps.torch in a job whose workers change while it trains (an elasticPolicy).

Before each step, steps() asks the agent who computes it (`membership`): the
scheduler fixes each step's workers a little ahead, and each step's global
batch (spec.batchSize x the workers the job started with) is cut over that
step's workers in rank order, so the data stays a pure function of the seed
and the step whoever computes it.  A worker that is not a member of the step
either is taken in at a later one (it pulls that step's parameters from the
servers and starts there), has been scaled away (it ends its last step's
exchanges and leaves the loop; kubeps.torch.finish() then tells the job), or
waits to be taken in.
"""

import time

import torch

from kubeps.errors import FailedPrecondition, RolledBack

# How often a worker waiting to be taken in asks again (the built-in trainer's pace).
WAIT_TO_BE_TAKEN_IN_S = 0.05


def next_member_step(optimizer, counter, total_steps):
    """The Membership of the first step from counter.step on that this worker computes,
    counter.step moved there; None when there is none before total_steps, with
    counter.left set when the worker was scaled away."""
    session = optimizer._kubeps_session
    while counter.step < total_steps:
        share = session.membership(counter.step)
        if share.member:
            return share
        if share.scaled_away:
            # The last step's exchanges end first: a rollback meanwhile takes the worker
            # back to a step it computes, and it goes on from there.
            if optimizer._kubeps_resolve_all():
                counter.left = True
                return None
        elif share.next_member_step is not None:
            _join_at(optimizer, counter, min(share.next_member_step, total_steps), total_steps)
        else:
            time.sleep(WAIT_TO_BE_TAKEN_IN_S)
    return None


def _join_at(optimizer, counter, step, total_steps):
    """Starts this worker at `step` with the servers' parameters of that step."""
    if step >= total_steps:
        counter.start(step)
        return
    session = optimizer._kubeps_session
    if not optimizer._kubeps_resolve_all():
        return  # rolled back meanwhile: the counter is at the resume step
    # Sync: the servers are at `step` until its members pushed, this one
    # among them. Async: no version belongs to a step; the newest values do.
    handle = session.pull(None, min_version=step if session.mode == "sync" else 0)
    try:
        session.wait(handle)
    except RolledBack as rollback:
        optimizer._kubeps_roll_back(rollback.resume_step)
        return
    with torch.no_grad():
        for binding in optimizer._kubeps_bindings:
            binding.param.copy_(binding.values)
    counter.start(step)


def batch_run(global_batch, position, count):
    """Run `position` of `count` of a global batch: [p*G/count, (p+1)*G/count), as the
    agent cuts an elastic job's steps."""
    return global_batch * position // count, global_batch * (position + 1) // count


def fixed_global_batch(session, caller):
    """A fixed job's global batch: spec.batchSize x the workers."""
    if session.batch_size <= 0:
        raise FailedPrecondition(
            "kubeps.torch.%s(): the agent did not say spec.batchSize (a kubeps-agent older "
            "than this client?); run the job with an agent of this release" % caller)
    return session.batch_size * session.size
