"""Tensors through shared memory (common/shared_memory.h): `kubeps run` puts
every replica on this host, so each worker hands its gradients and takes its
parameters through a file of /dev/shm instead of the loopback TCP
connection. The transport must change nothing: the same sync job ends with
the same bytes over TCP (KUBEPS_SHARED_MEMORY=0) and through shared memory,
whether the workers read the big tensors where the servers keep them (mapped,
the default of a sync job) or copied (KUBEPS_MAP_VALUES=0); test_faults.py
shows the shared memory run under dropped, duplicated and delayed requests
ends as the clean one. The workers' and servers' files are gone when the job
ends."""
import os
import tempfile
import threading
import time
import unittest

from jobtools import (SLIGHTLY_SLOW_NETWORK, RunningJob, metric, processes_with_env,
                      scrape_while_running, tensor_bytes, write_manifest)
from test_faults import MLP_PARAMS, sync_job

WORKERS = ("worker-0", "worker-1")
# Within the first epoch; long enough for many scrapes of the workers'
# metrics while they train, at a slightly slow network's pace (some 4 s; 0.7
# without its delay, which a test process slow to run could miss).
STEPS = 400


def segments(pids):
    """The shared memory files the kubeps processes `pids` made that are
    there now. Their names carry the pid that made them:
    kubeps-<replica>[-values]-<pid>-<random>. Those of other tests' jobs,
    running beside this one, are not this test's to look at."""
    return {name for name in os.listdir("/dev/shm")
            if name.startswith("kubeps-") and int(name.rsplit("-", 2)[1]) in pids}


def pids_while_running(job):
    """Collects the pids of `job`'s processes until it ends, on a thread of
    its own: the set it returns fills meanwhile."""
    pids = set()

    def collect():
        while job.process.poll() is None:
            pids.update(processes_with_env("KUBEPS_RUN_DIR", job.run_dir))
            time.sleep(0.1)  # each replica runs the whole job, seconds
    threading.Thread(target=collect, daemon=True).start()
    return pids


class SharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kubeps-shared-memory-")

    def run_job(self, name, env):
        """(parameters, {worker: (tensor bytes pushed and pulled, of them through shared
        memory, of them mapped)})."""
        dump = os.path.join(self.dir, name + ".bin")
        path = write_manifest(self.dir, sync_job(name), name + ".yaml")
        job = RunningJob(path, env=dict(SLIGHTLY_SLOW_NETWORK, **env, KUBEPS_MAX_STEPS=str(STEPS),
                                        KUBEPS_DUMP_PARAMS=dump))
        pids = pids_while_running(job)
        scrapes = scrape_while_running(job, WORKERS, interval=0.1)
        self.assertEqual(job.wait(timeout=240), 0, job.output())
        self.assertTrue(pids, job.output())
        self.assertEqual(segments(pids), set(),
                         "a worker or server of job %s left its shared memory behind" % name)
        for worker in WORKERS:
            self.assertIn(worker, scrapes, job.output())
        bytes_by_worker = {
            worker: tensor_bytes(scrapes[worker])
            + (metric(scrapes[worker], "kubeps_worker_mapped_bytes_total") or 0,)
            for worker in WORKERS}
        with open(dump, "rb") as f:
            parameters = f.read()
        self.assertEqual(len(parameters), MLP_PARAMS * 4)
        return parameters, bytes_by_worker, job.output()

    def test_the_transport_changes_no_byte(self):
        over_tcp, tcp_bytes, _ = self.run_job("tcp", {"KUBEPS_SHARED_MEMORY": "0"})
        shared, shared_bytes, out = self.run_job("shared", {})
        copied, copied_bytes, copied_out = self.run_job("copied", {"KUBEPS_MAP_VALUES": "0"})
        # The last scrape may come before a short job's last steps: what it
        # shows is compared as a share.
        for worker in WORKERS:
            moved, through_shared, mapped = tcp_bytes[worker]
            self.assertGreater(moved, 0, worker)
            self.assertEqual((through_shared, mapped), (0, 0), worker)
            moved, through_shared, mapped = shared_bytes[worker]
            self.assertGreater(moved, 0, worker)
            self.assertGreater(through_shared, 0.9 * moved, "%s:\n%s" % (worker, out))
            # The MLP's weights (784 x 256, and 256 x 10 after) are mapped;
            # its biases and its first version are copied. Pulls are half.
            self.assertGreater(mapped, 0.4 * moved, "%s:\n%s" % (worker, out))
            moved, through_shared, mapped = copied_bytes[worker]
            self.assertGreater(through_shared, 0.9 * moved, "%s:\n%s" % (worker, copied_out))
            self.assertEqual(mapped, 0, worker)
        self.assertTrue(shared == over_tcp, "shared memory changed the parameters:\n" + out)
        self.assertTrue(copied == over_tcp, "copying changed the parameters:\n" + copied_out)


if __name__ == "__main__":
    unittest.main()
