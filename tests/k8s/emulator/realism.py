"""Every realism setting of the stand-in at once, for a whole test run:

    KUBEPS_EMULATOR_REALISM=all ctest -R '^k8s\\.'      (or tests/k8s/soak.py)

turns on, in every cluster the operator's tests start, what a real cluster under load
does to a controller: watch events that arrive after the write's response
(per resource), a garbage collector seconds behind its owners, and the
operator's service-account token rotated every ROTATION_PERIOD seconds, the
old one refused shortly after (as the kubelet refreshes a projected token
and the API server expires it). RBAC with owner-reference enforcement and
name validation are on in every Cluster(rbac=True) anyway.
"""
import os
import threading

ENV = "KUBEPS_EMULATOR_REALISM"
WATCH_DELAY = {"trainingjobs": 1.0, "pods": 0.3, "services": 0.2, "secrets": 0.2}
GC_DELAY = 3.0
ROTATION_PERIOD = 20.0   # a real kubelet: about an hour; short, so every test sees one
OLD_TOKEN_GRACE = 5.0    # how long the token it replaced is still accepted


def wanted():
    return os.environ.get(ENV, "") == "all"


def turn_on(cluster, rotate_tokens=True):
    """Applies the settings to a started cluster; returns the token rotator
    (stop() it before the cluster), or None."""
    cluster.settings(watch_delay=WATCH_DELAY, gc_delay=GC_DELAY)
    if not (rotate_tokens and cluster.rbac):
        return None
    rotator = TokenRotator(cluster)
    rotator.start()
    return rotator


class TokenRotator(threading.Thread):
    """Plays the kubelet's part for the operator's projected token."""

    def __init__(self, cluster):
        super().__init__(name="token-rotator", daemon=True)
        self.cluster = cluster
        self.stopped = threading.Event()
        self.rotations = 0

    def run(self):
        while not self.stopped.wait(ROTATION_PERIOD):
            try:
                old = self.cluster.operator_token()
                self.cluster.rotate_operator_token(expire_old=False)
                if self.stopped.wait(OLD_TOKEN_GRACE):
                    return
                self.cluster.expire_token(old)
                self.rotations += 1
            except Exception:   # the cluster is stopping under us
                if self.stopped.is_set():
                    return
                raise

    def stop(self):
        self.stopped.set()
        self.join(timeout=10)
