#include "common/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kubeps {
namespace {

std::string OctalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// "token file /x: cannot read it (No such file or directory)": the errno
// tells a missing file from a refused one.
Status CannotRead(const std::string& what, const std::string& path) {
  return Status::InvalidArgument(what + " " + path + ": cannot read it (" + std::strerror(errno) +
                                 ")");
}

}  // namespace

Status ReadPrivateFile(const std::string& path, const std::string& what, const std::string& secret,
                       size_t limit, std::string* contents) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::unique_ptr<const int, void (*)(const int*)> closer(&fd, [](const int* f) {
    if (*f >= 0) ::close(*f);
  });
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return CannotRead(what, path);
  if ((st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    return Status::InvalidArgument(what + " " + path + ": mode " + OctalMode(st.st_mode) +
                                   " lets other users read or change " + secret +
                                   "; make it 0600 or 0400 (a Secret volume: defaultMode 0400)");
  }
  std::string text(limit, '\0');
  size_t size = 0;
  while (size < limit) {
    const ssize_t n = ::read(fd, text.data() + size, limit - size);
    if (n < 0) return CannotRead(what, path);
    if (n == 0) break;
    size += static_cast<size_t>(n);
  }
  text.resize(size);
  *contents = std::move(text);
  return Status::Ok();
}

}  // namespace kubeps
