#include "common/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

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

constexpr uint64_t kOpen = 0, kWriting = 1, kDone = 2;
uint64_t Ticket(uint64_t seq, uint64_t state) { return seq * 4 + state; }
uint64_t SeqOf(uint64_t ticket) { return ticket / 4; }
uint64_t StateOf(uint64_t ticket) { return ticket % 4; }

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
// namespace: the lock is on the file).
void RemoveLeftovers() {
  DIR* listing = ::opendir("/dev/shm");
  if (!listing) return;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (!ValidName(name)) continue;
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_uid == ::geteuid() && ::flock(fd, LOCK_EX | LOCK_NB) == 0) {
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

Status SharedSegment::Attach(const std::string& name, uint64_t nonce,
                             std::unique_ptr<SharedSegment>* out) {
  if (!ValidName(name)) {
    return Status::InvalidArgument("shared memory segment \"" + name +
                                   "\" is not a kubeps segment's name");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno("cannot open", name);
  auto segment = std::unique_ptr<SharedSegment>(new SharedSegment());
  segment->name_ = name;
  segment->fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Errno("cannot stat", name);
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      static_cast<uint64_t>(st.st_size) < FirstRegion()) {
    return Status::InvalidArgument("/dev/shm/" + name +
                                   " is not a segment of this user's kubeps processes");
  }
  segment->size_ = static_cast<uint64_t>(st.st_size);
  void* base = ::mmap(nullptr, segment->size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno("cannot map", name);
  segment->base_ = static_cast<char*>(base);
  const auto* header = reinterpret_cast<const SegmentHeader*>(segment->base_);
  if (header->magic != kMagic || header->nonce != nonce || header->size != segment->size_) {
    return Status::InvalidArgument("/dev/shm/" + name +
                                   " is not the segment the request names (another nonce)");
  }
  segment->nonce_ = nonce;
  *out = std::move(segment);
  return Status::Ok();
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

void Open(LandingHeader* header, uint64_t seq) {
  uint64_t current = header->ticket.load(std::memory_order_acquire);
  for (;;) {
    if (StateOf(current) == kWriting) {
      std::this_thread::yield();
      current = header->ticket.load(std::memory_order_acquire);
      continue;
    }
    if (header->ticket.compare_exchange_weak(current, Ticket(seq, kOpen),
                                             std::memory_order_acq_rel)) {
      return;
    }
  }
}

Claim Begin(LandingHeader* header, uint64_t seq) {
  uint64_t expected = Ticket(seq, kOpen);
  if (header->ticket.compare_exchange_strong(expected, Ticket(seq, kWriting),
                                             std::memory_order_acq_rel)) {
    return Claim::kWrite;
  }
  for (;;) {  // `expected` holds what is there now
    if (SeqOf(expected) != seq) return Claim::kSuperseded;
    if (StateOf(expected) == kDone) return Claim::kWrittenToo;
    std::this_thread::yield();  // another handling is writing: one memcpy
    expected = header->ticket.load(std::memory_order_acquire);
  }
}

void Done(LandingHeader* header, uint64_t version) {
  const uint64_t seq = SeqOf(header->ticket.load(std::memory_order_relaxed));
  header->version = version;
  header->ticket.store(Ticket(seq, kDone), std::memory_order_release);
}

bool Landed(const LandingHeader* header, uint64_t seq, uint64_t* version) {
  if (header->ticket.load(std::memory_order_acquire) != Ticket(seq, kDone)) return false;
  *version = header->version;
  return true;
}

}  // namespace landing
}  // namespace kubeps
