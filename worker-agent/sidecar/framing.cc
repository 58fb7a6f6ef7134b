#include "worker-agent/sidecar/framing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kubeps::sidecar {
namespace {

// Reads exactly `size` bytes. Returns the bytes read before an end of
// stream (size on success) or -1 on an error (errno set).
ssize_t ReadFully(int fd, char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

FrameRead ReadFrame(int fd, nlohmann::json* message, std::string* error) {
  unsigned char prefix[4];
  ssize_t n = ReadFully(fd, reinterpret_cast<char*>(prefix), sizeof prefix);
  if (n < 0) {
    *error = std::string("read: ") + std::strerror(errno);
    return FrameRead::kBroken;
  }
  if (n == 0) {
    *error = "connection closed";
    return FrameRead::kClosed;
  }
  if (n < static_cast<ssize_t>(sizeof prefix)) {
    *error = "connection closed inside a length prefix";
    return FrameRead::kBroken;
  }
  const uint32_t length = uint32_t{prefix[0]} | uint32_t{prefix[1]} << 8 |
                          uint32_t{prefix[2]} << 16 | uint32_t{prefix[3]} << 24;
  if (length > kMaxMessageBytes) {
    *error = "a message of " + std::to_string(length) + " bytes is over the limit of " +
             std::to_string(kMaxMessageBytes) + " bytes (64 MiB)";
    return FrameRead::kTooLarge;
  }
  std::string body(length, '\0');
  n = ReadFully(fd, body.data(), length);
  if (n < 0) {
    *error = std::string("read: ") + std::strerror(errno);
    return FrameRead::kBroken;
  }
  if (n < static_cast<ssize_t>(length)) {
    *error = "connection closed after " + std::to_string(n) + " of a message's " +
             std::to_string(length) + " bytes";
    return FrameRead::kBroken;
  }
  try {
    *message = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number no double can hold.
    *error = std::string("a message is not JSON: ") + e.what();
    return FrameRead::kNotJson;
  }
  if (!message->is_object()) {
    *error = "a message must be a JSON object, got " + std::string(message->type_name());
    return FrameRead::kNotJson;
  }
  return FrameRead::kMessage;
}

Status WriteFrame(int fd, const nlohmann::json& message) {
  // Strings a client sent are valid UTF-8 (the parser checks); `replace`
  // keeps a reply from throwing should one of ours not be.
  const std::string body = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const uint32_t length = static_cast<uint32_t>(body.size());
  std::string frame(4 + body.size(), '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  std::memcpy(frame.data() + 4, body.data(), body.size());
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t n = ::send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Unavailable(std::string("send: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace kubeps::sidecar
