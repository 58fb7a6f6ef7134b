#include "ps-server/checkpoint_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>

#include "common/logging.h"
#include "ps-server/durable_file.h"

namespace kubeps {

namespace {

// The lock is on a file never rewritten; the record beside it is replaced
// whole (a rename), so a reader never sees half of one.
constexpr char kLockFile[] = "/owner.lock";
constexpr char kRecordFile[] = "/owner";
constexpr char kEndMark[] = "end";

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// Read through a descriptor of its own each time: NFS shows a file as its
// last close left it to the next open, not to a descriptor kept open.
FolderHolder ReadRecord(const std::string& folder) {
  std::string text;
  if (!ReadWholeFile(folder + kRecordFile, &text).ok()) return FolderHolder{};
  return FolderHolder::Parse(text);
}

// The lock file, opened read-only, so that a server's life holds no file
// of the volume open for writing (which would keep it from being remounted
// read-only). NFS takes an exclusive lock only on a file open for writing
// (its flock is a byte-range lock), and says EBADF; other file systems may
// say EACCES, EPERM or EINVAL: then the file is opened again read-write.
int OpenLockFile(const std::string& path, int flags) {
  return ::open(path.c_str(), flags | O_CREAT | O_CLOEXEC, 0600);
}

bool MayNeedWriting(int error) {
  return error == EBADF || error == EACCES || error == EPERM || error == EINVAL;
}

// The file system has no locks (NFSv3 without lockd, some FUSE file systems).
bool LocksUnsupported(int error) {
  return error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL;
}

uint64_t RandomNonce() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

FolderHolder FolderHolder::ThisProcess(std::string run_id, std::string job, std::string replica,
                                       std::string node) {
  FolderHolder me;
  me.node = std::move(node);
  me.run_id = std::move(run_id);
  me.job = std::move(job);
  me.replica = std::move(replica);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) me.host = host;
  me.pid = static_cast<long>(::getpid());
  me.since = UtcNow();
  me.nonce = RandomNonce();
  me.complete = true;
  return me;
}

std::string FolderHolder::Describe() const {
  if (!complete) return "a process that has not said who it is";
  std::string text = replica + " of job " + job + " (run " + (run_id.empty() ? "unnamed" : run_id) +
                     ") on " + host + (node.empty() ? "" : " (node " + node + ")") + ", pid " +
                     std::to_string(pid);
  if (!since.empty()) text += ", since " + since;
  return text;
}

std::string FolderHolder::Serialize() const {
  return "run " + run_id + "\njob " + job + "\nreplica " + replica + "\nhost " + host + "\nnode " +
         node + "\npid " + std::to_string(pid) + "\nsince " + since + "\nnonce " +
         std::to_string(nonce) + "\n" + kEndMark + "\n";
}

FolderHolder FolderHolder::Parse(const std::string& text) {
  FolderHolder holder;
  std::istringstream lines(text);
  std::string line;
  const char* const keys[] = {"run", "job", "replica", "host", "node", "pid", "since", "nonce"};
  unsigned seen = 0;  // a bit per key: each once
  while (std::getline(lines, line)) {
    if (line == kEndMark) {
      holder.complete = seen == (1u << std::size(keys)) - 1 && !lines.eof();  // and its newline
      break;
    }
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    for (unsigned k = 0; k < std::size(keys); ++k) {
      if (key != keys[k]) continue;
      if (seen & (1u << k)) return FolderHolder{};  // twice: not a record this code wrote
      seen |= 1u << k;
    }
    if (key == "run") holder.run_id = value;
    if (key == "job") holder.job = value;
    if (key == "replica") holder.replica = value;
    if (key == "host") holder.host = value;
    if (key == "node") holder.node = value;
    if (key == "since") holder.since = value;
    if (key == "pid") holder.pid = std::strtol(value.c_str(), nullptr, 10);
    if (key == "nonce") holder.nonce = std::strtoull(value.c_str(), nullptr, 10);
  }
  return holder;
}

Status CheckpointFolderLock::Take(const std::string& folder, const FolderHolder& me,
                                  StopToken* stop, const FolderLockWait& waiting,
                                  std::unique_ptr<CheckpointFolderLock>* out) {
  using Clock = std::chrono::steady_clock;
  const std::string path = folder + kLockFile;
  bool writable = false;
  int fd = OpenLockFile(path, O_RDONLY);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  const auto start = Clock::now();
  auto reported = start - kWaitReport;
  std::optional<Clock::time_point> other_run_since;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EINTR) continue;
    if (MayNeedWriting(error) && !writable) {
      writable = true;
      ::close(fd);
      fd = OpenLockFile(path, O_RDWR);
      if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
      continue;
    }
    if (LocksUnsupported(error)) {
      KLOG_ERROR << "cannot lock " << path << " (" << std::strerror(error)
                 << "): this file system has no locks; only the record in " << folder << kRecordFile
                 << " keeps a second process from writing checkpoints here";
      ::close(fd);
      fd = -1;
      break;
    }
    if (error != EWOULDBLOCK) {
      ::close(fd);
      // An I/O error, a stale mount: it may pass.
      return Status::Unavailable("cannot lock " + path + ": " + std::strerror(error));
    }
    const FolderHolder holder = ReadRecord(folder);
    const auto now = Clock::now();
    const bool other_run = holder.complete && holder.run_id != me.run_id;
    if (other_run && !other_run_since) other_run_since = now;
    if (other_run && now - *other_run_since >= waiting.other_run_grace) {
      ::close(fd);
      return Status::AlreadyExists(
          "checkpoint folder " + folder + " is in use by " + holder.Describe() +
          (holder.job == me.job
               ? ", an earlier run of this job (a deleted job's pod may still be stopping; run "
                 "this job again once it is gone)"
               : ": two jobs must not share a spec.checkpoint.path; give this one its own"));
    }
    if (waiting.on_wait)
      waiting.on_wait(std::chrono::duration_cast<std::chrono::milliseconds>(now - start));
    if (now - reported >= kWaitReport) {
      reported = now;
      const char* why = !holder.complete       ? ""
                        : !other_run           ? " (an earlier process of this replica)"
                        : holder.job == me.job ? " (an earlier run of this job; it may be stopping)"
                                               : " (another job's; it may be stopping)";
      KLOG_INFO << "waiting for " << holder.Describe() << why << " to let go of checkpoint folder "
                << folder << ", for "
                << std::chrono::duration_cast<std::chrono::seconds>(now - start).count()
                << " s so far";
    }
    if (!stop->SleepFor(waiting.poll)) {
      ::close(fd);
      return Status::Aborted("stopped while waiting for checkpoint folder " + folder);
    }
  }
  if (Status s = ReplaceDurably(folder, folder + kRecordFile, me.Serialize()); !s.ok()) {
    if (fd >= 0) ::close(fd);
    return s;
  }
  out->reset(new CheckpointFolderLock(folder, fd, me.nonce));
  return Status::Ok();
}

Status CheckpointFolderLock::CheckStillOurs() const {
  const FolderHolder holder = ReadRecord(folder_);
  if (!holder.complete || holder.nonce == nonce_) return Status::Ok();
  return Status::FailedPrecondition("checkpoint folder " + folder_ + " was taken over by " +
                                    holder.Describe() + "; this process stops without changing it");
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kubeps
