"""A test case with a cluster of its own for every test, and the operator
started on it: for tests that change the cluster (its settings, its
namespaces, the operator's token) in ways other tests must not see."""
from operator_harness import Operator
from operator_test_case import OperatorTestCase, new_cluster


class OwnClusterTestCase(OperatorTestCase):
    start_operator = True   # False: the test starts it (self.op = Operator(self.c))
    cluster_options = {}    # for new_cluster()

    def prepare_cluster(self):
        """Runs before the operator starts: settings, namespaces."""

    def setUp(self):
        self.c = new_cluster(**self.cluster_options)
        self.op = None
        try:
            self.prepare_cluster()
            if self.start_operator:
                self.op = Operator(self.c)
        except Exception:
            self.c.stop()
            raise

    def tearDown(self):
        if self.op is not None:
            self.op.stop()
        self.c.stop()
