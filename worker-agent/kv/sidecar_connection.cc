#include "worker-agent/kv/sidecar_connection.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/sidecar_folder.h"

namespace kubeps {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// How often the rendezvous looks again for agent.json and the socket.
constexpr auto kRendezvousPoll = std::chrono::milliseconds(50);

// Sends all of `data` (no SIGPIPE: a closed peer is an error, and a
// library must not change the process's signal handling).
bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `size` bytes; false at end of stream or on an error.
bool ReceiveAll(int fd, char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string DescribeDirectory(const std::string& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return "the directory does not exist";
  std::string names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names += (names.empty() ? "" : ", ") + entry.path().filename().string();
  }
  return names.empty() ? "the directory is empty" : "the directory holds " + names;
}

// agent.json, or null while it is missing or half written (the agent
// renames it into place, but an older agent's may be being deleted).
json ReadAgentFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json();
  json file = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return file.is_object() ? file : json();
}

// A connected socket to `path`, or -1 (errno set).
int ConnectUnix(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

Status StatusFromReply(const json& reply) {
  static const std::map<std::string, Status::Code> kCodes = {
      {"InvalidArgument", Status::Code::kInvalidArgument},
      {"FailedPrecondition", Status::Code::kFailedPrecondition},
      {"NotFound", Status::Code::kNotFound},
      {"AlreadyExists", Status::Code::kAlreadyExists},
      {"Aborted", Status::Code::kAborted},
      {"Unavailable", Status::Code::kUnavailable},
      {"Internal", Status::Code::kInternal},
  };
  const json code = reply.value("code", json());
  const json error = reply.value("error", json());
  auto it = code.is_string() ? kCodes.find(code.get<std::string>()) : kCodes.end();
  std::string message = error.is_string() ? error.get<std::string>()
                                          : "the kubeps agent failed a request: " + reply.dump();
  return Status(it == kCodes.end() ? Status::Code::kUnknown : it->second, std::move(message));
}

Status SidecarConnection::Open(const std::string& dir, int timeout_ms,
                               std::unique_ptr<SidecarConnection>* out, json* agent_file) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const std::string file_path = dir + "/" + kAgentFileName;
  const std::string socket_path = dir + "/" + kAgentSocketName;
  std::string last_error;
  for (;;) {
    json file = ReadAgentFile(file_path);
    if (!file.is_null()) {
      const json protocol = file.value("protocol", json());
      if (protocol != json(kSidecarProtocolVersion)) {
        return Status::InvalidArgument("the kubeps agent in " + dir + " speaks sidecar protocol " +
                                       protocol.dump() + "; this client speaks " +
                                       std::to_string(kSidecarProtocolVersion));
      }
      const int fd = ConnectUnix(socket_path);
      if (fd >= 0) {
        out->reset(new SidecarConnection(fd, socket_path));
        *agent_file = std::move(file);
        return Status::Ok();
      }
      // agent.json of an agent that is gone, or one not listening yet.
      last_error = std::strerror(errno);
    }
    if (Clock::now() >= deadline) {
      const std::string waited = std::to_string(timeout_ms) + " ms";
      if (!file.is_null()) {
        return Status::Unavailable("the kubeps agent in " + dir + " wrote " + kAgentFileName +
                                   " but " + socket_path + " accepts no connection after " +
                                   waited + ": " + last_error);
      }
      return Status::Unavailable(
          "no kubeps agent in " + dir + " after " + waited + ": expected " + kAgentFileName +
          " there, which the kubeps-agent sidecar writes once it is registered and serving (" +
          DescribeDirectory(dir) +
          "). Is the agent running in this pod with the same directory mounted?");
    }
    std::this_thread::sleep_for(kRendezvousPoll);
  }
}

SidecarConnection::SidecarConnection(int fd, std::string socket_path)
    : fd_(fd), socket_path_(std::move(socket_path)) {
  reader_ = std::thread([this] { ReadReplies(); });
}

SidecarConnection::~SidecarConnection() {
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader
  reader_.join();
  ::close(fd_);
  FailAll(
      Status::Unavailable("the connection to the kubeps agent at " + socket_path_ + " is closed"));
}

SidecarConnection::RequestId SidecarConnection::Send(json request) {
  RequestId id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    slots_[id];
    if (!broken_.ok()) {
      slots_[id] = {true, broken_, json()};
      return id;
    }
  }
  request["id"] = id;
  const std::string body = request.dump();
  const std::string op = request.value("op", std::string("request"));
  if (body.size() > kSidecarMaxMessageBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_[id] = {true,
                  Status::InvalidArgument(op + ": the request is " + std::to_string(body.size()) +
                                          " bytes, over the sidecar protocol's limit of 64 MiB"),
                  json()};
    return id;
  }
  const uint32_t size = static_cast<uint32_t>(body.size());
  const char header[4] = {static_cast<char>(size & 0xff), static_cast<char>((size >> 8) & 0xff),
                          static_cast<char>((size >> 16) & 0xff),
                          static_cast<char>((size >> 24) & 0xff)};
  bool sent;
  int send_errno = 0;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    sent = SendAll(fd_, header, sizeof header) && SendAll(fd_, body.data(), body.size());
    if (!sent) send_errno = errno;
  }
  if (!sent) {
    FailAll(Status::Unavailable("the connection to the kubeps agent at " + socket_path_ +
                                " broke while sending " + op + ": " + std::strerror(send_errno)));
  }
  return id;
}

Status SidecarConnection::Await(RequestId id, json* reply, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    return Status::Internal("sidecar client: request " + std::to_string(id) +
                            " was never sent or was awaited already");
  }
  auto done = [&] { return it->second.done; };
  if (timeout_ms < 0) {
    replied_.wait(lock, done);
  } else if (!replied_.wait_for(lock, std::chrono::milliseconds(timeout_ms), done)) {
    slots_.erase(it);
    return Status::Unavailable("the kubeps agent at " + socket_path_ + " did not answer in " +
                               std::to_string(timeout_ms) + " ms");
  }
  Slot slot = std::move(it->second);
  slots_.erase(it);
  *reply = std::move(slot.reply);
  return slot.status;
}

void SidecarConnection::ReadReplies() {
  std::vector<char> body;
  for (;;) {
    unsigned char header[4];
    if (!ReceiveAll(fd_, reinterpret_cast<char*>(header), sizeof header)) break;
    const uint32_t size =
        header[0] | (header[1] << 8) | (header[2] << 16) | (static_cast<uint32_t>(header[3]) << 24);
    if (size > kSidecarMaxMessageBytes) {
      FailAll(Status::Internal("the kubeps agent at " + socket_path_ + " sent a message of " +
                               std::to_string(size) + " bytes, over the protocol's 64 MiB"));
      return;
    }
    body.resize(size);
    if (!ReceiveAll(fd_, body.data(), size)) break;
    json reply = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) {
      FailAll(Status::Internal("the kubeps agent at " + socket_path_ +
                               " sent a message that is not a JSON object"));
      return;
    }
    Dispatch(std::move(reply));
  }
  FailAll(Status::Unavailable("the kubeps agent at " + socket_path_ + " closed the connection"));
}

void SidecarConnection::Dispatch(json reply) {
  const json id = reply.value("id", json());
  std::lock_guard<std::mutex> lock(mutex_);
  if (!id.is_number_unsigned()) {
    // An answer to no request of ours (a refused session, a frame the
    // agent could not read) concerns the whole connection; the agent
    // closes it next.
    if (broken_.ok()) broken_ = StatusFromReply(reply);
    for (auto& [unused, slot] : slots_) {
      if (!slot.done) slot = {true, broken_, json()};
    }
    replied_.notify_all();
    return;
  }
  auto it = slots_.find(id.get<RequestId>());
  if (it == slots_.end() || it->second.done) return;  // a request given up on (Await's limit)
  Status status = reply.value("ok", json()) == true ? Status::Ok() : StatusFromReply(reply);
  it->second = {true, std::move(status), std::move(reply)};
  replied_.notify_all();
}

void SidecarConnection::FailAll(const Status& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = why;
  for (auto& [unused, slot] : slots_) {
    if (!slot.done) slot = {true, broken_, json()};
  }
  replied_.notify_all();
}

}  // namespace kubeps
