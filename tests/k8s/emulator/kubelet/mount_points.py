"""Mount points on the host, shared by every stand-in kubelet on this machine.

A real node gives each pod its own root file system, so the folder a volume
is mounted on belongs to that pod alone. Here containers see the host's file
system: a pod's mountPath (/var/run/secrets/kubeps, /dev/termination-log)
is a folder or file made on the host, and every pod that mounts at that path
uses the same one, in this kubelet and in the kubelets of other stand-in
clusters running beside it (tests run side by side). Removing it while
another pod mounts there, or is about to, detaches that pod's bind mount: its
container finds its token gone.

So a pod claims each path it uses, and a path a kubelet made goes only when
no live process's pod claims it, all under one lock for the whole machine: a
file lock for other processes, a thread lock for this one's pod workers.
Claims are files in REGISTRY named by the path, the kubelet's process id and
the pod's uid; those of a process that died (a killed test) do not count.
"""
import contextlib
import fcntl
import os
import threading
import urllib.parse

# Under /tmp, not $TMPDIR: mount points are the machine's, and a test suite's
# run gives itself a $TMPDIR of its own.
REGISTRY = "/tmp/kubeps-emulator-mount-points"
_THREADS = threading.Lock()
_MADE = "made@"   # the marker of a path a kubelet made, which a kubelet may remove


@contextlib.contextmanager
def held():
    """The machine-wide lock over the mount points and their claims."""
    with _THREADS:
        os.makedirs(REGISTRY, exist_ok=True)
        with open(os.path.join(REGISTRY, "lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _key(path):
    return urllib.parse.quote(path, safe="")   # no "@" left in it


def made(path):
    """Records that a kubelet made `path` on the host (under held())."""
    open(os.path.join(REGISTRY, _MADE + _key(path)), "w").close()


def was_made(path):
    """Whether a kubelet made `path` (under held())."""
    return os.path.exists(os.path.join(REGISTRY, _MADE + _key(path)))


def claim(path, pod_uid):
    """Records that pod `pod_uid` of this process uses `path` (under held())."""
    open(os.path.join(REGISTRY, "%s@%d@%s" % (_key(path), os.getpid(), pod_uid)), "w").close()


def release(pod_uid):
    """Drops every claim of pod `pod_uid` of this process (under held())."""
    suffix = "@%d@%s" % (os.getpid(), pod_uid)
    for name in os.listdir(REGISTRY):
        if name.endswith(suffix):
            _unlink(os.path.join(REGISTRY, name))


def remove_if_unused(path):
    """Removes `path` if a kubelet made it, no live pod claims it, and it is
    empty (a folder of mount points that are gone), then its parents that a
    kubelet made and nothing holds any more; under held()."""
    key = _key(path)
    marker = os.path.join(REGISTRY, _MADE + key)
    if not os.path.exists(marker):
        return
    for name in os.listdir(REGISTRY):
        parts = name.split("@")
        if len(parts) == 3 and parts[0] == key:
            if _alive(int(parts[1])):
                return
            _unlink(os.path.join(REGISTRY, name))
    if _remove_created(path):
        _unlink(marker)
        remove_if_unused(os.path.dirname(path))


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_created(path):
    """Removes a link, an empty folder or an empty file; whether it is gone."""
    try:
        if os.path.islink(path):
            os.unlink(path)
        elif os.path.isdir(path):
            os.rmdir(path)   # only when empty (nothing is mounted on it any more)
        elif os.path.isfile(path) and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass
    return not os.path.lexists(path)
