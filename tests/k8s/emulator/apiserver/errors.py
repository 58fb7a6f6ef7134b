"""Failures as the API server reports them: a Status object with an HTTP code,
a reason and, for invalid objects, the field causes kubectl prints.
"""


class ApiError(Exception):
    """`plain`: answered as net/http's http.Error does, a text/plain body of
    the message alone (what the CRD handler writes for a subresource a CRD
    does not declare, or a verb it does not serve) instead of a Status."""

    def __init__(self, code, reason, message, details=None, headers=None, plain=False):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}
        self.plain = plain

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": self.message, "code": self.code}
        if self.reason:   # StatusReasonUnknown ("") is left out, as omitempty does
            s["reason"] = self.reason
        if self.details is not None:
            s["details"] = self.details
        return s


def status_success(details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        s["details"] = details
    return s


def not_found(rtype, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (rtype.qualified, name),
                    {"name": name, "group": rtype.group, "kind": rtype.plural})


def invalid(rtype, name, causes):
    """422 Invalid with one cause per (field, reason, message)."""
    msgs = ["%s: %s" % (f, m) if f else m for f, _, m in causes]
    text = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    return ApiError(422, "Invalid", '%s.%s "%s" is invalid: %s' % (
        rtype.kind, rtype.group, name, text) if rtype.group else '%s "%s" is invalid: %s' % (
        rtype.kind, name, text),
        {"name": name, "group": rtype.group, "kind": rtype.kind,
         "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


def conflict(rtype, name):
    """409 Conflict: a write based on a stale resourceVersion."""
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the object has '
                    'been modified; please apply your changes to the latest version and try '
                    'again' % (rtype.qualified, name),
                    {"name": name, "group": rtype.group, "kind": rtype.plural})
