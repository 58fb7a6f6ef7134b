// The sidecar protocol's framing (docs/sidecar-protocol.md, "Framing"): each
// message, both ways, is a 4-byte little-endian length followed by that many
// bytes of one JSON object, at most kMaxMessageBytes. The agent's server and
// the clients written in C++ (tests, the SDK) share these functions.
//
// Stateless functions on a blocking socket. One reader and one writer may
// use a socket at the same time; writers must take turns (a frame is written
// with several calls when the socket buffer is full), as FrameWriter does.
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_FRAMING_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_FRAMING_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kubeps::sidecar {

// 64 MiB: a declaration lists every tensor of the model by name, and a
// mixture of experts has tens of thousands (about 100 bytes of JSON each, and
// as much again in the reply). The bound is what a broken peer can make the
// other side allocate for one message.
inline constexpr size_t kMaxMessageBytes = 64 << 20;

enum class FrameRead {
  kMessage,   // *message holds one JSON object
  kNotJson,   // a whole frame whose body is not a JSON object: the stream is intact
  kTooLarge,  // the length prefix is over kMaxMessageBytes: the stream is lost
  kClosed,    // the peer closed the connection between two messages
  kBroken,    // a read error, or the connection ended inside a frame
};

// Reads one frame; for every outcome but kMessage, *error says what happened.
FrameRead ReadFrame(int fd, nlohmann::json* message, std::string* error);

// Writes `message` as one frame (no SIGPIPE: a closed peer is an error).
Status WriteFrame(int fd, const nlohmann::json& message);

// Writes frames to one socket from several threads, one frame at a time.
// Thread-safe.
class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) {}
  Status Write(const nlohmann::json& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    return WriteFrame(fd_, message);
  }

 private:
  const int fd_;
  std::mutex mutex_;
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_FRAMING_H_
