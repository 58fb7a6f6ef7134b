"""The framework-free client (kubeps): framing, replies out of order, errors, shared memory,
the rendezvous with the agent and the messages a user sees when something is off.

Standard library only: runs without torch.
"""

import array
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import unittest.mock

from agent_fixture import (client_environment, make_socket_dir, requires_fake, reset_kubeps,
                           start_agent)

import kubeps
from kubeps import client
from kubeps.errors import error_from_reply


class Framing(unittest.TestCase):
    def test_a_frame_is_a_little_endian_length_and_json(self):
        frame = client.encode_message({"op": "hello", "id": 1})
        (length,) = struct.unpack("<I", frame[:4])
        self.assertEqual(length, len(frame) - 4)
        self.assertEqual(json.loads(frame[4:].decode("utf-8")), {"op": "hello", "id": 1})

    def test_a_message_read_in_one_byte_pieces_is_whole(self):
        left, right = socket.socketpair()
        self.addCleanup(left.close)
        self.addCleanup(right.close)
        frame = client.encode_message({"id": 3, "ok": True, "text": "é" * 1000})

        def trickle():
            for i in range(len(frame)):
                right.sendall(frame[i:i + 1])
            right.shutdown(socket.SHUT_WR)
        threading.Thread(target=trickle).start()
        self.assertEqual(client.read_message(left), {"id": 3, "ok": True, "text": "é" * 1000})
        self.assertIsNone(client.read_message(left), "a clean end of stream is None")

    def test_a_request_over_64_mebibytes_is_refused_before_sending(self):
        with self.assertRaises(kubeps.InvalidArgument) as caught:
            client.encode_message({"op": "declare", "id": 1, "blob": "x" * (64 << 20)})
        self.assertIn("declare: the request is", str(caught.exception))
        self.assertIn("over the sidecar protocol's limit of 67108864 bytes (64 MiB)",
                      str(caught.exception))

    def test_an_incoming_message_over_64_mebibytes_is_an_error(self):
        left, right = socket.socketpair()
        self.addCleanup(left.close)
        self.addCleanup(right.close)
        right.sendall(struct.pack("<I", (64 << 20) + 1))
        with self.assertRaisesRegex(kubeps.Internal, "message of 67108865 bytes, over"):
            client.read_message(left)


class ErrorMapping(unittest.TestCase):
    def test_every_code_has_its_class_and_keeps_the_message(self):
        for code, cls in [("InvalidArgument", kubeps.InvalidArgument),
                          ("FailedPrecondition", kubeps.FailedPrecondition),
                          ("NotFound", kubeps.NotFound), ("AlreadyExists", kubeps.AlreadyExists),
                          ("Aborted", kubeps.Aborted), ("Unavailable", kubeps.Unavailable),
                          ("Internal", kubeps.Internal)]:
            error = error_from_reply({"id": 1, "ok": False, "code": code, "error": "why"}, "push")
            self.assertIs(type(error), cls, code)
            self.assertIsInstance(error, kubeps.KubepsError)
            self.assertEqual(error.code, code)
            self.assertEqual(str(error), "%s: push: why" % code)

    def test_aborted_with_a_resume_step_is_rolled_back(self):
        error = error_from_reply({"id": 1, "ok": False, "code": "Aborted", "error": "rolled back",
                                  "resume_step": 40}, "wait")
        self.assertIsInstance(error, kubeps.RolledBack)
        self.assertIsInstance(error, kubeps.Aborted)
        self.assertEqual(error.resume_step, 40)

    def test_an_unknown_code_is_still_an_error_with_that_code(self):
        error = error_from_reply({"id": 1, "ok": False, "code": "DataLoss", "error": "x"}, "pull")
        self.assertIs(type(error), kubeps.KubepsError)
        self.assertEqual(error.code, "DataLoss")


class Rendezvous(unittest.TestCase):
    def tearDown(self):
        reset_kubeps()

    def test_without_kubeps_socket_dir_the_message_says_what_to_set(self):
        env = dict(os.environ)
        env.pop("KUBEPS_SOCKET_DIR", None)
        with unittest.mock.patch.dict(os.environ, env, clear=True):
            with self.assertRaises(kubeps.FailedPrecondition) as caught:
                kubeps.init()
        message = str(caught.exception)
        self.assertIn("KUBEPS_SOCKET_DIR is not set", message)
        self.assertIn("kubeps-agent sidecar", message)

    def test_a_directory_without_agent_json_times_out_naming_it(self):
        socket_dir = make_socket_dir(self)
        with unittest.mock.patch.dict(os.environ, {"KUBEPS_SOCKET_DIR": socket_dir}):
            started = time.monotonic()
            with self.assertRaises(kubeps.Unavailable) as caught:
                kubeps.init(timeout=0.3)
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        message = str(caught.exception)
        self.assertIn("KUBEPS_SOCKET_DIR=%s after 0.3 s" % socket_dir, message)
        self.assertIn("expected agent.json there", message)
        self.assertIn("the directory holds nothing", message)

    def test_a_missing_directory_is_named_as_missing(self):
        with self.assertRaisesRegex(kubeps.Unavailable, "/tmp/kubeps-no-such-dir after 0.1 s"
                                    ".*the directory does not exist"):
            kubeps.init(socket_dir="/tmp/kubeps-no-such-dir", timeout=0.1)

    def test_a_bad_wait_variable_is_named(self):
        with unittest.mock.patch.dict(os.environ, {"KUBEPS_SOCKET_DIR": "/tmp",
                                                   "KUBEPS_AGENT_WAIT_S": "soon"}):
            with self.assertRaisesRegex(kubeps.InvalidArgument,
                                        "KUBEPS_AGENT_WAIT_S='soon': expected a number"):
                kubeps.init()

    def test_an_agent_of_another_protocol_is_refused(self):
        socket_dir = make_socket_dir(self)
        with open(os.path.join(socket_dir, "agent.json"), "w") as f:
            json.dump({"protocol": 2, "nonce": "0" * 32}, f)
        with self.assertRaisesRegex(kubeps.InvalidArgument,
                                    "in %s speaks sidecar protocol 2; this client speaks 1"
                                    % socket_dir):
            kubeps.init(socket_dir=socket_dir, timeout=1)

    @requires_fake
    def test_the_client_waits_for_an_agent_still_registering(self):
        agent = start_agent(self, json_delay_s=0.5)
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        self.assertEqual((kubeps.rank(), kubeps.size()), (0, 1))

    @requires_fake
    def test_the_nonce_of_another_agent_is_refused(self):
        agent = start_agent(self, write_json=False)
        with open(os.path.join(agent.socket_dir, "agent.json"), "w") as f:
            json.dump({"protocol": 1, "nonce": "f" * 32}, f)
        with self.assertRaisesRegex(kubeps.InvalidArgument, "hello: nonce 'f+' is not this "
                                                             "agent's"):
            kubeps.init(socket_dir=agent.socket_dir, timeout=2)

    def test_hello_reports_the_worker(self):
        agent = start_agent(self)
        session = kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        self.assertEqual(kubeps.rank(), 0)
        self.assertEqual(kubeps.size(), 1)
        self.assertEqual(kubeps.mode(), "sync")
        self.assertEqual(kubeps.server_optimizer(), "sgd")
        self.assertEqual(session.agent_info["protocol"], 1)

    def test_a_second_init_names_the_session_it_has(self):
        agent = start_agent(self)
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        with self.assertRaises(kubeps.FailedPrecondition) as caught:
            kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        self.assertIn("kubeps.init() was called twice", str(caught.exception))
        self.assertIn("session with the kubeps agent in %s (rank 0 of 1)" % agent.socket_dir,
                      str(caught.exception))

    def test_calls_before_init_name_the_call(self):
        for call, name in [(kubeps.rank, "kubeps.rank()"), (kubeps.size, "kubeps.size()"),
                           (lambda: kubeps.push(["w"], 0), "kubeps.push()"),
                           (lambda: kubeps.declare([("w", (2,))]), "kubeps.declare()"),
                           (lambda: kubeps.barrier("b"), "kubeps.barrier()"),
                           (kubeps.finish, "kubeps.finish()")]:
            with self.assertRaises(kubeps.FailedPrecondition) as caught:
                call()
            self.assertEqual(str(caught.exception), "FailedPrecondition: %s was called before "
                             "kubeps.init(): call kubeps.init() first to connect to the pod's "
                             "kubeps agent" % name)

    def test_a_second_process_is_refused_naming_the_first(self):
        agent = start_agent(self)
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        result = subprocess.run(
            [sys.executable, "-c", "import kubeps; kubeps.init(timeout=10)"],
            env=client_environment(KUBEPS_SOCKET_DIR=agent.socket_dir),
            capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("kubeps.errors.FailedPrecondition", result.stderr)
        self.assertIn("pid %d" % os.getpid(), result.stderr)


class Requests(unittest.TestCase):
    def setUp(self):
        self.agent = start_agent(self)
        kubeps.init(socket_dir=self.agent.socket_dir, timeout=10)

    def tearDown(self):
        reset_kubeps()

    def test_views_share_memory_with_the_agent_and_a_step_moves_the_values(self):
        tensors = kubeps.declare([("w", (2, 3)), ("b", (3,))])
        w, b = tensors.values("w"), tensors.values("b")
        self.assertEqual((w.format, w.itemsize, len(w)), ("f", 4, 6))
        w[:] = array.array("f", [1, 2, 3, 4, 5, 6])
        b[:] = array.array("f", [0.5, 0.25, 0.125])
        # The view is the file: the agent reads the same bytes.
        with open(tensors.path, "rb") as f:
            f.seek(tensors.slot("w").values_offset)
            self.assertEqual(struct.unpack("<6f", f.read(24)), (1, 2, 3, 4, 5, 6))
        self.assertEqual(kubeps.init_tensors(), 0)
        tensors.grads("w")[:] = array.array("f", [2] * 6)
        tensors.grads("b")[:] = array.array("f", [1, 1, 1])
        kubeps.wait(kubeps.push_pull(["w", "b"], 0))
        # sgd with learning rate 0.5, one worker: value - 0.5 * gradient
        self.assertEqual(list(w), [0, 1, 2, 3, 4, 5])
        self.assertEqual(list(b), [0, -0.25, -0.375])
        kubeps.wait(kubeps.push(["w", "b"], 1))
        kubeps.wait(kubeps.pull(None, 2))
        self.assertEqual(list(w), [-1, 0, 1, 2, 3, 4])

    def test_views_outlive_the_session_and_no_new_ones_are_made(self):
        tensors = kubeps.declare([("w", (3,))])
        w = tensors.values("w")
        w[:] = array.array("f", [1, 2, 3])
        kubeps.shutdown()
        self.assertEqual(list(w), [1, 2, 3], "a view keeps its memory mapped")
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "no longer mapped: their session "
                                                                "with the kubeps agent ended"):
            tensors.values("w")

    def test_a_model_of_many_tensors_is_declared_and_trained(self):
        # A mixture of experts has tens of thousands of tensors: the declaration and its reply
        # are several MiB of JSON.
        names = ["model.layers.%d.mlp.experts.%d.down_proj.weight" % (i // 64, i % 64)
                 for i in range(20000)]
        tensors = kubeps.declare([(name, (2,)) for name in names])
        last = tensors.values(names[-1])
        last[:] = array.array("f", [1, 2])
        self.assertEqual(kubeps.init_tensors(), 0)
        for name in names:
            tensors.grads(name)[:] = array.array("f", [2, 2])
        kubeps.wait(kubeps.push_pull(names, 0))
        self.assertEqual(list(last), [0, 1], "sgd with learning rate 0.5: value - 0.5 * 2")

    def test_a_scalar_is_a_tensor_of_one_element(self):
        tensors = kubeps.declare([("scale", ())])
        self.assertEqual(len(tensors.values("scale")), 1)

    def test_an_undeclared_tensor_is_named(self):
        kubeps.declare([("w", (2,)), ("b", (1,))])
        kubeps.init_tensors()
        with self.assertRaises(kubeps.NotFound) as caught:
            kubeps.push(["w", "bias"], 0)
        self.assertEqual(str(caught.exception), "NotFound: push: no tensor named 'bias' was "
                                                "declared (declared: w, b)")

    def test_the_agent_checks_numel_and_names_the_tensor(self):
        kubeps.declare([("w", (2, 3))])
        kubeps.init_tensors()
        connection = kubeps.session()._connection
        with self.assertRaises(kubeps.InvalidArgument) as caught:
            connection.call("push", keys=[0], step=0, numel=[5])
        self.assertRegex(str(caught.exception), r"^InvalidArgument: push: .*[\"']w[\"']")
        self.assertRegex(str(caught.exception), r"\b5\b")
        self.assertRegex(str(caught.exception), r"\b6\b")

    def test_the_agent_refuses_an_unknown_key(self):
        kubeps.declare([("w", (2,))])
        kubeps.init_tensors()
        with self.assertRaises(kubeps.NotFound):
            kubeps.session()._connection.call("pull", keys=[7], min_version=0)

    def test_requests_out_of_order_are_refused_by_the_agent(self):
        connection = kubeps.session()._connection
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "init"):
            connection.call("init")
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "hello"):
            connection.call("hello", protocol=1, nonce=kubeps.session().agent_info["nonce"],
                            pid=os.getpid())

    def test_bad_declarations_are_named(self):
        for tensors, message in [
                ([], "declare: the list of tensors is empty"),
                ([("w", (3, 0))], "declare: tensor 'w' has shape [3, 0]; every dimension "
                                  "must be >= 1"),
                ([("w", (2,)), ("w", (3,))], "declare: tensor name 'w' appears twice"),
                ([{"name": "w", "shape": [2], "dtype": "float16"}],
                 "declare: tensor 'w' has dtype 'float16'; kubeps carries float32 only")]:
            with self.assertRaises(kubeps.InvalidArgument) as caught:
                kubeps.declare(tensors)
            self.assertEqual(str(caught.exception), "InvalidArgument: " + message)

    def test_the_agent_refuses_bad_declarations_too(self):
        connection = kubeps.session()._connection
        for tensors in ([], [{"name": "w", "shape": [2], "dtype": "float64"}],
                        [{"name": "w", "shape": [0], "dtype": "float32"}],
                        [{"name": "w", "shape": [1], "dtype": "float32"},
                         {"name": "w", "shape": [1], "dtype": "float32"}]):
            with self.assertRaises(kubeps.InvalidArgument, msg=str(tensors)):
                connection.call("declare", tensors=tensors)

    def test_a_second_declare_is_refused(self):
        kubeps.declare([("w", (2,))])
        with self.assertRaisesRegex(kubeps.FailedPrecondition,
                                    "declared once per session, and this session declared w"):
            kubeps.declare([("v", (2,))])

    def test_a_handle_is_waited_for_once(self):
        kubeps.declare([("w", (2,))])
        kubeps.init_tensors()
        handle = kubeps.pull(["w"], 0)
        kubeps.wait(handle)
        with self.assertRaisesRegex(kubeps.FailedPrecondition, r"wait: Handle\(pull w, step 0\) "
                                                               "was already waited for"):
            kubeps.wait(handle)

    def test_checkpoints_says_none_before_the_servers_wrote_one(self):
        kubeps.declare([("w", (2,))])
        kubeps.init_tensors()
        session = kubeps.session("test")
        self.assertIsNone(session.newest_common_checkpoint())
        self.assertTrue(session._answers_checkpoints, "the agent knows the request")

    def test_finish_ends_the_session(self):
        kubeps.declare([("w", (2,))])
        kubeps.init_tensors()
        kubeps.finish()
        self.assertFalse(kubeps.is_initialized())
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "after kubeps.finish()"):
            kubeps.rank()
        if self.agent.fake is not None:
            self.agent.fake.stopped.wait(5)
            self.assertEqual(self.agent.fake.exit_code, 0)
            self.assertEqual(self.agent.fake.ops()[-2:], ["finish", "bye"])


@requires_fake
class WithTheFakesControls(unittest.TestCase):
    def tearDown(self):
        reset_kubeps()

    def test_replies_come_out_of_order(self):
        agent = start_agent(self)
        agent.fake.holding_barriers.add("held")
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        reached = threading.Event()

        def hold():
            kubeps.barrier("held")
            reached.set()
        holder = threading.Thread(target=hold)
        holder.start()
        time.sleep(0.1)

        def step():  # on a thread, so a client that serialises requests fails, not hangs
            tensors = kubeps.declare([("w", (4,))])
            kubeps.init_tensors()
            tensors.grads("w")[:] = array.array("f", [1, 1, 1, 1])
            kubeps.wait(kubeps.push_pull(["w"], 0))
        worker = threading.Thread(target=step)
        worker.start()
        worker.join(10)
        stuck = worker.is_alive()
        if stuck:
            agent.fake.release_barrier("held")  # lets the test end
        self.assertFalse(stuck, "later requests were not answered while a barrier was held")
        self.assertFalse(reached.is_set(), "the barrier's reply came before it was released")
        barrier_id = next(r["id"] for _, op, r in agent.fake.events if op == "barrier")
        later_ids = [r["id"] for _, op, r in agent.fake.events if op == "wait"]
        self.assertTrue(all(i > barrier_id for i in later_ids))
        agent.fake.release_barrier("held")
        holder.join(10)
        self.assertTrue(reached.is_set())

    def test_a_rollback_reaches_wait_with_the_resume_step_and_its_values(self):
        agent = start_agent(self)
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        tensors = kubeps.declare([("w", (2,))])
        tensors.values("w")[:] = array.array("f", [10, 20])
        kubeps.init_tensors()
        tensors.grads("w")[:] = array.array("f", [2, 2])
        for step in range(3):
            kubeps.wait(kubeps.push_pull(["w"], step))
        self.assertEqual(list(tensors.values("w")), [7, 17])
        agent.fake.arm_rollback(at_step=3, resume_step=1)
        with self.assertRaises(kubeps.RolledBack) as caught:
            kubeps.wait(kubeps.push_pull(["w"], 3))
        self.assertEqual(caught.exception.resume_step, 1)
        self.assertEqual(list(tensors.values("w")), [9, 19], "the values of step 1")
        kubeps.wait(kubeps.push_pull(["w"], 1))
        self.assertEqual(list(tensors.values("w")), [8, 18])
        self.assertEqual(agent.fake.violations, [])

    def test_a_lost_agent_fails_the_waiting_request_naming_the_socket(self):
        agent = start_agent(self)
        agent.fake.holding_barriers.add("never")
        kubeps.init(socket_dir=agent.socket_dir, timeout=10)
        errors = []

        def hold():
            try:
                kubeps.barrier("never")
            except kubeps.KubepsError as error:
                errors.append(error)
        holder = threading.Thread(target=hold)
        holder.start()
        time.sleep(0.2)
        agent.fake._session.close()  # the agent goes away mid-request
        holder.join(10)
        self.assertEqual(len(errors), 1)
        self.assertIsInstance(errors[0], kubeps.Unavailable)
        self.assertIn("the kubeps agent at %s closed the connection"
                      % os.path.join(agent.socket_dir, "agent.sock"), str(errors[0]))
        with self.assertRaises(kubeps.Unavailable):
            kubeps.barrier("again")


if __name__ == "__main__":
    unittest.main()
