"""Discovery, what kubectl reads before anything else: /version, /api,
/apis, /apis/G, the resource list of each group version (built-ins and every
served version of every CRD, at once), and the OpenAPI documents (an empty
v2 document, so that kubectl leaves field validation to the server, and v3
documents of the CRDs' group versions only, openapi.py: kubectl explains
custom resources from them and keeps its compiled-in built-in types).
"""
from . import openapi
from .errors import ApiError

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-kubeps-emulator",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
    "platform": "linux/amd64",
}

JSON = "application/json"


def not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def group_not_served():
    """A group, or a group's version, that no API serves: the server's
    not-found handler answers as net/http's NotFound does, in plain text,
    no Status, as kube-apiserver answers it."""
    return ApiError(404, "NotFound", "404 page not found", plain=True)


def split_path(parts):
    """(group, version, rest) of /api/V/REST... or /apis/G/V/REST...; `parts`
    are the path's unquoted segments. Raises 404 for any other path."""
    if not parts or parts[0] not in ("api", "apis"):
        raise not_found()
    if parts[0] == "api":
        if len(parts) < 2:
            raise not_found()
        return "", parts[1], parts[2:]
    if len(parts) < 3:
        raise not_found()
    return parts[1], parts[2], parts[3:]


def _group(g, versions):
    return {"name": g, "versions": [{"groupVersion": g + "/" + v, "version": v} for v in versions],
            "preferredVersion": {"groupVersion": g + "/" + versions[0], "version": versions[0]}}


def document(api, path, parts, server_address):
    """(body, content type) of the discovery document at `path`, or None when
    the path is one of resources (routing.py serves it). Raises 404 for a
    path that is neither."""
    if path == "/version" or path == "/version/":
        return VERSION, JSON
    if path.startswith("/openapi/v2"):
        return b"", "application/octet-stream"
    if path.startswith("/openapi/v3"):
        return openapi.document(api, path), JSON
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": server_address}]}, JSON
    if parts == ["apis"]:
        groups = [_group(g, versions) for g, versions in api.groups().items() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}, JSON
    if len(parts) == 2 and parts[0] == "apis":
        versions = api.groups().get(parts[1])
        if not versions:
            raise group_not_served()
        return dict({"kind": "APIGroup", "apiVersion": "v1"}, **_group(parts[1], versions)), JSON
    group, version, rest = split_path(parts)
    if rest:
        return None
    types = [t for (g, v, _), t in api.served.items() if g == group and v == version]
    if not types:
        raise group_not_served()
    resources = []
    for t in types:
        resources.extend(t.discovery())
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": group + "/" + version if group else version,
            "resources": resources}, JSON
