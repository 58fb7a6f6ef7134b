#include "ps-server/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "common/logging.h"
#include "ps-server/checkpoint_format.h"

namespace kubeps {

namespace {

std::atomic<uint64_t> g_folders_not_flushed{0};

// A folder this process may not open to read, and a file system with no
// fsync for folders (EINVAL, EROFS; EOPNOTSUPP from some FUSE daemons): it
// keeps its entries as it keeps them, and that is no failure to report.
bool CannotSyncFolders(int error) {
  return error == EACCES || error == EISDIR || error == EBADF || error == EINVAL ||
         error == EROFS || error == EOPNOTSUPP || error == ENOSYS;
}

}  // namespace

int SyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return CannotSyncFolders(errno) ? 0 : errno;
  const int error = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return CannotSyncFolders(error) ? 0 : error;
}

Status ReplaceDurably(const std::string& dir, const std::string& path,
                      const std::function<bool(google::protobuf::io::ZeroCopyOutputStream*)>& write,
                      const std::function<Status()>& before_rename) {
  const std::string tmp = path + kTemporarySuffix;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot create " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what, int error) {
    ::unlink(tmp.c_str());
    return Status::Error("cannot " + what + " " + tmp + ": " +
                         (error != 0 ? std::strerror(error) : "the contents do not serialize"));
  };
  bool written;
  int error;
  {  // the stream is gone before the file is closed: it would flush into a closed descriptor
    google::protobuf::io::FileOutputStream out(fd, kCheckpointFileBlock);
    written = write(&out) && out.Flush();
    error = out.GetErrno();
  }
  if (!written) {
    ::close(fd);
    return fail("write", error);
  }
  error = ::fsync(fd) == 0 ? 0 : errno;
  if (::close(fd) != 0 && error == 0) error = errno;  // closed either way: no descriptor leaks
  if (error != 0) return fail("flush", error);
  if (Status s = before_rename(); !s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename", errno);
  // The new file is in place and whole, and stays so while this node runs;
  // an I/O error here may lose its entry in a crash of the node. Said
  // loudly, not failed: the caller's next step (pruning older checkpoints,
  // going on with the job) is right either way, and a failure would only
  // stop a job whose disk still holds what it wrote.
  if (const int folder_error = SyncFolder(dir); folder_error != 0) {
    g_folders_not_flushed.fetch_add(1, std::memory_order_relaxed);
    KLOG_ERROR << "replaced " << path << " but cannot flush folder " << dir << ": "
               << std::strerror(folder_error)
               << "; the new file may not survive a crash of this node (a failing disk?)";
  }
  return Status::Ok();
}

Status ReplaceDurably(const std::string& dir, const std::string& path, const std::string& text) {
  return ReplaceDurably(dir, path, [&](google::protobuf::io::ZeroCopyOutputStream* out) {
    google::protobuf::io::CodedOutputStream coded(out);
    coded.WriteString(text);
    return !coded.HadError();
  });
}

uint64_t FoldersNotFlushed() { return g_folders_not_flushed.load(std::memory_order_relaxed); }

Status ReadWholeFile(const std::string& path, std::string* contents) {
  contents->clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no file " + path);
    return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  }
  char buffer[512];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) contents->append(buffer, n);
  const int error = errno;
  ::close(fd);
  if (n < 0) return Status::Error("cannot read " + path + ": " + std::strerror(error));
  return Status::Ok();
}

}  // namespace kubeps
