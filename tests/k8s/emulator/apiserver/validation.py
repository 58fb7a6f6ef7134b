"""Kubernetes' own validation of the names and fields the operator writes,
with the API server's messages (k8s.io/apimachinery/pkg/util/validation and
pkg/apis/core/validation): a Service's name and a pod's hostname and
subdomain are DNS labels of at most 63 characters, label values are at most
63 characters. A real API server answers 422 Invalid to an object that breaks
them; so does the emulator, so that a name the operator derives too long
fails a test here and not on a cluster.
"""
import re

from .errors import invalid

MAX_LABEL = 63
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_DNS1123_MESSAGE = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                    "or '-', and must start and end with an alphanumeric character")
_DNS1035_MESSAGE = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                    "start with an alphabetic character, and end with an alphanumeric character")
_LABEL_VALUE_MESSAGE = ("a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                        "character")


def _label_errors(field, value, pattern, message):
    errors = []
    if len(value) > MAX_LABEL:
        errors.append((field, "FieldValueInvalid", 'Invalid value: "%s": must be no more than '
                       "63 characters" % value))
    if not pattern.match(value):
        errors.append((field, "FieldValueInvalid", 'Invalid value: "%s": %s' % (value, message)))
    return errors


def validate(rtype, obj):
    """Raises 422 Invalid when `obj` (about to be stored) breaks a rule above."""
    md = obj.get("metadata", {})
    name = md.get("name", "")
    errors = []
    for key, value in (md.get("labels") or {}).items():
        if isinstance(value, str):
            errors += _label_errors("metadata.labels", value, _LABEL_VALUE, _LABEL_VALUE_MESSAGE)
    if (rtype.group, rtype.plural) == ("", "services"):
        errors += _label_errors("metadata.name", name, _DNS1035_LABEL, _DNS1035_MESSAGE)
    if (rtype.group, rtype.plural) == ("", "pods"):
        spec = obj.get("spec") or {}
        for field in ("hostname", "subdomain"):
            if spec.get(field):
                errors += _label_errors("spec." + field, spec[field], _DNS1123_LABEL,
                                        _DNS1123_MESSAGE)
    if errors:
        raise invalid(rtype, name, errors)
