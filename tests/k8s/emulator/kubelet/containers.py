"""One container of a pod as the kubelet tracks it (state, restarts, back-off,
probe counters), and the small rules about containers: exit codes of
signalled processes, $(VAR) expansion, configuration errors that keep a
container waiting.
"""


def exit_code(rc):
    """The exit code a runtime reports for a Popen returncode: 128+N for a
    process killed by signal N."""
    return 128 - rc if rc < 0 else rc


def expand(text, env):
    """Kubernetes $(VAR) expansion: $$ escapes, unknown references stay."""
    if not isinstance(text, str):
        return text
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i):
            j = text.find(")", i + 2)
            if j < 0:
                out.append(text[i:])
                break
            name = text[i + 2:j]
            out.append(env[name] if name in env else text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class ConfigError(Exception):
    """The container cannot be configured yet (a missing secret...)."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class Container:
    """A container of the pod spec and what the kubelet knows of it."""

    def __init__(self, spec, init=False):
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.proc = None
        self.restarts = 0
        self.state = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state = {}
        self.ready = False
        self.started_at = None
        self.backoff_until = 0
        self.backoff = 0
        self.done = False          # terminated and will not restart
        self.probe_next = {}
        self.probe_counts = {}
        self.log_file = None
        self.started_once = False
        self.startup_ok = False    # its startupProbe passed (or it has none)
        self.termination_file = None  # bound to its terminationMessagePath, this start's
        self.log_path = None
        self.pull_backoff = 0      # seconds until the next pull of a missing image
        self.pull_failed_at = 0

    @property
    def sidecar(self):
        """A native sidecar (Kubernetes 1.29+): an init container with
        restartPolicy Always, started before the next init container and the
        containers, kept running beside them, restarted whenever it exits."""
        return self.init and self.spec.get("restartPolicy") == "Always"

    def status(self, image_id=""):
        st = {"name": self.name, "image": self.spec.get("image", ""),
              "imageID": image_id, "ready": self.ready, "restartCount": self.restarts,
              "state": self.state, "lastState": self.last_state,
              "started": "running" in self.state and self.startup_ok}
        if self.proc is not None:
            st["containerID"] = "emulated://%d" % self.proc.pid
        return st
