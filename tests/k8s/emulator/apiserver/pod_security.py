"""Pod Security admission, as the API server enforces it on a namespace
labelled pod-security.kubernetes.io/enforce=restricted (or baseline): a pod
that breaks the profile is refused with 403 and the upstream message, which
lists every check it fails. The checks are Kubernetes' own for these
profiles (k8s.io/pod-security-admission), less the rare ones kubeps' pods
never touch (AppArmor, SELinux options, sysctls, /proc mount, Windows).
"""
from .errors import ApiError

LEVEL_LABEL = "pod-security.kubernetes.io/enforce"
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}


def _containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def _baseline(spec):
    failures = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            failures.append("host namespaces (%s=true)" % field)
    privileged = [c["name"] for c in _containers(spec)
                  if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        failures.append("privileged (%s must not set securityContext.privileged=true)" %
                        _names(privileged))
    host_paths = [v["name"] for v in spec.get("volumes", []) if "hostPath" in v]
    if host_paths:
        failures.append("hostPath volumes (%s)" % ", ".join('"%s"' % n for n in host_paths))
    return failures


def _names(names):
    return ("container " if len(names) == 1 else "containers ") + ", ".join(
        '"%s"' % n for n in names)


def _restricted(spec):
    failures = []
    pod_ctx = spec.get("securityContext") or {}
    ctx = {c["name"]: (c.get("securityContext") or {}) for c in _containers(spec)}
    bad = [n for n, c in ctx.items() if c.get("allowPrivilegeEscalation") is not False]
    if bad:
        failures.append("allowPrivilegeEscalation != false (%s must set "
                        "securityContext.allowPrivilegeEscalation=false)" % _names(bad))
    bad = [n for n, c in ctx.items()
           if "ALL" not in ((c.get("capabilities") or {}).get("drop") or [])]
    if bad:
        failures.append('unrestricted capabilities (%s must set '
                        'securityContext.capabilities.drop=["ALL"])' % _names(bad))
    bad = [n for n, c in ctx.items()
           if not c.get("runAsNonRoot", pod_ctx.get("runAsNonRoot", False))]
    if bad:
        failures.append("runAsNonRoot != true (pod or %s must set "
                        "securityContext.runAsNonRoot=true)" % _names(bad))
    bad = [n for n, c in ctx.items() if c.get("runAsUser", pod_ctx.get("runAsUser")) == 0]
    if bad:
        failures.append("runAsUser=0 (%s must not set runAsUser=0)" % _names(bad))
    seccomp = lambda c: (c.get("seccompProfile") or pod_ctx.get("seccompProfile") or  # noqa
                         {}).get("type")
    bad = [n for n, c in ctx.items() if seccomp(c) not in ("RuntimeDefault", "Localhost")]
    if bad:
        failures.append('seccompProfile (pod or %s must set securityContext.seccompProfile.type '
                        'to "RuntimeDefault" or "Localhost")' % _names(bad))
    volumes = [v["name"] for v in spec.get("volumes", [])
               if not any(k in v for k in ALLOWED_VOLUMES)]
    if volumes:
        failures.append("restricted volume types (%s)" % ", ".join('"%s"' % v for v in volumes))
    return failures


def admit(namespace_obj, pod):
    """Raises 403 when `pod` breaks its namespace's enforced profile."""
    level = ((namespace_obj or {}).get("metadata", {}).get("labels") or {}).get(LEVEL_LABEL)
    if level not in ("baseline", "restricted"):
        return
    spec = pod.get("spec") or {}
    failures = _baseline(spec) + (_restricted(spec) if level == "restricted" else [])
    if failures:
        raise ApiError(403, "Forbidden", 'pods "%s" is forbidden: violates PodSecurity '
                       '"%s:latest": %s' % (pod["metadata"].get("name", ""), level,
                                            ", ".join(failures)),
                       {"name": pod["metadata"].get("name", ""), "kind": "pods"})
