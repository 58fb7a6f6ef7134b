"""The fake agent's parameter servers (fake_agent.py): one value per key with a version,
every version's values kept so a rollback can go back exactly, the servers' optimizer
`sgd` or `none`, and spec.nonFinite's rules; and the protocol's error as the fake raises it.
"""

import array
import math
import threading

CODES = ("InvalidArgument", "FailedPrecondition", "NotFound", "AlreadyExists", "Aborted",
         "Unavailable", "Internal")


def finite(data):
    return all(math.isfinite(g) for g in array.array("f", data))


class RequestError(Exception):
    def __init__(self, code, message, **fields):
        assert code in CODES, code
        super().__init__(message)
        self.code = code
        self.fields = fields


class Servers:
    """The job's parameter servers as the fake plays them; they outlive sessions."""

    def __init__(self, mode, optimizer, learning_rate, non_finite):
        self.mode = mode
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.non_finite = non_finite
        self.cond = threading.Condition()
        self.history = {}  # name -> {version: bytes}
        self.version = {}  # name -> current version
        self.generation = 0
        self.resume_step = None  # of the latest rollback

    def initialized(self):
        return bool(self.version)

    def store_initial(self, name, data, step):
        with self.cond:
            if name not in self.version:  # the first values win
                self.history[name] = {step: data}
                self.version[name] = step

    def current(self, name):
        return self.history[name][self.version[name]]

    def judge_non_finite(self, gradients, step):
        """What the shards make of a push ({name: bytes}) holding NaN or Inf: (a RequestError
        under nonFinite Fail, as they refuse it whole, or None; whether SkipStep skips it)."""
        bad = [name for name, data in gradients.items() if not finite(data)]
        if not bad:
            return None, False
        if self.non_finite != "Fail":
            return None, True
        return RequestError("InvalidArgument", "the gradient of %r for step %d is not finite "
                            "(NaN or Inf): the model diverged" % (bad[0], step),
                            reason="NonFiniteGradient"), False

    def apply_push(self, name, gradient, step, skip=False):
        """Returns a violation message, or None.  `skip`: the push held NaN or Inf under
        SkipStep, so no update (with `none` the gradient is handed on as it is)."""
        with self.cond:
            version = self.version[name]
            if self.mode == "sync":
                if step < version:
                    return None  # a step already applied: ignored, as the shards do
                if step > version:
                    return "push of %r for step %d while the servers are at version %d" % (
                        name, step, version)
            grad = array.array("f", gradient)
            if self.optimizer == "none":
                new = grad  # SkipStep too: the program's optimizer decides
            elif skip:
                new = array.array("f", self.current(name))
            else:
                new = array.array("f", self.current(name))
                for i, g in enumerate(grad):
                    new[i] -= self.learning_rate * g
            self.version[name] = version + 1
            self.history[name][version + 1] = new.tobytes()
            self.cond.notify_all()
        return None

    def values_for_pull(self, name, min_version):
        history = self.history[name]
        if self.mode == "sync" and min_version in history:
            return history[min_version]  # as it was at that version
        return self.current(name)

    def others_compute_to(self, step):
        """The other workers of an elastic job compute up to `step`, each step's mean
        gradient all ones."""
        with self.cond:
            for name, version in list(self.version.items()):
                values = array.array("f", self.history[name][version])
                for later in range(version + 1, step + 1):
                    values = array.array("f", (v - self.learning_rate for v in values))
                    self.history[name][later] = values.tobytes()
                self.version[name] = max(version, step)
            self.cond.notify_all()

    def go_back_to(self, step):
        """Every tensor at `step` with its current values, the versions after it gone (the
        parameters of a job whose program keeps them are the program's)."""
        with self.cond:
            for name, history in self.history.items():
                history[step] = history[self.version[name]]
                for version in [v for v in history if v > step]:
                    del history[version]
                self.version[name] = step
            self.cond.notify_all()

    def roll_back(self, resume_step):
        with self.cond:
            for name, history in self.history.items():
                if min(history) > resume_step:  # to before this process's start
                    history[resume_step] = history[min(history)]
                for version in [v for v in history if v > resume_step]:
                    del history[version]
                self.version[name] = max(history)
            self.generation += 1
            self.resume_step = resume_step
            self.cond.notify_all()
