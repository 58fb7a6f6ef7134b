"""Ten short jobs submitted, deleted while running and applied again at once,
deleted once finished or left to finish, in a seeded random order, with every
realism setting of the stand-in on and the operator's token rotated twice
(churn.py; bench/operator_bench.py churn runs 100): every job ends in its
phase, no pod is created for a finished job, no object of a deleted job is
adopted.

    KUBEPS_BIN_DIR=build/bin python3 -m unittest -v test_churn   (from tests/k8s)
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import churn  # noqa: E402
from own_cluster import OwnClusterTestCase  # noqa: E402

SEED = 11


class ChurnTest(OwnClusterTestCase):
    start_operator = False   # churn.Churn runs it, and starts it again if it exits

    def prepare_cluster(self):
        churn.every_setting_on(self.c)

    def test_ten_jobs_churned_end_right_and_adopt_nothing(self):
        run = churn.Churn(self.c, 10, SEED, log=lambda line: None).run()
        self.op = run.supervisor.operator   # its log in the diagnostics
        counts = run.counts()
        summary = churn.report(counts, SEED) + "\n" + self.diag()
        self.assertEqual(counts["right_phase"], counts["submissions"], summary)
        self.assertEqual(churn.must_be_zero(counts), {key: 0 for key in churn.must_be_zero(counts)},
                         summary)
        self.assertTrue(counts["request_log_complete"], summary)
        self.assertEqual(counts["token_rotations"], 2, summary)
        # every action was taken: the plan of 10 has each at least once
        self.assertEqual(set(counts["actions"]), {churn.FINISH, churn.REPLACE,
                                                  churn.DELETE_FINISHED, churn.DEADLINE}, summary)


if __name__ == "__main__":
    unittest.main()
