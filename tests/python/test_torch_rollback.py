"""kubeps.torch's rollback of the program's own state (_torch_rollback.py): with the servers'
optimizer `none` the parameters and the optimizer's state go back to the resume step, and in
every mode the model's buffers, torch's generator and the objects registered with
restore_on_rollback, so that a job rolled back ends as a clean run.  Against the fake agent,
which rolls back at a push it is armed for.  Skips, saying why, where torch is not installed.
"""

import os
import random
import threading
import types
import unittest
import warnings
from unittest import mock

from agent_fixture import requires_fake, reset_kubeps
from test_torch import TorchTestCase, batch_for, needs_torch, torch
from test_torch_elastic import member, not_member

try:
    import numpy  # torch's own wheels do not require it
except ImportError:
    numpy = None

if torch is not None:
    import kubeps.torch as kps
    from kubeps._torch_rollback import _put_back, _to_host
    from kubeps.errors import InvalidArgument

INTERVAL = 2  # spec.checkpoint.intervalSteps the fake agent says


def model_with_state(seed=1):
    """Dropout (torch's generator) and BatchNorm (buffers) as well as parameters."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(),
                               torch.nn.Dropout(0.3), torch.nn.Linear(5, 3))


class Schedule:
    """A program's own object with state, as a user registers one (a scaler, say)."""

    def __init__(self):
        self.scale = 1.0

    def state_dict(self):
        return {"scale": self.scale}

    def load_state_dict(self, state):
        self.scale = state["scale"]


@needs_torch
class RollbackTest(TorchTestCase):
    def run_job(self, optimizer_name, rollback=None, model_given=True, interval=INTERVAL,
                start_step=0, make_scheduler=None, skip_at=None, resume=False,
                **agent_options):
        """Six steps of Adam with a decaying learning rate (on the servers, or here with
        'none'), from `start_step` (the servers' parameters then the initial ones): the model,
        optimizer, scheduler, schedule, steps seen and generator after.  The body of step
        `skip_at` synchronizes and leaves without step(), as a loss scaler's overflow.
        resume: resume_with puts back a state of the program's own (the parameters doubled)."""
        reset_kubeps()
        initial = {name: p.detach().flatten().tolist()
                   for name, p in model_with_state().named_parameters()}
        agent = self.connect(optimizer=optimizer_name, checkpoint_interval=interval,
                             server_values=initial if start_step else None,
                             start_step=start_step, **agent_options)
        model = model_with_state()
        optimizer = kps.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters(),
                                             model=model if model_given else None)
        scheduler = (make_scheduler or (lambda o: torch.optim.lr_scheduler.StepLR(
            o, step_size=1, gamma=0.8)))(optimizer)
        schedule = Schedule()
        kps.restore_on_rollback(scheduler, schedule)
        loaded = []
        if resume:  # in place, as a loader may (it runs under no_grad)
            kps.resume_with(lambda step: loaded.append(step) or [p.mul_(2) for p in
                                                                 model.parameters()])
        if rollback is not None:
            agent.fake.arm_rollback(at_step=rollback[0], resume_step=rollback[1])
        torch.manual_seed(7)  # dropout's draws
        random.seed(8)  # the program's own draws: an augmentation
        if numpy is not None:
            numpy.random.seed(9)
        seen, copies, memory = [], [], set()
        for step in kps.steps(start_step + 6):
            seen.append(step)
            kept = optimizer._kubeps_snapshots._snapshots
            copies.append(len(kept))
            memory.update(s.params[0].data_ptr() for s in kept if s.params is not None)
            x, y = batch_for(step)
            x = x * random.uniform(0.5, 1.5)
            if numpy is not None:
                x = x + float(numpy.random.normal())
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y) * schedule.scale
            loss.backward()
            if step == skip_at:
                optimizer.synchronize()
                continue
            optimizer.step()
            scheduler.step()
            schedule.scale *= 1.5
        return types.SimpleNamespace(model=model, optimizer=optimizer, scheduler=scheduler,
                                     schedule=schedule, seen=seen, copies=copies,
                                     memory=memory, loaded=loaded,
                                     rng=torch.get_rng_state(),
                                     python_rng=random.getstate(),
                                     numpy_rng=(numpy.random.get_state()[1].tolist()
                                                if numpy is not None else None))

    def sgd_over_none(self, **agent_options):
        """The fake agent with the servers' optimizer none, and a model's SGD through it."""
        self.connect(optimizer="none", **agent_options)
        model = model_with_state()
        return model, kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                               named_parameters=model.named_parameters())

    def assert_same_state(self, run, clean):
        for (name, a), b in zip(run.model.state_dict().items(),
                                clean.model.state_dict().values()):
            self.assertTrue(torch.equal(a, b), name)
        for p, p0 in zip(run.model.parameters(), clean.model.parameters()):
            state, state0 = run.optimizer.state.get(p, {}), clean.optimizer.state.get(p0, {})
            self.assertEqual(sorted(state), sorted(state0))
            for key in state:
                self.assertTrue(torch.equal(torch.as_tensor(state[key]),
                                            torch.as_tensor(state0[key])), key)
        self.assertEqual(run.optimizer.param_groups[0]["lr"],
                         clean.optimizer.param_groups[0]["lr"])
        self.assertEqual(run.optimizer.kubeps_skipped_steps, clean.optimizer.kubeps_skipped_steps)
        self.assertEqual(run.scheduler.last_epoch, clean.scheduler.last_epoch)
        self.assertEqual(run.schedule.scale, clean.schedule.scale)
        self.assertTrue(torch.equal(run.rng, clean.rng))
        self.assertEqual(run.python_rng, clean.python_rng)
        self.assertEqual(run.numpy_rng, clean.numpy_rng)

    @requires_fake
    def test_servers_that_only_average_roll_the_programs_state_back_with_them(self):
        clean = self.run_job("none")
        run = self.run_job("none", rollback=(5, 4))
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 4, 5])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_a_rollback_past_the_newest_copy_goes_back_to_an_older_one(self):
        clean = self.run_job("none")
        run = self.run_job("none", rollback=(5, 2))
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_the_servers_optimizer_takes_back_buffers_generator_and_registered_objects(self):
        clean = self.run_job("sgd")
        run = self.run_job("sgd", rollback=(5, 4))
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 4, 5])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_a_process_started_between_checkpoint_steps_keeps_a_copy_of_its_first(self):
        # Resumed from a checkpoint an earlier run wrote with another interval: step 3 is
        # one the servers hold, though not a multiple of this run's 2.
        clean = self.run_job("sgd", start_step=3)
        run = self.run_job("sgd", rollback=(6, 3), start_step=3)
        self.assertEqual(run.seen, [3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_a_rollback_to_the_step_a_program_resumed_at_goes_back_to_the_state_it_loaded(self):
        clean = self.run_job("none", start_step=3, resume=True)
        run = self.run_job("none", rollback=(6, 3), start_step=3, resume=True)
        self.assertEqual(run.seen, [3, 4, 5, 6, 3, 4, 5, 6, 7, 8])
        self.assertEqual(run.loaded, [3], "loaded once, at the start; the copy after")
        self.assert_same_state(run, clean)

    @requires_fake
    def test_a_rollback_to_before_the_process_started_loads_the_programs_own_state(self):
        # Restarted at step 4, then the job went back to 2 (another worker's program held
        # no state of 4): no copy is of 2, and resume_with's load is.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = self.run_job("none", rollback=(8, 2), start_step=4, resume=True)
        self.assertEqual(run.seen, [4, 5, 6, 7, 8, 2, 3, 4, 5, 6, 7, 8, 9])
        self.assertEqual(run.loaded, [4, 2])
        self.assertEqual([str(w.message) for w in caught if "rolled back" in str(w.message)], [])

    @requires_fake
    def test_schedulers_whose_state_holds_their_own_methods_go_back_too(self):
        # CyclicLR keeps a weak reference to its scale method, OneCycleLR its annealing
        # method: neither can be deep-copied, and a copy of a bound method would copy the
        # scheduler with its optimizer and model.
        for make in (lambda o: torch.optim.lr_scheduler.CyclicLR(
                         o, base_lr=0.01, max_lr=0.1, step_size_up=2, cycle_momentum=False),
                     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1,
                                                                   total_steps=20)):
            clean = self.run_job("none", make_scheduler=make)
            run = self.run_job("none", rollback=(5, 2), make_scheduler=make)
            self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
            self.assert_same_state(run, clean)

    @requires_fake
    def test_an_elastic_worker_rolled_back_to_before_it_was_taken_in_starts_as_it_did(self):
        # Taken in at step 4 (the others computed the steps before); a rollback to step 2
        # takes it back to the state it was taken in with, not the one its steps left.
        def schedule(step):
            return member(0, 1) if step >= 4 else not_member(4)
        clean = self.run_job("sgd", schedule=schedule)
        run = self.run_job("sgd", rollback=(5, 2), schedule=schedule)
        self.assertEqual(clean.seen, [4, 5])
        self.assertEqual(run.seen, [4, 5, 4, 5])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_a_step_skipped_again_after_a_rollback_is_counted_once(self):
        clean = self.run_job("none", skip_at=3)
        run = self.run_job("none", rollback=(5, 2), skip_at=3)
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        self.assertEqual(clean.optimizer.kubeps_skipped_steps, 1)
        self.assert_same_state(run, clean)

    @requires_fake
    def test_no_copy_older_than_the_one_before_the_newest_checkpoint_is_kept(self):
        # The fake's servers write each checkpoint as they reach its step: a rollback goes
        # back to the newest step, so that copy alone is kept.  An older agent, which does
        # not say, keeps the newest 3.
        # The fake's servers write each checkpoint as they reach its step: the copy of that
        # step is kept, and the one before it (a server may find the newest damaged), not
        # older ones, though KUBEPS_ROLLBACK_COPIES allows 3.
        run = self.run_job("none")
        self.assertEqual(run.copies, [1, 1, 2, 2, 2, 2])
        self.assertEqual(self.agent.fake.asked_checkpoints, 2)  # before the copies of 2 and 4
        # The copy of 4 is taken into the memory of the copy of 0 it replaces: fresh memory
        # costs a page fault a page, more than the copy.
        self.assertEqual(len(run.memory), 2)
        older = self.run_job("none", answers_checkpoints=False)  # it keeps the newest 3
        self.assertEqual(older.copies, [1, 1, 2, 2, 3, 3])
        self.assertEqual(len(older.memory), 3)

    @requires_fake
    def test_a_checkpoint_found_damaged_goes_back_to_the_copy_before_it(self):
        # Step 4 was every server's newest checkpoint, but a server finds its copy damaged
        # when it restarts, and the job falls back to step 2.
        clean = self.run_job("none")
        run = self.run_job("none", rollback=(5, 2), damaged_checkpoint=True)
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        self.assert_same_state(run, clean)

    @requires_fake
    def test_the_copy_of_the_newest_checkpoint_outlives_newer_ones(self):
        # The servers' writes lag: every server holds step 2 only.  With room for 2 copies
        # that one and the newest stay, not the newest two.
        with mock.patch.dict(os.environ, {"KUBEPS_ROLLBACK_COPIES": "2"}):
            run = self.run_job("none", rollback=(5, 2), interval=1)
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 2, 3, 4, 5])
        clean = self.run_job("none", interval=1)
        self.assert_same_state(run, clean)

    @requires_fake
    def test_an_async_job_which_never_rolls_back_keeps_no_copies(self):
        self.assertNotEqual(self.run_job("none").optimizer._kubeps_snapshots._snapshots, [])
        self.assertEqual(self.run_job("none", mode="async").optimizer._kubeps_snapshots._snapshots,
                         [])

    @requires_fake
    def test_an_object_registered_after_the_copy_is_named_when_it_stays(self):
        model, optimizer = self.sgd_over_none(checkpoint_interval=INTERVAL)
        self.agent.fake.arm_rollback(at_step=5, resume_step=4)
        late = Schedule()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in kps.steps(6):
                if step == 5:
                    kps.restore_on_rollback(late)
                late.scale *= 2
                x, y = batch_for(step)
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        messages = [str(w.message) for w in caught if "rolled back" in str(w.message)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("rolled back to step 4, and Schedule, registered with restore_on_rollback "
                      "after this process's copy of that step was taken, keep their values",
                      messages[0])

    @requires_fake
    def test_without_the_interval_the_state_stays_and_a_warning_says_why(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = self.run_job("none", rollback=(5, 4), interval=0)
        self.assertEqual(run.seen, [0, 1, 2, 3, 4, 5, 4, 5])
        messages = [str(w.message) for w in caught if "rolled back" in str(w.message)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("no copy of its state there: the agent did not say "
                      "spec.checkpoint.intervalSteps", messages[0])
        self.assertIn("the model's buffers, torch's, Python's and NumPy's random generators and "
                      "the objects given to restore_on_rollback keep their values", messages[0])
        self.assertEqual(run.schedule.scale, 1.5 ** 8)  # 8 iterations, none taken back

    @requires_fake
    def test_fewer_copies_kept_cost_a_rollback_past_them_its_state(self):
        with mock.patch.dict(os.environ, {"KUBEPS_ROLLBACK_COPIES": "1"}), \
                warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.run_job("none", rollback=(5, 2))
        messages = [str(w.message) for w in caught if "rolled back" in str(w.message)]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("rolled back to step 2, and this process has no copy of its state there: "
                      "steps() keeps copies of steps 4 only", messages[0])

    @requires_fake
    def test_a_wrong_number_of_copies_is_refused_naming_the_variable(self):
        self.connect(optimizer="none")
        model = model_with_state()
        with mock.patch.dict(os.environ, {"KUBEPS_ROLLBACK_COPIES": "three"}), \
                self.assertRaisesRegex(InvalidArgument, r"KUBEPS_ROLLBACK_COPIES='three': "
                                                        r"expected the number of copies"):
            kps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())

    @requires_fake
    def test_an_object_without_state_dict_is_refused_by_name(self):
        self.sgd_over_none()
        with self.assertRaisesRegex(InvalidArgument, r"restore_on_rollback: int has no "
                                                     r"state_dict\(\) and load_state_dict\(\)"):
            kps.restore_on_rollback(3)

    @requires_fake
    def test_an_object_whose_state_cannot_be_copied_is_refused_when_registered(self):
        self.sgd_over_none()
        locked = Schedule()
        locked.state_dict = lambda: {"lock": threading.Lock()}
        with self.assertRaisesRegex(InvalidArgument, r"restore_on_rollback: the state_dict\(\) "
                                                     r"of Schedule cannot be copied \(TypeError"):
            kps.restore_on_rollback(locked)


@needs_torch
class PutBackTest(unittest.TestCase):
    def test_code_is_kept_and_callable_objects_with_state_are_copied(self):
        class Ramp:  # a scale function with state of its own
            def __init__(self):
                self.calls = 0

            def __call__(self, x):
                self.calls += 1
                return x

        ramp, fn = Ramp(), (lambda x: x)
        copied = _to_host({"custom": ramp, "fn": fn, "method": ramp.__call__})
        self.assertIsNot(copied["custom"], ramp)
        self.assertIs(copied["fn"], fn)
        self.assertEqual(copied["method"], ramp.__call__)

    def test_nested_tensors_go_back_into_the_programs_own_in_place(self):
        # An LBFGS keeps lists of tensors in its state.
        history = [torch.zeros(3), torch.ones(2)]
        current = {"old_dirs": history, "n_iter": 4, "d": torch.zeros(3)}
        saved = _to_host({"old_dirs": [torch.arange(3.0), torch.full((2,), 7.0)],
                          "n_iter": 2, "d": torch.ones(3)})
        restored = _put_back(current, saved)
        self.assertIs(restored["old_dirs"][0], history[0])
        self.assertIs(restored["old_dirs"][1], history[1])
        self.assertEqual(history[0].tolist(), [0.0, 1.0, 2.0])
        self.assertEqual(history[1].tolist(), [7.0, 7.0])
        self.assertEqual(restored["n_iter"], 2)
        self.assertIs(restored["d"], current["d"])

    def test_a_tensor_that_no_longer_fits_is_a_new_one_where_the_old_one_was(self):
        current = {"d": torch.zeros(2, dtype=torch.float64)}
        restored = _put_back(current, {"d": torch.ones(3)})
        self.assertIsNot(restored["d"], current["d"])
        self.assertEqual(restored["d"].tolist(), [1.0, 1.0, 1.0])
        self.assertEqual(current["d"].tolist(), [0.0, 0.0])


if __name__ == "__main__":
    unittest.main()
