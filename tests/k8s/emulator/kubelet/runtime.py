"""The container runtime: each container is a local process group, started
in its own mount and UTS namespace (isolation "namespace": volumes bind-mounted
on their mountPaths, the pod's hosts file on /etc/hosts, the pod's hostname)
or without namespaces (isolation "none": mountPaths become symbolic links),
with its output in the container's log file, in the pod's net_cls cgroup
when NetworkPolicy is enforced; reaped when it exits; stopped with SIGTERM,
then SIGKILL after the grace period.

A mixin of PodWorker (pod_worker.py).
"""
import os
import shutil
import signal
import subprocess
import threading
import time

from ..client import ApiError
from ..clock import now_iso
from . import mount_points
from .containers import ConfigError, exit_code
from .log import log


# The shell that execs the container's program joins the pod's net_cls
# cgroup first, so every socket of the container has the pod's classid.
CGROUP_JOIN = 'if [ -n "$KUBEPS_EMU_CGROUP" ]; then echo $$ > "$KUBEPS_EMU_CGROUP"; fi'


def unshare_works():
    """Whether this process may make mount and UTS namespaces (isolation
    "namespace"), e.g. as root."""
    if not shutil.which("unshare") or not shutil.which("mount"):
        return False
    try:
        r = subprocess.run(["unshare", "--mount", "--uts", "--propagation", "private", "true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class ProcessRunner:
    def link_mount_path(self, src, dst):
        """Isolation none: `dst` becomes a link to `src`, or this pod shares
        another pod's link there; False where something else is there."""
        with mount_points.held():
            if os.path.lexists(dst):
                if os.path.islink(dst) and mount_points.was_made(dst):
                    # another pod's link: pods of one job mount the same
                    # secret at the same path; the first pod's copy is seen
                    if os.readlink(dst) != src:
                        log("%s: %s is shared with another pod (isolation none)" % (
                            self.key, dst))
                    self.claim_mount_point(dst)
                    return True
                return os.path.realpath(dst) == os.path.realpath(src)
            self.make_parents(dst)
            os.symlink(src, dst)
            mount_points.made(dst)
            self.claim_mount_point(dst)
            return True

    def start_container(self, c):
        # the image first, as the kubelet pulls it before it configures the container
        if not self.pull_image(c):
            return False
        try:
            env = self.container_env(c)
            mounts = self.mounts(c)
            # the pod's net_cls cgroup, for NetworkPolicy (policy_enforcer.py)
            cgroup = self.kubelet.pod_cgroup(self.pod)
        except ConfigError as e:
            c.state = {"waiting": {"reason": e.reason, "message": str(e)}}
            c.backoff_until = time.time() + 1
            return False
        except (ApiError, OSError) as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            c.backoff_until = time.time() + 1
            return False
        if c.started_once:
            c.restarts += 1
        c.started_once = True
        c.termination_file = self.new_termination_file(c)
        if c.termination_file:
            mounts.append((c.termination_file,
                           c.spec.get("terminationMessagePath", "/dev/termination-log"), False))
        program, argv = self.resolve_program(c, env)
        now = now_iso()
        if program is None:
            msg = "exec: %r: executable file not found in $PATH" % (argv[0] if argv else "")
            self.terminated(c, 128, "StartError", now, now, msg)
            return False
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, "%s.%d.log" % (c.name, c.restarts))
        logf = open(log_path, "ab")
        cwd = c.spec.get("workingDir") or self.dir
        os.makedirs(cwd, exist_ok=True)
        iso = self.kubelet.isolation
        if iso == "namespace":
            script = ["set -e", CGROUP_JOIN, 'mount --bind "$KUBEPS_EMU_HOSTS" /etc/hosts',
                      'hostname "$KUBEPS_EMU_HOSTNAME"']
            margs = []
            for i, (src, dst, ro) in enumerate(mounts):
                margs += [src, dst]
                n = 2 * i
                script.append('s="$KUBEPS_EMU_M%d"; d="$KUBEPS_EMU_M%d"' % (n, n + 1))
                self.make_target(src, dst)
                script.append('mount --bind "$s" "$d"')
                if ro:
                    script.append('mount -o remount,bind,ro "$d" || true')
            script.append("unset KUBEPS_EMU_CGROUP KUBEPS_EMU_HOSTS KUBEPS_EMU_HOSTNAME " +
                          " ".join("KUBEPS_EMU_M%d" % i for i in range(len(margs))))
            script.append('cd "$KUBEPS_EMU_CWD" 2>/dev/null || true; unset KUBEPS_EMU_CWD')
            script.append('exec "$@"')
            full_env = dict(env)
            full_env["KUBEPS_EMU_HOSTS"] = self.hosts_path
            full_env["KUBEPS_EMU_HOSTNAME"] = self.hostname
            full_env["KUBEPS_EMU_CWD"] = cwd
            for i, m in enumerate(margs):
                full_env["KUBEPS_EMU_M%d" % i] = m
            cmd = ["unshare", "--mount", "--uts", "--propagation", "private", "--", "/bin/sh",
                   "-c", "\n".join(script), "sh", program] + argv
            env = full_env
        else:
            for src, dst, _ in mounts:
                if not self.link_mount_path(src, dst):
                    self.terminated(c, 128, "StartError", now, now,
                                    "mountPath %s exists on this machine; the emulator cannot "
                                    "mount over it without --isolation=namespace" % dst)
                    logf.close()
                    return False
            cmd = [program] + argv
            if cgroup:
                cmd = ["/bin/sh", "-c", CGROUP_JOIN + '; unset KUBEPS_EMU_CGROUP; exec "$@"',
                       "sh"] + cmd
                env = dict(env)
        if cgroup:
            env["KUBEPS_EMU_CGROUP"] = cgroup
        try:
            c.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=logf, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            logf.close()
            self.terminated(c, 128, "StartError", now, now, str(e))
            return False
        logf.close()
        c.log_path = log_path
        c.started_at = now
        c.state = {"running": {"startedAt": now}}
        c.startup_ok = not c.spec.get("startupProbe")
        c.ready = not c.spec.get("readinessProbe") and (not c.init or c.sidecar) and c.startup_ok
        c.probe_next = {}
        c.probe_counts = {}
        self.kubelet.track(c.proc)
        if self.kubelet.stream_logs:
            threading.Thread(target=self.kubelet.tail, args=(log_path, "%s/%s" % (
                self.name, c.name), c.proc), daemon=True).start()
        return True

    def new_termination_file(self, c):
        """The file a container's terminationMessagePath is bound to, empty
        for each start as the kubelet makes it; None where there are no
        mount namespaces to bind it in (one path on the host cannot be every
        container's)."""
        if self.kubelet.isolation != "namespace":
            return None
        folder = os.path.join(self.dir, "termination")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "%s.%d" % (c.name, c.restarts))
        open(path, "w").close()
        return path

    def reap(self, c):
        if c.proc is None or "running" not in c.state:
            return False
        rc = c.proc.poll()
        if rc is None:
            return False
        self.kubelet.untrack(c.proc)
        code = exit_code(rc)
        self.terminated(c, code, "Completed" if code == 0 else "Error",
                        c.started_at, now_iso(), signal_no=-rc if rc < 0 else None)
        return True

    def stop_all(self, grace):
        """Stops the containers (and any init container still running), then
        the sidecars in reverse order, as the kubelet ends a pod; each step
        gets what is left of `grace`."""
        deadline = time.time() + max(0, grace)
        self.stop([c for c in self.inits + self.containers if not c.sidecar], deadline)
        for c in reversed([c for c in self.inits if c.sidecar]):
            self.stop([c], deadline)

    def stop(self, containers, deadline):
        procs = [c for c in containers if c.proc and "running" in c.state]
        for c in procs:
            self.kubelet.signal(c.proc, signal.SIGTERM)
        while time.time() < deadline and any(c.proc.poll() is None for c in procs):
            time.sleep(0.05)
        for c in procs:
            if c.proc.poll() is None:
                self.kubelet.signal(c.proc, signal.SIGKILL)
        for c in procs:
            try:
                c.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.reap(c)
