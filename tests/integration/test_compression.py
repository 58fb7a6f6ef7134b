"""Gradient compression (spec.compression): a sync job pushing 16-bit or
2-bit gradients trains, and it keeps the exactly-once contract: under dropped, duplicated and delayed
requests a 2-bit job ends bit-identical to its clean run (a resend sends the
bytes encoded once, and the worker's residual moves on once per push), and so
it does when a server is killed and the job rolls back (the residuals go back
with it)."""
import math
import os
import signal
import tempfile
import unittest

from jobtools import (ACCURACY, PACED_FOR_KILLS, SLIGHTLY_SLOW_NETWORK, RunningJob, manifest_with,
                      metric, read_floats, run_job, scrape_while_running, wait_for_replica_pid,
                      write_manifest)
from test_faults import FAULTS, MLP_PARAMS

STEPS = 30
SERVERS = ("server-0", "server-1")


def job(name, compression, **more):
    """The MLP with plain SGD; `more`: top-level spec fields added or replaced."""
    spec = dict({"resendTimeoutMs": 150, "maxResends": 20,
                 "runPolicy": {"restartPolicy": "Never"}}, **more)
    if compression:
        spec["compression"] = {"type": compression, "threshold": 0.001}
    return manifest_with(name, spec, optimizer={"name": "sgd", "learningRate": 0.1})


class CompressionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeps-compression-")

    def run_and_scrape(self, name, compression, env=None, steps=STEPS):
        """(parameters dump, {server: bytes per push it received}, output)."""
        dump = os.path.join(self.dir, name + ".bin")
        path = write_manifest(self.dir, job(name, compression), name + ".yaml")
        running = RunningJob(path, env=dict(env or {}, KUBEPS_MAX_STEPS=str(steps),
                                            KUBEPS_DUMP_PARAMS=dump))
        scrapes = scrape_while_running(running, SERVERS, interval=0.05)
        self.assertEqual(running.wait(timeout=240), 0, running.output())
        # Each server holds other tensors, so its pushes have a size of their
        # own: bytes per push are compared server by server, never summed over
        # scrapes taken at different steps. Only a scrape late in the run (more
        # pushes than steps: past half of it) gives whole steps' figures.
        per_push = {}
        for server in SERVERS:
            pushed = metric(scrapes.get(server, {}), "kubeps_server_push_bytes_total") or 0
            pushes = metric(scrapes.get(server, {}), "kubeps_server_pushes_total") or 0
            if pushes > steps:
                per_push[server] = pushed / pushes
        return dump, per_push, running.output()

    def test_sixteen_and_two_bit_jobs_learn_and_push_a_half_and_a_sixteenth(self):
        # 200 steps of SGD reach about 75% test accuracy in float32. Every
        # step pushes the same requests and the last scrape comes late in the
        # run, so bytes per push are the same as at its end to a request or two.
        # Without the network's delay a 200-step job is over in well under a
        # second, and a scrape in its second half could be missed.
        _, full, _ = self.run_and_scrape("learn-none", None, env=SLIGHTLY_SLOW_NETWORK, steps=200)
        for compression, ratio in (("bf16", 0.5), ("fp16", 0.5), ("2bit", 1 / 16)):
            dump, per_push, out = self.run_and_scrape("learn-" + compression, compression,
                                                      env=SLIGHTLY_SLOW_NETWORK, steps=200)
            values = read_floats(dump)
            self.assertEqual(len(values), MLP_PARAMS)
            self.assertTrue(all(math.isfinite(v) for v in values), compression)
            accuracy = ACCURACY.findall(out)
            self.assertTrue(accuracy, out)
            print("\n%s: test accuracy %s after 200 steps, bytes a push %s (float32 %s)"
                  % (compression, accuracy[-1], per_push, full))
            self.assertGreater(float(accuracy[-1]), 0.6, out)
            for server in SERVERS:
                self.assertIn(server, full, "the float32 run's %s was scraped too early" % server)
                self.assertIn(server, per_push, "%s's %s was scraped too early:\n%s"
                              % (compression, server, out))
                self.assertAlmostEqual(per_push[server] / full[server], ratio, delta=ratio * 0.1,
                                       msg="%s on %s" % (compression, server))

    def test_a_two_bit_run_under_faults_ends_as_the_clean_one(self):
        # Half of STEPS: each step under faults waits for its slowest resend.
        steps = STEPS // 2
        clean, _, _ = self.run_and_scrape("twobit-clean", "2bit", steps=steps)
        faulty, _, out = self.run_and_scrape("twobit-faults", "2bit", env={"KUBEPS_FAULTS": FAULTS},
                                             steps=steps)
        with open(clean, "rb") as a, open(faulty, "rb") as b:
            self.assertTrue(a.read() == b.read(), "2-bit parameters differ under faults:\n" + out)

    def test_a_two_bit_run_with_a_restarted_server_ends_as_the_clean_one(self):
        # The residuals go back with the job to the checkpoint step: the redone steps send
        # the bytes they sent before. (Before, they went on from where the left timeline
        # had taken them, and its unsent gradients were sent a second time.)
        steps = 120
        runs = {}
        for name in ("twobit-unkilled", "twobit-killed"):
            dump = os.path.join(self.dir, name + ".bin")
            text = job(name, "2bit", checkpoint={"intervalSteps": 10}, progressIntervalMs=100,
                       runPolicy={"restartPolicy": "OnFailure", "backoffLimit": 2})
            path = write_manifest(self.dir, text, name + ".yaml")
            running = RunningJob(path, env=dict(PACED_FOR_KILLS, KUBEPS_MAX_STEPS=str(steps),
                                                KUBEPS_DUMP_PARAMS=dump))
            if name.endswith("-killed"):
                running.wait_for_line(r"^\[worker 0\] epoch .* total_steps (2\d|3\d) ")
                os.kill(wait_for_replica_pid(running, "server-1"), signal.SIGKILL)
            self.assertEqual(running.wait(timeout=240), 0, running.output())
            runs[name] = (read_floats(dump), running.output())
        killed = runs["twobit-killed"][1]
        self.assertRegex(killed, r"\[worker 0\] rolled back to step [1-3]0\b")
        self.assertTrue(runs["twobit-unkilled"][0] == runs["twobit-killed"][0],
                        "2-bit parameters differ after a server's restart:\n" + killed)

    def test_an_unknown_compression_is_refused_naming_the_field(self):
        path = write_manifest(self.dir, job("badcompression", "int8"), "bad.yaml")
        code, ran = run_job(path, timeout=60)
        self.assertNotEqual(code, 0)
        self.assertIn("spec.compression.type", ran.output())
        self.assertIn("int8", ran.output())


if __name__ == "__main__":
    unittest.main()
