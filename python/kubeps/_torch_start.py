"""Where a process's training starts (kubeps.torch.broadcast_parameters and steps()).

Rank 0's initial values go to the servers (the first values they get win), and every
worker starts at the step the servers are at: 0 on a new job, later when the job resumed
over its checkpoints or this process was restarted.

A start past 0 takes the servers' parameters where they hold them (their optimizer steps).
With the servers' optimizer `none` they hold averaged gradients only: the parameters and
the optimizer's state are the program's, and only the program can put back those of the
start step, from a checkpoint of its own, through `kubeps.torch.resume_with(load)`. In a
sync job the agent refuses such a start without it (FailedPrecondition, reason
ProgramStateMissing): trained on from fresh values, the job would end "Succeeded" with a
model that never learned. The program may not hold the step the job is at: killed after the
servers' checkpoint of a step and before its own save of it was written, it restarts at that
step. With `resume_with(load, held)` it says which steps it holds, and the job goes back to
the newest of them every shard holds too (or fails, saying so, where there is none).
`load` runs first whatever the servers' optimizer, so that what only the program keeps
(the model's buffers, a loss scaler, an LR scheduler) comes back too.

In an async job each worker's steps are its own: a restarted process starts after the last step
it pushed and waited for, with the servers' newest values; `load` is not called, and a start past 0 with
`none` is only warned of.
"""
import warnings

import torch


def begin(optimizer, given):
    """Broadcasts `given` (name -> tensor; the parameters themselves where missing) and
    returns the step this process starts at, with the parameters of that step in place
    (and in `given`'s tensors)."""
    session = optimizer._kubeps_session
    load, held = optimizer._kubeps_resume_loader, optimizer._kubeps_held_steps
    with torch.no_grad():
        for binding in optimizer._kubeps_bindings:
            binding.values.copy_(given.get(binding.name, binding.param))
        start = session.init_tensors(restores_own_state=load is not None,
                                     own_state_steps=None if held is None else list(held()))
        resumes = start > 0 and session.mode == "sync"
        if resumes and load is not None:
            load(start)
        # Where the servers hold no parameters, this process's own are the step's.
        own = start > 0 and not optimizer._kubeps_servers_optimize()
        if own and not resumes:
            warnings.warn(
                "kubeps: this process starts the async job at step %d, but the servers' "
                "optimizer is 'none': they hold averaged gradients, not parameters, so the "
                "parameters stay as this process made them" % start)
        for binding in optimizer._kubeps_bindings:
            if not own:
                binding.param.copy_(binding.values)
            if binding.name in given and given[binding.name] is not binding.param:
                given[binding.name].copy_(binding.param)
    return start
