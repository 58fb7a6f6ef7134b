"""A whole job over IPv6: `kubeps run --host=::1` puts every replica on IPv6
loopback, as pods of a single-stack IPv6 cluster have only IPv6 addresses.
The scheduler, the shards and the workers listen there, the servers register
"[::1]:port" and the workers dial it, and the metrics are served there."""
import shutil
import socket
import tempfile
import unittest

from jobtools import manifest, run_job, write_manifest


def ipv6_loopback_works():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@unittest.skipUnless(ipv6_loopback_works(), "this machine cannot bind ::1")
class Ipv6RunTest(unittest.TestCase):
    def test_a_job_on_ipv6_loopback_succeeds(self):
        directory = tempfile.mkdtemp(prefix="kubeps-test-ipv6-")
        self.addCleanup(shutil.rmtree, directory, True)
        path = write_manifest(directory, manifest("ipv6", ps=2, workers=2, batch=32))
        code, job = run_job(path, env={"KUBEPS_MAX_STEPS": "30"}, args=["--host=::1"], timeout=120)
        self.addCleanup(shutil.rmtree, job.run_dir, True)
        self.assertEqual(code, 0, job.output())
        self.assertIn("job ipv6 succeeded", job.output())
        # What the replicas say about their own addresses (their output is the run's).
        output = job.output()
        self.assertRegex(output, r"scheduler listening on \[::1\]:\d+")
        for rank in (0, 1):
            self.assertRegex(output, r"registered as server %d at \[::1\]:\d+" % rank)
        self.assertTrue(job.progress(rank=0) and job.progress(rank=1), output)
        self.assertNotIn("127.0.0.1", output)


if __name__ == "__main__":
    unittest.main()
