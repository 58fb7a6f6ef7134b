#include "ps-server/checkpoint_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>

#include "common/logging.h"

namespace kubeps {

namespace {

constexpr char kOwnerFile[] = "/owner";

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string ReadAll(int fd) {
  std::string text;
  char buffer[512];
  ssize_t n;
  off_t at = 0;
  while ((n = ::pread(fd, buffer, sizeof buffer, at)) > 0) {
    text.append(buffer, static_cast<size_t>(n));
    at += n;
  }
  return text;
}

// Says who holds the folder now, in the file the lock is on, through a
// descriptor of its own: the lock's is read-only where it can be, so that a
// server's life holds no file open for writing (which would keep its volume
// from being remounted read-only).
Status WriteHolder(const std::string& path, const FolderHolder& me) {
  const std::string text = me.Serialize();
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  bool written =
      fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  if (fd >= 0) {
    (void)::fsync(fd);  // for a reader on another node; the lock holds without it
    ::close(fd);
  }
  if (!written) return Status::Error("cannot write " + path + ": " + std::strerror(error));
  return Status::Ok();
}

// The lock file, opened read-only; NFS takes an exclusive lock only on a
// file open for writing (flock there is a byte-range lock), so Take opens
// it again read-write where the lock says EBADF.
int OpenLockFile(const std::string& path, int flags) {
  return ::open(path.c_str(), flags | O_CREAT | O_CLOEXEC, 0600);
}

}  // namespace

FolderHolder FolderHolder::ThisProcess(std::string run_id, std::string job, std::string replica) {
  FolderHolder me;
  me.run_id = std::move(run_id);
  me.job = std::move(job);
  me.replica = std::move(replica);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) me.host = host;
  me.pid = static_cast<long>(::getpid());
  me.since = UtcNow();
  return me;
}

std::string FolderHolder::Describe() const {
  if (run_id.empty() && job.empty() && pid == 0) return "a process that has not said who it is";
  std::string text = (replica.empty() ? "a server" : replica) + " of job " +
                     (job.empty() ? "(unnamed)" : job) + " (run " +
                     (run_id.empty() ? "unnamed" : run_id) + ") on " +
                     (host.empty() ? "an unnamed host" : host) + ", pid " + std::to_string(pid);
  if (!since.empty()) text += ", since " + since;
  return text;
}

std::string FolderHolder::Serialize() const {
  return "run " + run_id + "\njob " + job + "\nreplica " + replica + "\nhost " + host + "\npid " +
         std::to_string(pid) + "\nsince " + since + "\n";
}

FolderHolder FolderHolder::Parse(const std::string& text) {
  FolderHolder holder;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "run") holder.run_id = value;
    if (key == "job") holder.job = value;
    if (key == "replica") holder.replica = value;
    if (key == "host") holder.host = value;
    if (key == "since") holder.since = value;
    if (key == "pid") holder.pid = std::strtol(value.c_str(), nullptr, 10);
  }
  return holder;
}

Status CheckpointFolderLock::Take(const std::string& folder, const FolderHolder& me,
                                  StopToken* stop, std::chrono::milliseconds poll,
                                  std::unique_ptr<CheckpointFolderLock>* out) {
  const std::string path = folder + kOwnerFile;
  bool writable = false;
  int fd = OpenLockFile(path, O_RDONLY);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  auto waited_since = std::chrono::steady_clock::now();
  auto reported = waited_since - kWaitReport;
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EBADF && !writable) {
      writable = true;
      ::close(fd);
      fd = OpenLockFile(path, O_RDWR);
      if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
      continue;
    }
    if (errno != EWOULDBLOCK) {
      KLOG_ERROR << "cannot lock " << path << " (" << std::strerror(errno)
                 << "): nothing keeps another process from writing checkpoints into " << folder
                 << " while this one does";
      out->reset(new CheckpointFolderLock(-1));
      ::close(fd);
      return Status::Ok();
    }
    const FolderHolder holder = FolderHolder::Parse(ReadAll(fd));
    if (!holder.job.empty() && holder.job != me.job) {
      ::close(fd);
      return Status::FailedPrecondition(
          "checkpoint folder " + folder + " is in use by " + holder.Describe() +
          ": two jobs must not share a spec.checkpoint.path; give this one its own");
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - reported >= kWaitReport) {
      reported = now;
      KLOG_INFO << "waiting for " << holder.Describe() << " to let go of checkpoint folder "
                << folder
                << (holder.job.empty() ? ""
                    : holder.run_id == me.run_id
                        ? " (an earlier process of this replica still runs)"
                        : " (an earlier run of this job still runs)")
                << ", for "
                << std::chrono::duration_cast<std::chrono::seconds>(now - waited_since).count()
                << " s so far";
    }
    if (!stop->SleepFor(poll)) {
      ::close(fd);
      return Status::Aborted("stopped while waiting for checkpoint folder " + folder);
    }
  }
  if (Status s = WriteHolder(path, me); !s.ok()) {
    ::close(fd);
    return s;
  }
  out->reset(new CheckpointFolderLock(fd));
  return Status::Ok();
}

CheckpointFolderLock::~CheckpointFolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kubeps
