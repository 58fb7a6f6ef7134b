"""kubeps.torch in a job whose workers change while it trains (an elasticPolicy), against
the fake agent's schedule: steps() yields only the steps this worker computes; a worker
taken in later starts at its first step with the servers' values of that step; one scaled
away ends its loop after its last step; one not yet taken in waits.  examples() is the
worker's run of each step's global batch, in a fixed job too.  Skips, saying why, where
torch is not installed.
"""

import unittest

from agent_fixture import requires_fake
from test_torch import TorchTestCase, needs_torch, torch

if torch is not None:
    import kubeps
    import kubeps.torch as kps
    from kubeps.errors import FailedPrecondition

GLOBAL_BATCH = 128


def run(global_batch, position, count):
    return global_batch * position // count, global_batch * (position + 1) // count


def member(position, count):
    return (True, position, count) + run(GLOBAL_BATCH, position, count) + (GLOBAL_BATCH, None)


def not_member(next_member_step=None):
    return (False, 0, 0, 0, 0, GLOBAL_BATCH, next_member_step)


@needs_torch
class ElasticSteps(TorchTestCase):
    def train(self, total_steps, on_step=None):
        """A Linear(2, 1) through kubeps.torch for steps(total_steps): the steps yielded."""
        model = torch.nn.Linear(2, 1)
        optimizer = kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        kps.broadcast_parameters(model.state_dict())
        yielded = []
        for step in kps.steps(total_steps):
            yielded.append(step)
            if on_step:
                on_step(step, model)
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
        return yielded

    def pushed_steps(self):
        return sorted({request["step"] for _, op, request in self.agent.fake.events
                       if op in ("push", "push_pull")})

    @requires_fake
    def test_a_worker_scaled_away_ends_its_loop_after_its_last_step(self):
        # Worker 0 of two until step 3, then gone: scaled down to none of its rank.
        self.connect(schedule=lambda step: member(0, 2) if step < 3 else not_member())
        self.assertTrue(kubeps.is_elastic())
        self.assertEqual(self.train(10), [0, 1, 2])
        self.assertEqual(self.pushed_steps(), [0, 1, 2])
        self.assertTrue(kps.scaled_away())
        kps.finish()

    @requires_fake
    def test_a_worker_taken_in_later_starts_at_its_first_step_with_its_values(self):
        # Not a member before step 4; the others compute steps 0 to 3 meanwhile (the fake
        # applies a gradient of 1 each step: learning rate 0.5, so the values fall by 2).
        self.connect(schedule=lambda step: member(1, 2) if step >= 4 else not_member(4),
                     server_values={"weight": [1.0, 3.0], "bias": [5.0]})
        seen = {}

        def on_step(step, model):
            seen[step] = (model.weight.tolist(), model.bias.tolist(), kps.examples(),
                          kps.global_batch())
        self.assertEqual(self.train(7, on_step), [4, 5, 6])
        self.assertEqual(seen[4], ([[-1.0, 1.0]], [3.0], (64, 128), GLOBAL_BATCH))
        self.assertEqual(self.pushed_steps(), [4, 5, 6])
        self.assertFalse(kps.scaled_away())

    @requires_fake
    def test_the_global_batch_is_the_schedulers_once_the_parameters_are_broadcast(self):
        self.connect(schedule=lambda step: member(0, 2))
        model = torch.nn.Linear(2, 1)
        kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=model.named_parameters())
        with self.assertRaisesRegex(kubeps.FailedPrecondition, "broadcast_parameters"):
            kps.global_batch()
        kps.broadcast_parameters(model.state_dict())
        self.assertEqual(kps.global_batch(), GLOBAL_BATCH)

    @requires_fake
    def test_a_worker_taken_in_at_the_last_step_computes_nothing(self):
        self.connect(schedule=lambda step: member(0, 1) if step >= 5 else not_member(5))
        self.assertEqual(self.train(5), [])
        self.assertEqual(self.pushed_steps(), [])

    @requires_fake
    def test_a_worker_not_yet_in_the_schedule_waits_to_be_taken_in(self):
        asked = []

        def schedule(step):
            asked.append(step)
            # Registered, not yet taken in: the first answers name no step.
            if len(asked) <= 2:
                return not_member()
            return member(0, 1) if step >= 2 else not_member(2)
        self.connect(schedule=schedule)
        self.assertEqual(self.train(4), [2, 3])
        self.assertGreaterEqual(len(asked), 3)

    def test_examples_in_a_fixed_job_are_the_run_of_spec_batch_size(self):
        self.connect()  # one worker; spec.batchSize 64, its default
        seen = []
        self.train(2, lambda step, model: seen.append((kps.examples(), kps.global_batch())))
        self.assertEqual(seen, [((0, 64), 64)] * 2)

    @requires_fake
    def test_examples_in_a_fixed_job_are_the_ranks_run_of_the_specs_batch(self):
        self.connect(rank=1, size=2, batch_size=32)
        seen = []
        self.train(2, lambda step, model: seen.append((kps.examples(), kps.global_batch())))
        self.assertEqual(seen, [((32, 64), 64)] * 2)

    @requires_fake
    def test_examples_from_an_agent_that_does_not_say_the_batch_is_a_clear_error(self):
        self.connect(batch_size=None)
        for call in (kps.examples, kps.global_batch):
            with self.assertRaisesRegex(FailedPrecondition, r"the agent did not say "
                                                            r"spec.batchSize"):
                call()


if __name__ == "__main__":
    unittest.main()
