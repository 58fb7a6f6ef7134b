"""The operator against an API server that turns its requests away with 429
Too Many Requests, as API Priority and Fairness does under load: the
operator waits the Retry-After the server asks for and sends the request
again (a write too: a 429 was never acted on), never fails a job for it,
and never hammers the server. The emulator throttles one user when asked
(Cluster.settings(throttle=...)).

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_throttling   (from tests/k8s)
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from operator_harness import (OPERATOR_USER, apply, get_job, phase_history,  # noqa: E402
                              training_job)
from own_cluster import OwnClusterTestCase  # noqa: E402

RETRY_AFTER = 2   # seconds, in the 429s
# The request log's times are when each answer went out; a retry sent
# Retry-After later is answered at least that much after the 429, less the
# clock's and the server's jitter.
SLACK = 0.2


class ThrottledOperatorTest(OwnClusterTestCase):
    def prepare_cluster(self):
        # A quarter of the operator's requests, and the first two outright
        # (its first lists and the leader lease), are refused.
        self.c.settings(throttle={"user": OPERATOR_USER, "fraction": 0.25, "burst": 2,
                                  "retryAfterSeconds": RETRY_AFTER})

    def test_a_throttled_operator_waits_retry_after_and_the_job_succeeds(self):
        c, name = self.c, "throttled"
        started = time.time()
        apply(c, training_job(name, max_steps=30))
        uid = get_job(c, name)["metadata"]["uid"]
        self.wait_phase(name, "Succeeded", timeout=240)
        phases = phase_history(c).phases(name, uid)
        self.assertNotIn("Failed", phases, self.diag(name))

        mine = [r for r in c.requests() if r["user"] == OPERATOR_USER]
        throttled = [r for r in mine if r["code"] == 429]
        self.assertGreater(len(throttled), 2, "the throttle was not exercised")
        # Every refused request that came again came no sooner than the
        # server asked (the operator's one worker and each informer send
        # their requests one at a time, so the next of the same verb and
        # path is the retry).
        for refused in throttled:
            again = next((r for r in mine if r["seq"] > refused["seq"] and
                          (r["verb"], r["path"]) == (refused["verb"], refused["path"])), None)
            if again is not None:
                self.assertGreaterEqual(again["time"] - refused["time"], RETRY_AFTER - SLACK,
                                        "%s %s sent again %.2f s after its 429" % (
                                            refused["verb"], refused["path"],
                                            again["time"] - refused["time"]))
        # Bounded: no burst of retries, and a modest rate over the job.
        elapsed = time.time() - started
        self.assertLess(len(mine) / elapsed, 10, "%d requests in %.0f s" % (len(mine), elapsed))
        for r in mine:
            window = [x for x in mine if r["time"] <= x["time"] < r["time"] + 1]
            self.assertLessEqual(len(window), 25, "a burst of %d requests in 1 s" % len(window))


if __name__ == "__main__":
    unittest.main()
