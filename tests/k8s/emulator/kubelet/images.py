"""Images as the kubelet pulls them, before it starts a container: a
reference that does not parse is InvalidImageName (not retried); an image
no registry has is ErrImagePull, then ImagePullBackOff while the kubelet
waits to try again (doubling back-off), the message naming the image, as
containerd and the kubelet word them.

Which images cannot be pulled: those on a registry whose host name ends in
".invalid" (the top-level domain reserved never to resolve, so the same
reference fails on a real cluster too), and those matching a --missing-image
pattern (fnmatch, e.g. "kubeps/agent:broken*"). Every other image "pulls":
what runs is decided by environment.py's resolve_program.

A mixin of PodWorker (pod_worker.py).
"""
import fnmatch
import re
import time

# distribution/reference's grammar: [domain[:port]/]path[:tag][@digest],
# path components lower case.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = r"(?:%s(?:\.%s)*(?::[0-9]+)?/)" % (_LABEL, _LABEL)
_REFERENCE = re.compile(r"^%s?%s(?:/%s)*(?::[\w][\w.-]{0,127})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:"
                        r"[0-9a-fA-F]{32,})?$" % (_DOMAIN, _COMPONENT, _COMPONENT))


def registry_host(image):
    """The registry an image is pulled from ("docker.io" when it names none)."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first.split(":")[0]
    return "docker.io"


def pull_error(image, missing_patterns):
    """(reason, message) when `image` cannot be pulled, else None."""
    if not _REFERENCE.match(image or ""):
        return ("InvalidImageName",
                'Failed to apply default image tag "%s": couldn\'t parse image name "%s": '
                "invalid reference format" % (image, image))
    host = registry_host(image)
    if host.endswith(".invalid"):
        return ("ErrImagePull",
                'failed to pull and unpack image "%s": failed to resolve reference "%s": '
                "failed to do request: dial tcp: lookup %s: no such host" % (image, image, host))
    if any(fnmatch.fnmatchcase(image, p) for p in missing_patterns):
        return ("ErrImagePull",
                'failed to pull and unpack image "%s": failed to resolve reference "%s": '
                "%s: not found" % (image, image, image))
    return None


class ImagePuller:
    def pull_image(self, c):
        """Whether `c`'s image is there to start it; if not, `c` waits with
        the pull's error until its back-off has passed."""
        image = c.spec.get("image", "")
        error = pull_error(image, self.kubelet.missing_images)
        if error is None:
            c.pull_backoff = 0
            return True
        reason, message = error
        c.state = {"waiting": {"reason": reason, "message": message}}
        c.pull_backoff = min(self.kubelet.max_backoff,
                             c.pull_backoff * 2 if c.pull_backoff else self.kubelet.backoff)
        c.pull_failed_at = time.time()
        c.backoff_until = c.pull_failed_at + c.pull_backoff
        return False

    def show_pull_backoff(self, c):
        """ErrImagePull is what the failed try says; while the kubelet waits
        for the next one, the container says ImagePullBackOff."""
        waiting = c.state.get("waiting", {})
        if waiting.get("reason") != "ErrImagePull":
            return
        if time.time() < c.pull_failed_at + min(0.5, c.pull_backoff / 2):
            return
        c.state = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image '
                               '"%s"' % c.spec.get("image", "")}}
