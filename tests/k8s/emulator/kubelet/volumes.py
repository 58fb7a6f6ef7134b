"""Pod volumes: secret, configMap and downwardAPI files, emptyDir folders,
hostPath and bound PersistentVolumeClaims (a folder per claim, shared by the
pods that mount it), written under the pod's folder; the mounts of each
container; and the mount points and parent folders the kubelet creates on
the host and removes again.

A volume that cannot be set up (a Secret or ConfigMap that does not exist
and is not optional, a key its `items` name that it lacks) raises
MountError: the pod worker keeps the pod Pending, its containers waiting in
ContainerCreating, records a FailedMount Event and tries again, as the
kubelet's volume manager does. A claim that does not exist or is not bound
never gets here: the scheduler leaves such a pod unschedulable.

A downwardAPI file of all labels or annotations has one key="value" line
each, sorted, the value quoted as Go quotes it, no newline after the last;
one of a single label or annotation (metadata.annotations['KEY']) holds its
value alone ("" when it is missing).

Secret, configMap and downwardAPI files are written as the kubelet's
atomic writer does: into a timestamped folder `..<time>`, which the link
`..data` names, with a link `<key> -> ..data/<key>` for each file. With the
pod's fsGroup, they get that group and read access for it (the kubelet ORs
0440 into a read-only volume's modes). While the pod runs, every
--volume-sync seconds the files of its Secret and ConfigMap volumes are
written again when their object changed, and `..data` is switched to the
new folder in one rename: a reader sees the old files or the new, never a
mix. The downwardAPI files are rewritten so, at once, when the pod's labels
or annotations change (the worker's next turn after the watch event).
(subPath mounts see no update, as with a real kubelet.)

A mixin of PodWorker (pod_worker.py).
"""
import base64
import datetime
import os
import shutil
import time

from . import mount_points
from .containers import ConfigError
from ..client import ApiError


class MountError(Exception):
    """A volume that cannot be set up yet; the message is the kubelet's."""

    def __init__(self, volume, why):
        super().__init__('MountVolume.SetUp failed for volume "%s" : %s' % (volume, why))


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
               "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(s):
    """`s` as Go's strconv.Quote (%q) writes it: printable characters as
    they are, the rest escaped."""
    out = []
    for ch in s:
        n = ord(ch)
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif n < 0x20 or n == 0x7f:
            out.append("\\x%02x" % n)
        elif ch == " " or ch.isprintable():
            out.append(ch)
        elif n < 0x10000:
            out.append("\\u%04x" % n)
        else:
            out.append("\\U%08x" % n)
    return '"' + "".join(out) + '"'


def format_map(m):
    """A downwardAPI file of all labels or annotations (fieldpath.FormatMap):
    key="value" lines in key order, the value quoted as Go's %q, no newline
    after the last."""
    return "\n".join("%s=%s" % (k, go_quote(v)) for k, v in sorted(m.items()))


class PodVolumes:
    def volume_dir(self, name):
        return os.path.join(self.dir, "volumes", name)

    def claim_dir(self, claim):
        """A claim's storage: the node's, so it outlives the pods that mount it."""
        return os.path.join(self.kubelet.state_dir, "claims", "%s_%s" % (self.ns, claim))

    def prepare_volumes(self):
        self.volume_files = {}
        for v in self.pod["spec"].get("volumes", []):
            name = v["name"]
            path = self.volume_dir(name)
            if "hostPath" in v:
                continue
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"].get("claimName", "")
                os.makedirs(self.claim_dir(claim), exist_ok=True)
                continue
            os.makedirs(path, exist_ok=True)
            files = self.volume_contents(v)
            if files is not None:
                self.write_atomically(path, files)
                self.volume_files[name] = files
        self.volumes_synced_at = time.time()

    def volume_contents(self, v):
        """{relative path: (bytes, mode)} of a Secret, ConfigMap or downward
        API volume; None for other kinds and for an optional object that is
        missing."""
        name = v["name"]
        files = {}
        if "secret" in v or "configMap" in v:
            kind = "secrets" if "secret" in v else "configmaps"
            src = v.get("secret") or v.get("configMap")
            ref = src.get("secretName") if kind == "secrets" else src.get("name")
            try:
                obj = self.get_object(kind, ref or "", src.get("optional"))
            except ConfigError:
                raise MountError(name, '%s "%s" not found' % (kind[:-1], ref or ""))
            if obj is None:
                return None
            data = dict(obj.get("data") or {})
            if kind == "secrets":
                data = {k: base64.b64decode(x) for k, x in data.items()}
            else:
                data = {k: x.encode() for k, x in data.items()}
                for k, x in (obj.get("binaryData") or {}).items():
                    data[k] = base64.b64decode(x)
            default_mode = src.get("defaultMode", 0o644)
            items = src.get("items")
            if items:
                for it in items:
                    if it["key"] not in data:
                        if src.get("optional"):
                            continue
                        raise MountError(name, "%s references non-existent %s key: %s" % (
                            kind[:-1], "secret" if kind == "secrets" else "config",
                            it["key"]))
                    files[it["path"]] = (data[it["key"]], it.get("mode", default_mode))
            else:
                files = {k: (x, default_mode) for k, x in data.items()}
        elif "downwardAPI" in v:
            default_mode = v["downwardAPI"].get("defaultMode", 0o644)
            pod = self.pod
            for it in v["downwardAPI"].get("items", []):
                fp = (it.get("fieldRef") or {}).get("fieldPath", "")
                if fp in ("metadata.labels", "metadata.annotations"):
                    text = format_map(pod["metadata"].get(fp.split(".")[1]) or {})
                else:   # one label or annotation (metadata.labels['k']): the value alone
                    text = self.field_ref(fp, pod)
                files[it["path"]] = (text.encode(), it.get("mode", default_mode))
        else:
            return None
        return files

    def write_atomically(self, path, files):
        """The kubelet's atomic writer: a new timestamped folder, then
        `..data` renamed onto a link to it, then the old folder removed."""
        fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        stamp = "..%s.%d" % (datetime.datetime.utcnow().strftime("%Y_%m_%d_%H_%M_%S.%f"),
                             os.getpid())
        new_dir = os.path.join(path, stamp)
        os.makedirs(new_dir)
        for rel, (content, mode) in files.items():
            target = os.path.join(new_dir, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(content)
            if fs_group is not None:
                os.chown(target, -1, int(fs_group))
                mode |= 0o440
            os.chmod(target, mode)
        data_link = os.path.join(path, "..data")
        old_dir = os.readlink(data_link) if os.path.islink(data_link) else None
        tmp_link = os.path.join(path, "..data_tmp")
        if os.path.lexists(tmp_link):
            os.unlink(tmp_link)
        os.symlink(stamp, tmp_link)
        os.rename(tmp_link, data_link)
        for rel in files:
            top = rel.split("/")[0]
            link = os.path.join(path, top)
            if not os.path.lexists(link):
                os.symlink(os.path.join("..data", top), link)
        if old_dir:
            shutil.rmtree(os.path.join(path, old_dir), ignore_errors=True)

    def sync_downward_api(self):
        """A running pod's downwardAPI files follow its labels and
        annotations as soon as the kubelet sees the pod change (a pod update
        makes the kubelet's volume manager remount its downwardAPI volumes)."""
        pod = self.pod
        if pod is getattr(self, "downward_api_of", None):
            return
        self.downward_api_of = pod
        for v in pod["spec"].get("volumes", []):
            if "downwardAPI" not in v:
                continue
            files = self.volume_contents(v)
            if files != self.volume_files.get(v["name"]):
                self.write_atomically(self.volume_dir(v["name"]), files)
                self.volume_files[v["name"]] = files

    def sync_volumes(self):
        """A running pod's Secret and ConfigMap files follow their objects,
        --volume-sync seconds behind at most; its downwardAPI files, its
        metadata at once."""
        self.sync_downward_api()
        if time.time() - getattr(self, "volumes_synced_at", 0) < self.kubelet.volume_sync:
            return
        self.volumes_synced_at = time.time()
        for v in self.pod["spec"].get("volumes", []):
            if "secret" not in v and "configMap" not in v:
                continue
            try:
                files = self.volume_contents(v)
            except (MountError, ConfigError, ApiError, OSError):
                continue    # a deleted object: the kubelet keeps the last files
            if files is not None and files != self.volume_files.get(v["name"]):
                self.write_atomically(self.volume_dir(v["name"]), files)
                self.volume_files[v["name"]] = files

    def mounts(self, c):
        """[(source, mountPath, readOnly)] of the container."""
        out = []
        vols = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for m in c.spec.get("volumeMounts", []):
            v = vols.get(m["name"])
            if v is None:
                raise ConfigError("CreateContainerConfigError",
                                  "volume %s not found in the pod spec" % m["name"])
            if "hostPath" in v:
                src = v["hostPath"]["path"]
            elif "persistentVolumeClaim" in v:
                src = self.claim_dir(v["persistentVolumeClaim"].get("claimName", ""))
            else:
                src = self.volume_dir(m["name"])
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
            out.append((src, m["mountPath"], bool(m.get("readOnly"))))
        return out

    def make_parents(self, path):
        """Creates the missing parents of `path` (under mount_points.held()),
        which go again with the last mount point in them."""
        missing = []
        parent = os.path.dirname(path)
        while parent and not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            os.mkdir(d)
            mount_points.made(d)

    def make_target(self, src, dst):
        """The mount point on the host for a bind mount (an empty folder or
        file), claimed for this pod: it goes when no pod claims it any more
        (mount_points.py)."""
        with mount_points.held():
            if not os.path.lexists(dst):
                self.make_parents(dst)
                if os.path.isdir(src):
                    os.mkdir(dst)
                else:
                    open(dst, "a").close()
                mount_points.made(dst)
            self.claim_mount_point(dst)

    def claim_mount_point(self, path):
        """Records that this pod uses `path` (under mount_points.held())."""
        mount_points.claim(path, self.uid)
        self.links.append(path)

    def release_mount_points(self):
        """The pod is gone: its mount points go unless another pod claims them."""
        with mount_points.held():
            mount_points.release(self.uid)
            for link in reversed(self.links):
                mount_points.remove_if_unused(link)
