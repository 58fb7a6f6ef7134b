#include "worker-agent/sidecar/shared_tensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

namespace kubeps::sidecar {
namespace {

constexpr const char* kPrefix = "tensors-";
constexpr const char* kSuffix = ".shm";

uint64_t AlignUp(uint64_t n) {
  return (n + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

std::string RandomFileName() {
  std::random_device random;
  char name[64];
  std::snprintf(name, sizeof name, "%s%08x%08x%s", kPrefix, random(), random(), kSuffix);
  return name;
}

bool IsSessionFile(const std::string& name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  return name.size() > prefix.size() + suffix.size() &&
         name.compare(0, prefix.size(), prefix) == 0 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Makes a new session file in `dir` under a random name with `make` (true on
// success; errno EEXIST: the name is taken, draw another) and names it in
// *file_name and *path; `what` says what failed.
Status MakeUnderFreeName(const std::string& dir, const std::string& what,
                         const std::function<bool(const std::string& path)>& make,
                         std::string* file_name, std::string* path) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    *file_name = RandomFileName();
    *path = dir + "/" + *file_name;
    if (make(*path)) return Status::Ok();
    if (errno != EEXIST) return Status::Error(Errno(what + " " + *path));
  }
  return Status::Error("cannot find a free file name in " + dir);
}

}  // namespace

std::vector<TensorRegion> LayOutRegions(const std::vector<uint64_t>& numels, uint64_t* file_bytes) {
  std::vector<TensorRegion> regions(numels.size());
  uint64_t offset = 0;
  for (size_t k = 0; k < numels.size(); ++k) {
    regions[k].numel = numels[k];
    regions[k].values_offset = offset;
    offset = AlignUp(offset + numels[k] * sizeof(float));
  }
  for (size_t k = 0; k < numels.size(); ++k) {
    regions[k].grads_offset = offset;
    offset = AlignUp(offset + numels[k] * sizeof(float));
  }
  *file_bytes = offset;
  return regions;
}

Status SharedTensors::Create(const std::string& dir, const std::vector<uint64_t>& numels,
                             std::unique_ptr<SharedTensors>* out) {
  std::unique_ptr<SharedTensors> tensors(new SharedTensors());
  tensors->regions_ = LayOutRegions(numels, &tensors->bytes_);
  int fd = -1;
  auto create = [&fd](const std::string& path) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    return fd >= 0;
  };
  if (Status s =
          MakeUnderFreeName(dir, "cannot create", create, &tensors->file_name_, &tensors->path_);
      !s.ok()) {
    return s;
  }
  const off_t size = static_cast<off_t>(tensors->bytes_);
  int error = ::ftruncate(fd, size) == 0 ? 0 : errno;
  if (error == 0) error = ::posix_fallocate(fd, 0, size);
  if (error == 0) {
    void* base = ::mmap(nullptr, tensors->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      error = errno;
    } else {
      tensors->base_ = static_cast<char*>(base);
    }
  }
  ::close(fd);  // the mapping keeps the file's memory
  tensors->mapped_ = tensors->base_ != nullptr;
  if (error != 0) {
    ::unlink(tensors->path_.c_str());
    return Status::Error("cannot reserve " + std::to_string(tensors->bytes_) +
                         " bytes of shared memory in " + tensors->path_ + ": " +
                         std::strerror(error) + " (is the volume's size limit too small?)");
  }
  *out = std::move(tensors);
  return Status::Ok();
}

Status SharedTensors::Link(const std::string& dir, const SegmentFile& segment,
                           std::vector<TensorRegion> regions, std::unique_ptr<SharedTensors>* out) {
  std::unique_ptr<SharedTensors> tensors(new SharedTensors());
  tensors->regions_ = std::move(regions);
  tensors->bytes_ = segment.bytes;
  tensors->base_ = segment.base;
  auto link = [&segment](const std::string& path) {
    return ::symlink(segment.path.c_str(), path.c_str()) == 0;
  };
  if (Status s = MakeUnderFreeName(dir, "cannot link " + segment.path + " as", link,
                                   &tensors->file_name_, &tensors->path_);
      !s.ok()) {
    return s;
  }
  *out = std::move(tensors);
  return Status::Ok();
}

SharedTensors::~SharedTensors() {
  if (mapped_) ::munmap(base_, bytes_);
  ::unlink(path_.c_str());
}

float* SharedTensors::values(size_t key) const {
  return reinterpret_cast<float*>(base_ + regions_.at(key).values_offset);
}

float* SharedTensors::grads(size_t key) const {
  return reinterpret_cast<float*>(base_ + regions_.at(key).grads_offset);
}

int SharedTensors::RemoveLeftovers(const std::string& dir) {
  DIR* listing = ::opendir(dir.c_str());
  if (!listing) return 0;
  int removed = 0;
  while (const dirent* entry = ::readdir(listing)) {
    if (IsSessionFile(entry->d_name) && ::unlink((dir + "/" + entry->d_name).c_str()) == 0)
      ++removed;
  }
  ::closedir(listing);
  return removed;
}

}  // namespace kubeps::sidecar
