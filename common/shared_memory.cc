#include "common/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>

namespace kubeps {
namespace {

constexpr char kPrefix[] = "kubeps-";
constexpr uint64_t kMagic = 0x4d48535350425543ULL;  // "CUBPSSHM", little-endian

// What the segment's first bytes hold.
struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  uint64_t size;  // of the whole mapping
};
static_assert(sizeof(SegmentHeader) <= kSharedAlignment);

bool ValidName(const std::string& name) {
  if (name.size() > 200 || name.rfind(kPrefix, 0) != 0) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

std::string Sanitized(const std::string& owner) {
  std::string out;
  for (char c : owner) {
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ? c : '-';
  }
  return out.substr(0, 100);
}

Status Errno(const std::string& what, const std::string& name) {
  return Status::Error(what + " /dev/shm/" + name + ": " + std::strerror(errno));
}

// The creator holds a shared lock on its file for as long as it lives; a
// file nobody holds is a dead process's leftover (whatever its PID
// namespace: the lock is on the file). But a creator can only lock its file
// once it exists: between the two the file is empty, and a worker starting
// beside it at that moment would take it for a leftover and delete it (and
// its servers could not map it). So an empty file is a leftover only once
// it is a minute old.
constexpr time_t kEmptyFileGraceSeconds = 60;

bool BeingCreated(const struct stat& st) {
  return st.st_size == 0 && ::time(nullptr) - st.st_mtime < kEmptyFileGraceSeconds;
}

void RemoveLeftovers() {
  DIR* listing = ::opendir("/dev/shm");
  if (!listing) return;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (!ValidName(name)) continue;
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && !BeingCreated(st) &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ::shm_unlink(name.c_str());
    }
    ::close(fd);
  }
  ::closedir(listing);
}

}  // namespace

Status SharedSegment::Create(const std::string& owner, uint64_t bytes,
                             std::unique_ptr<SharedSegment>* out) {
  RemoveLeftovers();
  auto segment = std::unique_ptr<SharedSegment>(new SharedSegment());
  std::random_device random;
  segment->nonce_ = (static_cast<uint64_t>(random()) << 32) ^ random();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(segment->nonce_));
  segment->name_ = kPrefix + Sanitized(owner) + "-" + std::to_string(::getpid()) + "-" + hex;
  segment->size_ =
      FirstRegion() + (bytes + kSharedAlignment - 1) / kSharedAlignment * kSharedAlignment;
  segment->owner_ = true;
  const int fd = ::shm_open(segment->name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Errno("cannot create", segment->name_);
  // The descriptor stays open while the segment lives: it holds the lock,
  // taken before anything else so that no one takes the file for a leftover.
  segment->fd_ = fd;
  int error = ::flock(fd, LOCK_SH) == 0 ? 0 : errno;
  // Reserved now: a full /dev/shm is an error here, not a SIGBUS later.
  if (error == 0) error = ::posix_fallocate(fd, 0, static_cast<off_t>(segment->size_));
  void* base = MAP_FAILED;
  if (error == 0) {
    base = ::mmap(nullptr, segment->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = errno;
  }
  if (error != 0) {
    if (base != MAP_FAILED) ::munmap(base, segment->size_);
    errno = error;
    return Errno("cannot reserve " + std::to_string(segment->size_) + " bytes of", segment->name_);
  }
  segment->base_ = static_cast<char*>(base);
  auto* header = reinterpret_cast<SegmentHeader*>(segment->base_);
  header->magic = kMagic;
  header->nonce = segment->nonce_;
  header->size = segment->size_;
  *out = std::move(segment);
  return Status::Ok();
}

namespace {

// Opens /dev/shm/`name` if it is a kubeps segment of this uid whose header
// holds `nonce`: its descriptor (closed by the caller) and size, or an
// error naming the file.
Status OpenSegment(const std::string& name, uint64_t nonce, int flags, int* fd, uint64_t* size) {
  if (!ValidName(name)) {
    return Status::InvalidArgument("shared memory segment \"" + name +
                                   "\" is not a kubeps segment's name");
  }
  *fd = ::shm_open(name.c_str(), flags, 0);
  // Gone: its creator freed it (a server's buffer, replaced at a rollback).
  if (*fd < 0 && errno == ENOENT) {
    return Status::Gone("cannot open /dev/shm/" + name + ": it no longer exists");
  }
  if (*fd < 0) return Errno("cannot open", name);
  struct stat st {};
  if (::fstat(*fd, &st) != 0) return Errno("cannot stat", name);
  *size = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || *size < SharedSegment::FirstRegion()) {
    return Status::InvalidArgument("/dev/shm/" + name +
                                   " is not a segment of this user's kubeps processes");
  }
  SegmentHeader header{};
  if (::pread(*fd, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
      header.magic != kMagic || header.nonce != nonce || header.size != *size) {
    return Status::InvalidArgument("/dev/shm/" + name +
                                   " is not the segment the request names (another nonce)");
  }
  return Status::Ok();
}

}  // namespace

Status SharedSegment::Attach(const std::string& name, uint64_t nonce,
                             std::unique_ptr<SharedSegment>* out) {
  auto segment = std::unique_ptr<SharedSegment>(new SharedSegment());
  segment->name_ = name;
  segment->nonce_ = nonce;
  if (Status s = OpenSegment(name, nonce, O_RDWR, &segment->fd_, &segment->size_); !s.ok()) {
    return s;
  }
  void* base = ::mmap(nullptr, segment->size_, PROT_READ | PROT_WRITE, MAP_SHARED, segment->fd_, 0);
  if (base == MAP_FAILED) return Errno("cannot map", name);
  segment->base_ = static_cast<char*>(base);
  *out = std::move(segment);
  return Status::Ok();
}

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

Status MapPrivately(const std::string& name, uint64_t nonce, uint64_t offset, uint64_t bytes,
                    void* at) {
  const uint64_t page = PageSize();
  if (offset % page != 0 || reinterpret_cast<uintptr_t>(at) % page != 0 ||
      offset < SharedSegment::FirstRegion()) {
    return Status::InvalidArgument("/dev/shm/" + name + ": offset " + std::to_string(offset) +
                                   " is not a page boundary after the header");
  }
  int fd = -1;
  uint64_t size = 0;
  Status status = OpenSegment(name, nonce, O_RDONLY, &fd, &size);
  if (status.ok() && (bytes > size || offset > size - bytes)) {
    status = Status::InvalidArgument("/dev/shm/" + name + " holds no " + std::to_string(bytes) +
                                     " bytes at " + std::to_string(offset));
  }
  if (status.ok()) {
    const uint64_t length = (bytes + page - 1) / page * page;
    if (::mmap(at, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd,
               static_cast<off_t>(offset)) == MAP_FAILED) {
      status = Errno("cannot map", name);
      // A failed MAP_FIXED may have unmapped the range: fill it again, so
      // that no other mapping of this process can land there.
      ::mmap(at, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    }
  }
  if (fd >= 0) ::close(fd);
  return status;
}

SharedSegment::~SharedSegment() {
  if (base_) ::munmap(base_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

bool SharedSegment::Holds(uint64_t offset, uint64_t bytes) const {
  return offset >= FirstRegion() && offset <= size_ && bytes <= size_ - offset;
}

namespace landing {
namespace {

// A writer that died holding the mutex left the region as it was: its
// ticket still says not written, so the next writer writes it whole.
void Lock(LandingHeader* header) {
  if (::pthread_mutex_lock(&header->mutex) == EOWNERDEAD) {
    ::pthread_mutex_consistent(&header->mutex);
  }
}

}  // namespace

void Init(LandingHeader* header) {
  pthread_mutexattr_t attributes;
  ::pthread_mutexattr_init(&attributes);
  ::pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  ::pthread_mutex_init(&header->mutex, &attributes);
  ::pthread_mutexattr_destroy(&attributes);
  header->ticket.store(0, std::memory_order_relaxed);
  header->version = 0;
}

void Open(LandingHeader* header, uint64_t seq) {
  Lock(header);
  header->ticket.store(seq * 2, std::memory_order_release);
  ::pthread_mutex_unlock(&header->mutex);
}

Claim Begin(LandingHeader* header, uint64_t seq) {
  Lock(header);
  const uint64_t ticket = header->ticket.load(std::memory_order_relaxed);
  if (ticket == seq * 2) return Claim::kWrite;  // the mutex stays held until Done
  ::pthread_mutex_unlock(&header->mutex);
  return ticket == seq * 2 + 1 ? Claim::kWrittenToo : Claim::kSuperseded;
}

void Done(LandingHeader* header, uint64_t version) {
  header->version = version;
  header->ticket.store(header->ticket.load(std::memory_order_relaxed) | 1,
                       std::memory_order_release);
  ::pthread_mutex_unlock(&header->mutex);
}

bool Landed(const LandingHeader* header, uint64_t seq, uint64_t* version) {
  if (header->ticket.load(std::memory_order_acquire) != seq * 2 + 1) return false;
  *version = header->version;
  return true;
}

}  // namespace landing
}  // namespace kubeps
