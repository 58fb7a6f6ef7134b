"""Errors of the kubeps client.

Every failure the agent reports carries a code from the sidecar protocol
(docs/sidecar-protocol.md) and a message naming what is wrong; the client
raises the subclass of `KubepsError` of that code, so a caller can catch
`kubeps.NotFound` or all of them at once with `kubeps.KubepsError`.  Misuse
the client detects itself (a call before `init()`, a gradient of the wrong
shape) raises the same classes, so there is one family to catch.
"""


class KubepsError(Exception):
    """A failed kubeps request: `code` is the protocol's code, `message` says what is wrong."""

    code = "Internal"
    # Why the job must end, when the agent says a rerun would fail the same
    # way ("NonFiniteGradient": a parameter server refused a NaN gradient).
    reason = None

    def __init__(self, message, code=None, reason=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason

    def __str__(self):
        return "%s: %s" % (self.code, self.message)


class InvalidArgument(KubepsError):
    code = "InvalidArgument"


class FailedPrecondition(KubepsError):
    code = "FailedPrecondition"


class NotFound(KubepsError):
    code = "NotFound"


class AlreadyExists(KubepsError):
    code = "AlreadyExists"


class Aborted(KubepsError):
    code = "Aborted"


class RolledBack(Aborted):
    """The job rolled back (a parameter server restarted from its checkpoint).

    The agent has already pulled the parameters of `resume_step` into every
    values region; the training loop goes on from `resume_step`.
    """

    def __init__(self, message, resume_step):
        super().__init__(message)
        self.resume_step = resume_step


class Unavailable(KubepsError):
    code = "Unavailable"


class Internal(KubepsError):
    code = "Internal"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, FailedPrecondition, NotFound,
                                      AlreadyExists, Aborted, Unavailable, Internal)}


def error_from_reply(reply, op):
    """The exception for a failed reply `{"ok": false, "code", "error", ...}` to request `op`."""
    code = reply.get("code")
    message = reply.get("error") or "(the agent gave no message)"
    message = "%s: %s" % (op, message)
    if code == "Aborted" and reply.get("resume_step") is not None:
        return RolledBack(message, int(reply["resume_step"]))
    cls = _BY_CODE.get(code)
    if cls is None:
        # A code this client does not know is still an error: keep the code.
        return KubepsError(message, code=str(code), reason=reply.get("reason"))
    return cls(message, reason=reply.get("reason"))
