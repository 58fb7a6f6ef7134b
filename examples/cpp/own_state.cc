#include "own_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace example {

namespace {

constexpr char kPrefix[] = "step-";
constexpr char kSuffix[] = ".state";

std::string Failed(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Writes all of `bytes`, going on after a short write or a signal.
bool WriteAll(int fd, const char* bytes, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// A rename or a removal in `folder` outlives a crash of the node only once
// the folder itself is synced.
bool SyncFolder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

}  // namespace

void MomentumStep(float learning_rate, float momentum, const float* mean, float* velocity, float* w,
                  size_t n) {
  for (size_t i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] + mean[i];
    w[i] -= learning_rate * velocity[i];
  }
}

StateFiles::StateFiles(std::string folder, std::vector<StateRegion> regions, int kept)
    : folder_(std::move(folder)), regions_(std::move(regions)), kept_(std::max(kept, 1)) {}

bool StateFiles::Open(std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(folder_, ec);
  if (ec) {
    *error = "cannot make the state folder " + folder_ + ": " + ec.message();
    return false;
  }
  // What a process killed while it saved left.
  for (auto it = std::filesystem::directory_iterator(folder_, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->path().extension() == ".tmp") std::filesystem::remove(it->path(), ec);
  }
  return true;
}

std::string StateFiles::PathOf(uint64_t step) const {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%020" PRIu64 "%s", kPrefix, step, kSuffix);
  return folder_ + "/" + name;
}

std::vector<uint64_t> StateFiles::Steps() const {
  constexpr size_t kPrefixSize = sizeof(kPrefix) - 1, kSuffixSize = sizeof(kSuffix) - 1;
  std::vector<uint64_t> steps;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(folder_, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    // Only whole files by this class's names: not the temporary one a
    // process killed while it saved left.
    const std::string name = it->path().filename().string();
    if (name.size() != kPrefixSize + 20 + kSuffixSize || name.rfind(kPrefix, 0) != 0 ||
        name.compare(kPrefixSize + 20, kSuffixSize, kSuffix) != 0) {
      continue;
    }
    const std::string number = name.substr(kPrefixSize, 20);
    if (number.find_first_not_of("0123456789") == std::string::npos) {
      steps.push_back(std::stoull(number));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool StateFiles::Save(uint64_t step, std::string* error) {
  const std::string path = PathOf(step), temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = Failed("cannot write", temporary);
    return false;
  }
  bool written = true;
  for (const StateRegion& region : regions_) {
    written = written && WriteAll(fd, static_cast<const char*>(region.data), region.bytes);
  }
  written = written && ::fsync(fd) == 0;
  if (!written) *error = Failed("cannot write", temporary);
  if (::close(fd) != 0 && written) {
    *error = Failed("cannot write", temporary);
    written = false;
  }
  if (written && std::rename(temporary.c_str(), path.c_str()) != 0) {
    *error = Failed("cannot rename into", path);
    written = false;
  }
  if (!written) {
    std::remove(temporary.c_str());
    return false;
  }
  const std::vector<uint64_t> steps = Steps();
  for (size_t i = 0; i + kept_ < steps.size(); ++i) std::remove(PathOf(steps[i]).c_str());
  if (!SyncFolder(folder_)) {
    *error = Failed("cannot sync the folder", folder_);
    return false;
  }
  return true;
}

bool StateFiles::DropAfter(uint64_t step, std::string* error) {
  for (uint64_t held : Steps()) {
    if (held > step && std::remove(PathOf(held).c_str()) != 0) {
      *error = Failed("cannot delete", PathOf(held));
      return false;
    }
  }
  if (!SyncFolder(folder_)) {
    *error = Failed("cannot sync the folder", folder_);
    return false;
  }
  return true;
}

bool StateFiles::Load(uint64_t step, std::string* error) const {
  const std::string path = PathOf(step);
  size_t expected = 0;
  for (const StateRegion& region : regions_) expected += region.bytes;
  // A file of another size (another model's) is refused before a byte of
  // it reaches the regions.
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size != expected) {
    *error = ec ? "cannot read " + path + ": " + ec.message()
                : path + " holds " + std::to_string(size) + " bytes, not the " +
                      std::to_string(expected) + " of this program's state";
    return false;
  }
  std::FILE* file = std::fopen(path.c_str(), "rb");
  bool read = file != nullptr;
  for (const StateRegion& region : regions_) {
    read = read && std::fread(region.data, 1, region.bytes, file) == region.bytes;
  }
  if (!read) *error = Failed("cannot read", path);
  if (file) std::fclose(file);
  return read;
}

}  // namespace example
