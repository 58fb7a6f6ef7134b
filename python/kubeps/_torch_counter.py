"""The global step a kubeps.torch process computes (kubeps/torch.py keeps one)."""


class StepCounter:
    """The global step this process computes, shared by steps() and the optimizer.

    `step` is None until `init` told where to start.  `moves` counts every
    change (an optimizer step or a rollback), so steps() can tell a loop body
    that moved the step from one that did not.
    """

    def __init__(self):
        self.step = None
        self.moves = 0
        self.share = None  # elastic: the Membership of the step steps() yielded last
        self.left = False  # elastic: this worker was scaled away

    def start(self, step):
        self.step = step
        self.moves += 1

    def advance(self):
        self.step += 1
        self.moves += 1

    def roll_back(self, resume_step):
        self.step = resume_step
        self.moves += 1
