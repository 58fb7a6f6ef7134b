#include "worker-agent/sidecar/sidecar_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "worker-agent/sidecar/framing.h"
#include "worker-agent/sidecar/session.h"
#include "worker-agent/sidecar/shared_tensors.h"

namespace kubeps::sidecar {
namespace {

using json = nlohmann::json;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// 32 hex digits from the system's random source.
std::string NewNonce() {
  std::random_device random;
  char hex[33];
  for (int i = 0; i < 4; ++i) std::snprintf(hex + 8 * i, 9, "%08x", random());
  return std::string(hex, 32);
}

// The connecting process, as this PID namespace sees it (0: it is not
// visible here, e.g. another container of the pod without a shared PID
// namespace).
int PeerPid(int fd) {
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) return 0;
  return credentials.pid;
}

}  // namespace

Status PrepareSocketDirectory(const std::string& dir) {
  if (dir.empty()) {
    return Status::InvalidArgument("no socket directory (--socket-dir or KUBEPS_SOCKET_DIR)");
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return Status::Error("cannot create the socket directory " + dir + ": " + error.message());
  for (const std::string& name : {std::string(kAgentFileName), std::string(kAgentFileName) + ".tmp",
                                  std::string(kAgentSocketName)}) {
    ::unlink((dir + "/" + name).c_str());
  }
  if (int removed = SharedTensors::RemoveLeftovers(dir); removed > 0) {
    KLOG_INFO << "removed " << removed << " shared-memory file(s) an earlier agent left in " << dir;
  }
  return Status::Ok();
}

SidecarServer::SidecarServer(const SidecarOptions& options, KVWorker* kv)
    : options_(options),
      kv_(kv),
      nonce_(NewNonce()),
      step_metrics_(options.metrics, kv->rank(), options.progress_interval_ms),
      pool_(options.pool_threads) {}

Status SidecarServer::Start(const SidecarOptions& options, KVWorker* kv,
                            std::unique_ptr<SidecarServer>* out) {
  std::unique_ptr<SidecarServer> server(new SidecarServer(options, kv));
  if (Status s = PrepareSocketDirectory(options.socket_dir); !s.ok()) return s;
  if (::pipe2(server->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return Status::Error(Errno("pipe"));
  if (Status s = server->Listen(); !s.ok()) return s;
  // Last: a client that finds agent.json finds a socket that answers.
  if (Status s = server->WriteAgentFile(); !s.ok()) return s;
  *out = std::move(server);
  return Status::Ok();
}

SidecarServer::~SidecarServer() {
  Shutdown();
  if (reader_.joinable()) reader_.join();
  RemoveFiles();
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

std::string SidecarServer::socket_path() const {
  return options_.socket_dir + "/" + kAgentSocketName;
}

Status SidecarServer::Listen() {
  const std::string path = socket_path();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() > kMaxSocketPathBytes) {
    return Status::InvalidArgument("the socket path " + path + " is too long (" +
                                   std::to_string(path.size()) + " bytes, at most " +
                                   std::to_string(kMaxSocketPathBytes) + ")");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::Error(Errno("socket"));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    return Status::Error(Errno("cannot bind " + path));
  }
  // Before listen(): until then nobody can connect, whatever the mode was.
  if (::chmod(path.c_str(), 0600) != 0) return Status::Error(Errno("chmod " + path));
  if (::listen(listen_fd_, 8) != 0) return Status::Error(Errno("listen on " + path));
  return Status::Ok();
}

Status SidecarServer::WriteAgentFile() {
  const std::string path = options_.socket_dir + "/" + kAgentFileName;
  const std::string tmp = path + ".tmp";
  const std::string text = json{{"protocol", kProtocolVersion},
                                {"job", options_.job_name},
                                {"replica", options_.replica},
                                {"nonce", nonce_},
                                {"pid", ::getpid()}}
                               .dump() +
                           "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(Errno("cannot write " + tmp));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) return Status::Error(Errno("cannot write " + tmp));
  // Renamed into place, so that a client never reads half of it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::Error(Errno("rename to " + path));
  return Status::Ok();
}

Status SidecarServer::Serve() {
  Status result;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ || (finished_ && slot_ == Slot::kFree)) break;
    }
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      result = Status::Error(Errno("poll"));
      break;
    }
    if (fds[1].revents) {
      char drained[64];
      while (::read(wake_pipe_[0], drained, sizeof drained) > 0) {
      }
    }
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Accept(fd);
    } else if (errno == EMFILE || errno == ENFILE) {
      // Out of descriptors: the connection waits in the backlog; try later.
      KLOG_ERROR << Errno("accept on " + socket_path());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } else if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
      result = Status::Error(Errno("accept on " + socket_path()));
      break;
    }
  }
  if (stopping_) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (session_fd_ >= 0) ::shutdown(session_fd_, SHUT_RDWR);
  } else if (reader_.joinable()) {
    reader_.join();  // the finished session's thread, done already
  }
  RemoveFiles();
  return result;
}

void SidecarServer::Shutdown() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (session_fd_ >= 0) ::shutdown(session_fd_, SHUT_RDWR);
  }
  slot_changed_.notify_all();
  Wake();
}

void SidecarServer::Wake() {
  if (wake_pipe_[1] < 0) return;
  // The pipe is non-blocking: when it is full, Serve is awake already.
  [[maybe_unused]] ssize_t written = ::write(wake_pipe_[1], "x", 1);
}

void SidecarServer::RemoveFiles() {
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  ::unlink((options_.socket_dir + "/" + kAgentFileName).c_str());
  ::unlink(socket_path().c_str());
}

std::string SidecarServer::DescribeHolder() const {
  std::string who = holder_pid_ > 0 ? "pid " + std::to_string(holder_pid_)
                                    : std::string("a process in another PID namespace");
  const uint64_t own_pid = session_ ? session_->hello_pid() : 0;
  if (own_pid != 0 && own_pid != static_cast<uint64_t>(holder_pid_)) {
    who += " (pid " + std::to_string(own_pid) + " in its own namespace)";
  }
  return who;
}

void SidecarServer::Accept(int fd) {
  const int peer_pid = PeerPid(fd);
  std::unique_lock<std::mutex> lock(mutex_);
  // A session on its way out (bye, or its client died) is waited for: the
  // restarted training process may connect as soon as the old one is gone.
  slot_changed_.wait(lock, [&] { return slot_ != Slot::kEnding || stopping_; });
  std::string refusal;
  if (stopping_) {
    refusal = "the agent is shutting down";
  } else if (finished_) {
    refusal = "the agent is exiting: its training process said finish";
  } else if (slot_ == Slot::kActive) {
    refusal = DescribeHolder() +
              " holds this agent: it serves one training process at a time (one per worker pod)";
  }
  if (!refusal.empty()) {
    lock.unlock();
    Refuse(fd, refusal);
    return;
  }
  slot_ = Slot::kActive;
  session_fd_ = fd;
  holder_pid_ = peer_pid;
  lock.unlock();
  if (reader_.joinable()) reader_.join();  // the last session's thread, done already
  reader_ = std::thread([this, fd, peer_pid] { RunSession(fd, peer_pid); });
}

void SidecarServer::Refuse(int fd, const std::string& why) {
  // Answer the client's first request (its hello), so that it reads why.
  timeval timeout{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  json request, id;
  std::string error;
  if (ReadFrame(fd, &request, &error) == FrameRead::kMessage && request.contains("id") &&
      request["id"].is_number_unsigned()) {
    id = request["id"];
  }
  (void)WriteFrame(fd, {{"id", id}, {"ok", false}, {"code", "FailedPrecondition"}, {"error", why}});
  ::close(fd);
  KLOG_INFO << "refused a connection: " << why;
}

std::pair<std::string, std::string> SidecarServer::JobFailure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job_failure_;
}

std::optional<uint64_t> SidecarServer::ScaledAwayAt() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scaled_away_at_;
}

void SidecarServer::RunSession(int fd, int peer_pid) {
  const std::string client = peer_pid > 0 ? "pid " + std::to_string(peer_pid) : "a client";
  KLOG_INFO << "session of " << client << " started";
  FrameWriter writer(fd);
  SessionContext context;
  context.kv = kv_;
  context.pool = &pool_;
  context.metrics = &step_metrics_;
  context.socket_dir = options_.socket_dir;
  context.nonce = nonce_;
  context.sync = options_.sync;
  context.optimizer = options_.optimizer;
  context.non_finite = options_.non_finite;
  context.elastic = options_.elastic;
  context.batch_size = options_.batch_size;
  context.checkpoint_interval = options_.checkpoint_interval;
  context.computed = &computed_;
  context.on_scaled_away = [this](uint64_t step) {
    std::lock_guard<std::mutex> lock(mutex_);
    scaled_away_at_ = step;
  };
  context.known_numels = &known_numels_;
  context.kv_segment = options_.kv_segment;
  context.on_job_failure = [this](const std::string& reason, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_failure_.first.empty()) job_failure_ = {reason, message};
  };
  context.on_job_failure_cured = [this](const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_failure_.first == reason) job_failure_ = {};
  };
  Session session(context, [&writer](const json& reply) {
    // A client that is gone cannot read its replies; the session ends at
    // the reader's next read.
    (void)writer.Write(reply);
  });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    session_ = &session;
  }
  std::string end;
  bool bye = false;
  while (end.empty()) {
    json request;
    std::string error;
    switch (ReadFrame(fd, &request, &error)) {
      case FrameRead::kMessage:
        if (session.Handle(request) == Session::Next::kBye) {
          bye = true;
          end = "bye";
        }
        break;
      case FrameRead::kNotJson:
        (void)writer.Write(
            {{"id", nullptr}, {"ok", false}, {"code", "InvalidArgument"}, {"error", error}});
        break;
      case FrameRead::kTooLarge:
        (void)writer.Write({{"id", nullptr},
                            {"ok", false},
                            {"code", "InvalidArgument"},
                            {"error", error + ": closing the session"}});
        end = error;
        break;
      case FrameRead::kClosed:
        end = "the client closed the connection";
        break;
      case FrameRead::kBroken:
        end = error;
        break;
    }
  }
  if (stopping_ && !bye) end = "the agent is shutting down";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot_ = Slot::kEnding;
  }
  session.Close();
  if (bye) (void)writer.Write(session.ByeReply());
  const bool finished = session.finished();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    session_ = nullptr;
    ::close(fd);
    session_fd_ = -1;
    holder_pid_ = 0;
    slot_ = Slot::kFree;
    if (finished) finished_ = true;
  }
  slot_changed_.notify_all();
  KLOG_INFO << "session of " << client << " ended (" << end << ")"
            << (finished ? "; its training process said finish" : "");
  Wake();
}

}  // namespace kubeps::sidecar
