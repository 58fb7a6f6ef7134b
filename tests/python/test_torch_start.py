"""kubeps.torch where a process starts: broadcast, steps() from the servers' step after a
restart, a resume over the program's own state (resume_with), an async worker's own steps, and
rollbacks seen by steps().  Skips, saying why, where torch is not installed.
"""
import unittest
import warnings

from agent_fixture import requires_fake, reset_kubeps
from kubeps.errors import FailedPrecondition, InvalidArgument
from test_torch import TorchTestCase, needs_torch, three_layers, torch, train

if torch is not None:
    import kubeps.torch as kps


@needs_torch
class StartAndRecovery(TorchTestCase):
    @requires_fake
    def test_broadcast_gives_rank_0s_values_and_leaves_other_tensors_alone(self):
        model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
        rank0 = {"0.weight": [1, 2, 3, 4, 5, 6], "0.bias": [7, 8],
                 "1.weight": [9, 10], "1.bias": [11, 12]}
        self.connect(rank=1, size=2, server_values=rank0)
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        model[1].running_mean.fill_(3.0)
        state = model.state_dict()
        kps.broadcast_parameters(state, root_rank=0)
        self.assertEqual(kps.rank(), 1)
        self.assertEqual(model[0].weight.tolist(), [[1, 2, 3], [4, 5, 6]])
        self.assertEqual(model[1].bias.tolist(), [11, 12])
        self.assertEqual(model[1].running_mean.tolist(), [3.0, 3.0], "a buffer stays local")
        self.assertEqual(state["1.num_batches_tracked"].item(), 0)
        self.assertEqual(list(kps.steps(2)), [0, 1])

    @requires_fake
    def test_a_restarted_process_resumes_at_the_servers_step_with_their_values(self):
        model = torch.nn.Linear(2, 1)
        self.connect(server_values={"weight": [0.5, -0.5], "bias": [2.0]}, start_step=5)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        seen = []
        for step in kps.steps(8):  # broadcasts by itself: no broadcast_parameters call
            if not seen:
                self.assertEqual(model.weight.tolist(), [[0.5, -0.5]])
                self.assertEqual(model.bias.tolist(), [2.0])
            seen.append(step)
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
        self.assertEqual(seen, [5, 6, 7])

    @requires_fake
    def test_a_start_past_step_0_with_servers_that_only_average_needs_the_programs_state(self):
        # The servers hold averaged gradients, not parameters: a program resumed at step 3
        # from fresh values would end with a model that never learned.
        model = self.linear_over_none(start_step=3)
        with self.assertRaises(FailedPrecondition) as caught:
            kps.broadcast_parameters(model.state_dict())
        self.assertEqual(caught.exception.reason, "ProgramStateMissing")
        self.assertIn("starts at step 3, but the servers' optimizer is none",
                      str(caught.exception))

    @requires_fake
    def test_resume_with_puts_the_programs_own_state_of_the_start_step_back(self):
        model = self.linear_over_none(start_step=3)
        loaded = []

        def load(step):
            loaded.append(step)
            model.load_state_dict({"weight": torch.tensor([[1.5, -1.5]]),
                                   "bias": torch.tensor([0.25])})

        kps.resume_with(load)
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(loaded, [3])
        self.assertEqual(model.weight.tolist(), [[1.5, -1.5]], "not the servers' gradients")
        self.assertEqual(model.bias.tolist(), [0.25])
        self.assertEqual(list(kps.steps(4)), [3])
        with self.assertRaises(FailedPrecondition):
            kps.resume_with(load)  # the process has started

    @requires_fake
    def test_a_program_that_holds_no_state_of_the_start_step_starts_at_one_it_holds(self):
        # Killed after the servers' checkpoint of step 100, before its own save of it.
        model = self.linear_over_none(start_step=100)
        with self.assertRaises(InvalidArgument):
            kps.resume_with(print, held=[0, 50])
        loaded = []
        kps.resume_with(loaded.append, held=lambda: (step for step in (0, 50)))
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(loaded, [50])
        self.assertEqual(self.agent.fake.held_state_requests, [(100, [0, 50])])
        self.assertEqual(list(kps.steps(52)), [50, 51])

    @requires_fake
    def test_resume_with_runs_before_the_servers_parameters_replace_the_loaded_ones(self):
        model = torch.nn.Linear(2, 1)
        self.connect(server_values={"weight": [0.5, -0.5], "bias": [2.0]}, start_step=5)
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        loaded = []
        kps.resume_with(lambda step: (loaded.append(step), model.bias.data.fill_(7.0)))
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(loaded, [5])
        self.assertEqual(model.bias.tolist(), [2.0], "the servers hold the parameters")

    @requires_fake
    def test_an_async_program_starts_at_its_own_step_not_at_the_servers_version(self):
        # The servers' versions count every worker's updates (3: the others pushed already).
        # Before, a program started there, skipping as many of its own steps.
        def program(last):
            model = torch.nn.Linear(2, 1)
            optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                 named_parameters=model.named_parameters())
            done = []
            for step in kps.steps(10):
                model(torch.ones(1, 2)).sum().backward()
                optimizer.step()
                done.append(step)
                if step == last:
                    break
            return done

        agent = self.connect(mode="async", server_values={"weight": [9.0, 9.0], "bias": [9.0]},
                             start_step=3)
        self.assertEqual(program(last=1), [0, 1])
        # Restarted beside the same agent: after the step it pushed last.
        kps.shutdown()
        agent.fake.await_session_end()
        kps.init(socket_dir=agent.socket_dir, timeout=10)
        self.assertEqual(program(last=3), [2, 3])

    @requires_fake
    def test_an_async_start_past_step_0_loads_nothing_and_warns_with_servers_that_average(self):
        # A restarted worker's program, at the step it pushed last: nothing of its own is loaded.
        model = torch.nn.Linear(2, 1)
        self.connect(mode="async", optimizer="none",
                     server_values={"weight": [9.0, 9.0], "bias": [9.0]}, start_step=3,
                     step_said_last=3)
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        kps.resume_with(lambda step: self.fail("loaded step %d" % step))
        before = model.weight.detach().clone()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kps.broadcast_parameters(model.state_dict())
        self.assertTrue(torch.equal(model.weight, before), "averaged gradients are not weights")
        self.assertEqual(len(caught), 1)
        self.assertIn("starts the async job at step 3, but the servers' optimizer is 'none'",
                      str(caught[0].message))

    @requires_fake
    def test_a_new_job_calls_no_resume(self):
        model = torch.nn.Linear(2, 1)
        self.connect(optimizer="none")
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        kps.resume_with(lambda step: self.fail("resumed at step %d" % step))
        self.assertEqual(list(kps.steps(1)), [0])

    @requires_fake
    def test_a_rollback_resumes_the_loop_and_ends_as_a_clean_run(self):
        agent = self.connect()
        model = three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict(), root_rank=0)
        agent.fake.arm_rollback(at_step=4, resume_step=2)
        seen = []
        train(model, optimizer, 6, record=seen)
        self.assertEqual(seen, [0, 1, 2, 3, 4, 2, 3, 4, 5])
        reset_kubeps()
        clean = three_layers()
        self.connect()
        clean_optimizer = kps.DistributedOptimizer(torch.optim.SGD(clean.parameters(), lr=0.1),
                                                   named_parameters=clean.named_parameters())
        train(clean, clean_optimizer, 6)
        self.assertParametersEqual(model, clean)

    @requires_fake
    def test_a_rollback_with_servers_that_only_average_keeps_local_parameters(self):
        agent = self.connect(optimizer="none")
        model = three_layers()
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        agent.fake.arm_rollback(at_step=2, resume_step=1)
        seen = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(model, optimizer, 3, record=seen)
        self.assertEqual(seen, [0, 1, 2, 1, 2])
        self.assertEqual(len(caught), 1)
        self.assertIn("rolled back to step 1", str(caught[0].message))
        self.assertIn("only the step goes back", str(caught[0].message))


if __name__ == "__main__":
    unittest.main()
