"""A TrainingJob that brings its own PyTorch program (user_code_job.py), under
injected faults (KUBEPS_FAULTS: dropped, duplicated and delayed requests and
answers on every process of the job): it ends with the same parameters, bit
for bit, as without them. Its own ctest entry, apart from test_user_code: it
mostly waits for resend timeouts, so it runs beside a test that computes
(tests/CMakeLists.txt)."""
import unittest

from jobtools import scrape_while_running, total
from user_code_job import UserCodeJobCase, differing_parameters

# What test_faults.py injects, on every process of the job.
FAULTS = "drop_request=0.2,drop_response=0.2,duplicate=0.05,delay=0.1,delay_max_ms=300,seed=7"
FAULT_STEPS = 10


class UserCodeFaultsTest(UserCodeJobCase):
    def test_injected_faults_change_no_parameter(self):
        # Short deadlines, so that lost messages are resent quickly.
        spec = {"resendTimeoutMs": 150, "maxResends": 20}
        clean, clean_saved = self.saved_run("faults-clean", FAULT_STEPS, spec)
        self.assert_succeeded(clean, clean.wait(180))
        job, saved = self.saved_run("faults", FAULT_STEPS, spec, env={"KUBEPS_FAULTS": FAULTS})
        scrapes = scrape_while_running(job, ("scheduler-0", "server-0", "server-1", "worker-0",
                                             "worker-1"))
        self.assert_succeeded(job, job.wait(240))
        injected = {kind: total(scrapes, "kubeps_faults_injected_total", fault=kind)
                    for kind in ("drop_request", "drop_response", "duplicate", "delay")}
        resends = total(scrapes, "kubeps_rpc_resends_total")
        print("\nPyTorch job of %d steps under KUBEPS_FAULTS: faults injected %s; resends %d"
              % (FAULT_STEPS, ", ".join("%s %d" % item for item in injected.items()), resends))
        for kind, count in injected.items():
            self.assertGreater(count, 0, "no %s fault injected" % kind)
        self.assertGreater(resends, 0)
        self.assertEqual(differing_parameters(clean_saved, saved), [], job.output())
        # Though the answer telling a server the job is over may be lost.
        for server in (0, 1):
            self.assertIn("[server %d] final checkpoint of step %d" % (server, FAULT_STEPS),
                          job.output())


if __name__ == "__main__":
    unittest.main()
