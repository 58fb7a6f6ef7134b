"""A sync job under a bad network: dropped, duplicated and delayed requests
and answers (KUBEPS_FAULTS, injected by every process's gRPC services), with
the tensors in shared memory as kubeps run passes them, and connections reset
and blackholed by a proxy between the processes (the tensors over TCP). Resends
must make the run end with exactly the parameters of a clean run; without
resends the job must fail quickly and say which call to which peer failed. A
server frozen past the resends is waited for: no restart, no bit changed."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

from jobtools import (OVERLAPPED, PACED_FOR_KILLS, SOURCE_DIR, RunningJob, manifest_with, metric,
                      read_floats, resume, run_job, scrape_while_running, tensor_bytes, total,
                      wait_for_replica_pid, wait_for_steps, write_manifest)

PROXY = os.path.join(SOURCE_DIR, "tests", "tools", "fault_proxy.py")
FAULTS = "drop_request=0.2,drop_response=0.2,duplicate=0.05,delay=0.1,delay_max_ms=300,seed=7"
FAULT_KINDS = ("drop_request", "drop_response", "duplicate", "delay")
STEPS = 30
MLP_PARAMS = 784 * 256 + 256 + 256 * 10 + 10
REPLICAS = ("scheduler-0", "server-0", "server-1", "worker-0", "worker-1")


def job_env(**more):
    """The runs' environment: overlapped, so that the faults meet the exchanges
    of the backward pass."""
    return dict(OVERLAPPED, KUBEPS_MAX_STEPS=str(STEPS), **more)


def sync_job(name, max_resends=20):
    """2 servers, 2 workers, sync MLP with plain SGD; short per-attempt
    deadlines so that dropped messages are resent quickly. The learning rate
    warms up and decays by each part's update count: an update applied twice
    would shift every rate after it."""
    return manifest_with(name, {"resendTimeoutMs": 150, "maxResends": max_resends,
                                "runPolicy": {"restartPolicy": "Never"}},
                         optimizer={"name": "sgd", "learningRate": 0.1, "schedule": {
                             "warmupSteps": 50, "decay": "linear", "decaySteps": 400}})


class FaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeps-faults-")
        cls.clean_dump = os.path.join(cls.dir, "clean.bin")
        path = write_manifest(cls.dir, sync_job("clean"), "clean.yaml")
        code, job = run_job(path, env=job_env(KUBEPS_DUMP_PARAMS=cls.clean_dump))
        assert code == 0, job.output()
        cls.clean = read_floats(cls.clean_dump)
        assert len(cls.clean) == MLP_PARAMS, len(cls.clean)

    def assert_same_parameters(self, dump):
        with open(self.clean_dump, "rb") as a, open(dump, "rb") as b:
            clean, other = a.read(), b.read()
        self.assertEqual(len(other), len(clean))
        if other != clean:
            worst = max(abs(x - y) for x, y in zip(read_floats(dump), self.clean))
            self.fail("parameters differ from the clean run's (max |difference| %.3g)" % worst)

    def test_exchanging_after_the_step_ends_as_overlapping_does(self):
        # The clean run overlaps (each layer's push and pull during the
        # backward pass, waited for in the next forward); KUBEPS_OVERLAP=0
        # moves everything after the step.
        dump = os.path.join(self.dir, "no-overlap.bin")
        path = write_manifest(self.dir, sync_job("nooverlap"), "no-overlap.yaml")
        code, job = run_job(path, env=job_env(KUBEPS_DUMP_PARAMS=dump, KUBEPS_OVERLAP="0"))
        self.assertEqual(code, 0, job.output())
        self.assert_same_parameters(dump)

    def test_sync_run_with_faults_is_bit_identical(self):
        dump = os.path.join(self.dir, "faults.bin")
        path = write_manifest(self.dir, sync_job("faults"), "faults.yaml")
        job = RunningJob(path, env=job_env(KUBEPS_DUMP_PARAMS=dump, KUBEPS_FAULTS=FAULTS))
        scrapes = scrape_while_running(job, REPLICAS)
        self.assertEqual(job.wait(timeout=240), 0, job.output())
        self.assertEqual(set(scrapes), set(REPLICAS), "replicas never scraped:\n" + job.output())

        injected = {kind: total(scrapes, "kubeps_faults_injected_total", fault=kind) for kind in FAULT_KINDS}
        resends = sum(metric(scrapes[w], "kubeps_rpc_resends_total") or 0 for w in ("worker-0", "worker-1"))
        suppressed = sum(metric(scrapes[s], "kubeps_server_duplicates_suppressed_total") or 0
                         for s in ("server-0", "server-1"))
        print("\nfaults injected %s; worker resends %d; duplicate pushes suppressed by the servers %d"
              % (", ".join("%s %d" % item for item in injected.items()), resends, suppressed))
        for kind, count in injected.items():
            self.assertGreater(count, 0, "no %s fault injected" % kind)
        self.assertGreater(resends, 0)
        self.assertGreater(suppressed, 0)
        # The tensors went through shared memory (kubeps run's default on one
        # host): a late duplicate must neither read a staging region that
        # holds the next push nor land over a newer pull's answer.
        for worker in ("worker-0", "worker-1"):
            moved, shared = tensor_bytes(scrapes[worker])
            self.assertGreater(shared, 0.9 * moved, worker)
        self.assertEqual(job.progress(rank=0)[-1]["total_steps"], STEPS, job.output())
        self.assert_same_parameters(dump)

    def test_without_resend_faults_fail_clearly(self):
        path = write_manifest(self.dir, sync_job("noresend", max_resends=0), "noresend.yaml")
        started = time.time()
        code, job = run_job(path, env=job_env(KUBEPS_FAULTS=FAULTS), timeout=120)
        elapsed = time.time() - started
        print("\nwithout resends the job failed after %.1f s" % elapsed)
        self.assertEqual(code, 1, job.output())
        # The failed call, named with its peer and its single try.
        self.assertRegex(job.output(),
                         r"rpc \w+ to (server \d+ |scheduler )\(?127\.0\.0\.1:\d+\)? failed after 1 try "
                         r"\(resend timeout 150 ms, max resends 0\): \d+ ")
        self.assertRegex(job.output(), r"\[kubeps\] job noresend failed after [\d.]+ s \(RestartPolicyNever\): "
                                       r"(worker|server|scheduler)-\d exited with code \d+")
        self.assertLess(elapsed, 60)

    def test_through_connection_cutting_proxy(self):
        proxy = subprocess.Popen([sys.executable, PROXY, "--port", "0", "--seed", "3",
                                  "--reset-probability", "0.01",
                                  "--blackhole-every-ms", "400", "--blackhole-ms", "150"],
                                 stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proxy.poll() is None and (proxy.kill(), proxy.wait()))
        first = proxy.stdout.readline()
        port = int(re.match(r"listening on 127\.0\.0\.1:(\d+)$", first.strip()).group(1))

        dump = os.path.join(self.dir, "proxied.bin")
        path = write_manifest(self.dir, sync_job("proxied"), "proxied.yaml")
        # gRPC opens every channel through the proxy: grpc_proxy wins over
        # http(s)_proxy, and no target may be exempted by a no_proxy list.
        # The tensors too: not through shared memory, which no proxy cuts.
        with mock.patch.dict(os.environ):
            for name in ("no_grpc_proxy", "no_proxy", "NO_PROXY"):
                os.environ.pop(name, None)
            job = RunningJob(path, env=job_env(KUBEPS_DUMP_PARAMS=dump, KUBEPS_SHARED_MEMORY="0",
                                               grpc_proxy="http://127.0.0.1:%d" % port))
        shards = {job.ports("server-0")[0], job.ports("server-1")[0]}
        self.assertEqual(job.wait(timeout=240), 0, job.output())

        proxy.send_signal(signal.SIGTERM)
        out, _ = proxy.communicate(timeout=10)
        stats = dict(re.findall(r"^(\w+) (\d+)$", out, re.M))
        targets = {int(m[0]): (int(m[1]), int(m[2]), int(m[3]))
                   for m in re.findall(r"^target 127\.0\.0\.1:(\d+) connections (\d+) resets (\d+) "
                                       r"blackholes \d+ bytes (\d+)$", out, re.M)}
        to_shards = [targets.get(p, (0, 0, 0)) for p in shards]
        print("\nproxy: %s connections, %s resets, %s blackholes; to the shards: %d connections, %d resets"
              % (stats.get("connections"), stats.get("resets"), stats.get("blackholes"),
                 sum(t[0] for t in to_shards), sum(t[1] for t in to_shards)))
        # Every step's gradients and parameters went through the proxy ...
        self.assertGreater(sum(t[2] for t in to_shards), STEPS * MLP_PARAMS * 4)
        # ... which cut worker-shard connections, and the workers reconnected
        # (2 workers x 2 shards need 4 tunnels without resets).
        self.assertGreater(sum(t[1] for t in to_shards), 0, out)
        self.assertGreater(sum(t[0] for t in to_shards), 4, out)
        self.assertGreater(int(stats["resets"]), 0, out)
        self.assertEqual(job.progress(rank=0)[-1]["total_steps"], STEPS, job.output())
        self.assert_same_parameters(dump)

    def test_a_frozen_server_is_waited_for_and_costs_neither_a_restart_nor_a_bit(self):
        # Frozen (SIGSTOP: a node's hiccup, a partition, a pod being
        # replaced) for longer than the workers' resends last. Before, each
        # worker gave up on it and exited: a restart of the backoffLimit per
        # worker, and a job of more workers than its limit failed.
        spec = {"resendTimeoutMs": 150, "maxResends": 3,
                "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 1}}
        steps = 400  # some 2 s: the freeze lands before the end
        env = dict(PACED_FOR_KILLS, KUBEPS_MAX_STEPS=str(steps))
        dumps = [os.path.join(self.dir, "frozen-%s.bin" % run) for run in ("clean", "frozen")]
        path = write_manifest(self.dir, manifest_with("frozen", spec), "frozen.yaml")
        code, clean = run_job(path, env=dict(env, KUBEPS_DUMP_PARAMS=dumps[0]))
        self.assertEqual(code, 0, clean.output())
        job = RunningJob(path, env=dict(env, KUBEPS_DUMP_PARAMS=dumps[1]))
        try:
            wait_for_steps(job, 0, 50)
            server = wait_for_replica_pid(job, "server-1")
            os.kill(server, signal.SIGSTOP)
            time.sleep(3)  # the resends give up after about 1 s
            resume(server)
            self.assertEqual(job.wait(timeout=240), 0, job.output())
        finally:
            job.close()
        self.assertRegex(job.output(), r"server 1 \(127\.0\.0\.1:\d+\) answers no request; "
                                       r"waiting for it to come back")
        self.assertNotIn("Restarting", job.output())
        with open(dumps[0], "rb") as a, open(dumps[1], "rb") as b:
            self.assertTrue(a.read() == b.read(), "parameters differ from the clean run's")


if __name__ == "__main__":
    unittest.main()
