"""The operator's credentials on a cluster that rotates them (issue: the
service-account token was read once). A projected service-account token is
rewritten by the kubelet about every hour and refused by the API server once
it expires; the operator must read the file again, as client-go does, and
must not report itself ready while every call it makes is refused.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_credentials   (from tests/k8s)

The emulator's operator kubeconfig names its token by `tokenFile`, as an
in-cluster operator finds its token in a file; Cluster.rotate_operator_token
plays the kubelet's part.
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from emulator import kubeconfig  # noqa: E402
from operator_harness import Operator, apply, job_pods, training_job  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402

REFUSED = "refuses this operator's credentials"


class TokenRotationTest(OwnClusterTestCase):
    start_operator = False
    cluster_options = {"rotate_tokens": False}   # these tests are the kubelet here

    def start_ready_operator(self):
        self.op = Operator(self.c)
        self.c.wait_for(lambda: self.op.http("/readyz")[0] == 200, timeout=60,
                        what="/readyz 200")

    def expire_watches(self):
        """Ends the open watches, as the API server's watch timeout does: the
        operator must list again, and that request carries its token."""
        self.c.hook("cut-watches")

    def test_a_rotated_token_is_read_again(self):
        c, name = self.c, "rotated"
        self.start_ready_operator()
        c.rotate_operator_token(expire_old=True)
        self.expire_watches()
        apply(c, training_job(name, max_steps=50))
        c.wait_for(lambda: len(job_pods(c, name)) >= 5, timeout=60,
                   what="the pods of a job applied after the token rotated\n" + self.diag(name))
        self.assertEqual(self.op.http("/readyz")[0], 200)
        self.assertNotIn(REFUSED, self.op.log())
        self.delete_job(name)

    def test_an_expired_token_turns_readyz_red_until_a_new_one_arrives(self):
        c, name = self.c, "expired"
        self.start_ready_operator()
        # The kubelet stopped refreshing the file: the token in it expires.
        new = c.rotate_operator_token(expire_old=True, write_file=False)
        self.expire_watches()
        c.wait_for(lambda: self.op.http("/readyz")[0] == 503, timeout=60,
                   what="/readyz 503 while every call is refused\n" + self.diag())
        self.assertIn(REFUSED, self.op.log())
        self.assertIn(os.path.join(c.dir, "operator-token", "token"), self.op.log())
        # The file is refreshed: the operator works and is ready again.
        kubeconfig.write_token_file(os.path.join(c.dir, "operator-token", "token"), new)
        c.wait_for(lambda: self.op.http("/readyz")[0] == 200, timeout=60,
                   what="/readyz 200 once the file holds a valid token\n" + self.diag())
        apply(c, training_job(name, max_steps=50))
        c.wait_for(lambda: len(job_pods(c, name)) >= 5, timeout=60,
                   what="the pods of a job applied after the new token arrived\n" + self.diag(name))
        self.delete_job(name)


if __name__ == "__main__":
    unittest.main()
