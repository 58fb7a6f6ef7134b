"""Mutual TLS in `kubeps run` (spec.security.tls: Enabled, issue 16), with
real binaries and Python's own TLS client: the run folder holds a CA and a
certificate per replica (keys 0600); a server of a running job answers
HTTP/2 over TLS only to a client that shows a certificate of the job's CA,
and speaks no plain TCP; and the job trains to exactly the same parameters
as without TLS (sync mode is deterministic: the transport changes nothing)."""
import os
import shutil
import socket
import ssl
import stat
import tempfile
import unittest

from jobtools import RunningJob, manifest_with, write_manifest

STEPS = "300"
REPLICAS = ("scheduler-0", "server-0", "server-1", "worker-0", "worker-1")
# The client preface of HTTP/2 and an empty SETTINGS frame: a gRPC server
# answers with a SETTINGS frame of its own.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def answers_http2(port, ca_file=None, cert_dir=None):
    """Whether the server on `port` answers HTTP/2, over TLS when `ca_file`
    (trusted) is given, with the client certificate in `cert_dir` if given.
    (answered, what came back or the error)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            if ca_file is None:
                s = raw
            else:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                context.check_hostname = False   # replicas are reached by IP
                context.load_verify_locations(ca_file)
                if cert_dir:
                    context.load_cert_chain(os.path.join(cert_dir, "tls.crt"),
                                            os.path.join(cert_dir, "tls.key"))
                context.set_alpn_protocols(["h2"])
                # The TLS socket takes the descriptor over from `raw`: closing
                # `raw` would leave it open.
                s = context.wrap_socket(raw, server_hostname="replica.kubeps.invalid")
            with s:
                s.sendall(PREFACE)
                data = s.recv(64)
            return len(data) >= 9 and data[3] == 4, repr(data[:16])
    except (ssl.SSLError, OSError) as e:
        return False, "%s: %s" % (type(e).__name__, e)


class MutualTlsRunTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kubeps-test-tls-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, name, tls, env=None):
        spec = {"security": {"tls": tls}, "epochs": 3}
        path = write_manifest(self.dir, manifest_with(name, spec=spec), filename=name + ".yaml")
        run_dir = os.path.join(self.dir, name)
        return RunningJob(path, run_dir=run_dir, args=["--keep-run-dir"], env=env), run_dir

    def run_to_end(self, name, tls):
        """The job run to STEPS; (job, run folder, worker 0's final parameters)."""
        dump = os.path.join(self.dir, name + ".params")
        job, run_dir = self.start(name, tls,
                                  env={"KUBEPS_MAX_STEPS": STEPS, "KUBEPS_DUMP_PARAMS": dump})
        try:
            self.assertEqual(job.wait(timeout=300), 0, job.output())
        finally:
            job.close()
        with open(dump, "rb") as f:
            return job, run_dir, f.read()

    def test_tls_trains_the_same_parameters_and_refuses_strangers(self):
        tls_job, tls_run, tls_params = self.run_to_end("with-tls", "Enabled")
        plain_job, plain_run, plain_params = self.run_to_end("without-tls", "Disabled")
        self.assertEqual(tls_job.accuracy(), plain_job.accuracy())
        self.assertGreater(len(tls_params), 100000)
        self.assertTrue(tls_params == plain_params, "the parameters differ with TLS")
        for replica in REPLICAS:
            key = os.path.join(tls_run, "tls", replica, "tls.key")
            self.assertEqual(stat.S_IMODE(os.stat(key).st_mode), 0o600, key)
        self.assertFalse(os.path.exists(os.path.join(plain_run, "tls")))

        # A job running with TLS, probed from outside: the first run's
        # worker certificate is another job's (another CA).
        job, run_dir = self.start("probed", "Enabled")
        try:
            grpc_port, _ = job.ports("server-0")
            own = os.path.join(run_dir, "tls", "worker-0")
            ca_file = os.path.join(own, "ca.crt")
            answered, what = answers_http2(grpc_port, ca_file, own)
            self.assertTrue(answered, "with the job's certificate: " + what)
            for refused, args in (
                    ("TLS without a certificate", (ca_file,)),
                    ("another job's certificate", (ca_file, os.path.join(tls_run, "tls", "worker-0"))),
                    ("plain TCP", ())):
                answered, what = answers_http2(grpc_port, *args)
                self.assertFalse(answered, "%s got an answer: %s" % (refused, what))
        finally:
            job.interrupt()
            job.wait(timeout=60)
            job.close()


if __name__ == "__main__":
    unittest.main()
