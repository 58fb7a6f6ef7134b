"""kubeps.torch's settings: the bucket size of the backward pass's requests, and the wrapped
optimizer's param-group settings, which the servers' optimizer never sees (differences between
groups and changes by a learning-rate scheduler are warned of once)."""

import os
import warnings

from kubeps.errors import InvalidArgument

DEFAULT_BUCKET_BYTES = 1 << 20  # DistributedDataParallel's first bucket, and the agent's


def bucket_bytes():
    """KUBEPS_BUCKET_BYTES, the least a request of the backward pass holds (0: one request
    per parameter), as the built-in trainer reads it."""
    text = os.environ.get("KUBEPS_BUCKET_BYTES")
    if text is None:
        return DEFAULT_BUCKET_BYTES
    if not text.isdigit():
        raise InvalidArgument("KUBEPS_BUCKET_BYTES=%r: not a number of bytes" % text)
    return int(text)


def group_settings(optimizer):
    """Each param group's settings (lr, momentum, ...), its parameters left out."""
    return [{k: v for k, v in group.items() if k != "params"}
            for group in optimizer.param_groups]


def _same(a, b):
    try:
        return bool(a == b)
    except (RuntimeError, TypeError, ValueError):  # tensors of several values
        return a is b


def warn_if_groups_differ(settings):
    first = settings[0]
    for i, group in enumerate(settings[1:], 1):
        for key in sorted(set(first) | set(group)):
            if not _same(first.get(key), group.get(key)):
                warnings.warn(
                    "kubeps: param_groups[0] and [%d] differ in %r (%s, %s), but the servers' "
                    "optimizer applies the job's spec.optimizer to every parameter alike: to "
                    "keep per-group settings, run the job with the servers' optimizer 'none'"
                    % (i, key, first.get(key), group.get(key)), stacklevel=4)
                return


def settings_changed(before, optimizer):
    """Whether a group's setting changed since `before` (a learning-rate scheduler), which
    the servers' optimizer never sees; warns when one did (called from step())."""
    for i, (was, now) in enumerate(zip(before, group_settings(optimizer))):
        for key, value in was.items():
            if not _same(value, now.get(key)):
                warnings.warn(
                    "kubeps: param_groups[%d][%r] changed from %s to %s (a learning-rate "
                    "scheduler?), but the servers' optimizer applies the job's "
                    "spec.optimizer: give the job spec.optimizer.schedule (a warmup, a cosine "
                    "or linear decay), or run it with the servers' optimizer 'none' to "
                    "schedule it in this process"
                    % (i, key, value, now.get(key)), stacklevel=3)
                return True
    return False
