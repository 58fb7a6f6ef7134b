// The socket half of the C++ SDK's sidecar client (docs/sidecar-protocol.md,
// "Where" and "Framing"): the rendezvous with the pod's agent (wait for
// agent.json, connect to agent.sock) and one session's requests and
// replies, framed as a 4-byte little-endian length and a JSON object.
// Replies come out of order (a wait blocks in the agent while later
// requests are answered), so a reader thread hands each reply to the
// request with its id.
//
// The client keeps its own framing rather than the agent's
// (worker-agent/sidecar/framing.h): the SDK's library carries no code of the
// agent's server, and its tests run it against that server, so the two
// sides cannot drift apart unnoticed.
//
// Internal to the SDK (not installed). Thread-safe: Send, Await and Call
// from any thread, each id awaited once.
#ifndef KUBEPS_WORKER_AGENT_KV_SIDECAR_CONNECTION_H_
#define KUBEPS_WORKER_AGENT_KV_SIDECAR_CONNECTION_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kubeps {

inline constexpr int kSidecarProtocolVersion = 1;
// The protocol's limit on one message, both ways: 64 MiB (a declaration of
// tens of thousands of tensors is several MiB).
inline constexpr size_t kSidecarMaxMessageBytes = 64 << 20;

class SidecarConnection {
 public:
  using RequestId = uint64_t;

  // Waits up to `timeout_ms` for <dir>/agent.json (the agent writes it once
  // it is registered and serving) and connects to <dir>/agent.sock. On
  // success *agent_file holds agent.json (its nonce goes into hello).
  // Unavailable, naming the directory and what it holds, when no agent
  // answers in time; InvalidArgument for another protocol version.
  static Status Open(const std::string& dir, int timeout_ms,
                     std::unique_ptr<SidecarConnection>* out, nlohmann::json* agent_file);
  // Closes the socket; requests still waiting fail with Unavailable.
  ~SidecarConnection();
  SidecarConnection(const SidecarConnection&) = delete;
  SidecarConnection& operator=(const SidecarConnection&) = delete;

  // Sends `request` (its "op" and fields; the id is added here) and returns
  // at once; Await collects the reply. A request that cannot be sent (the
  // connection is gone, the message is over 64 MiB) is failed for Await.
  RequestId Send(nlohmann::json request);
  // The reply to `id`: OK, or the failure it carries (the agent's code and
  // message), with *reply the whole reply either way (a failure may carry
  // fields, e.g. resume_step); or Unavailable, *reply null, when the
  // connection broke. timeout_ms < 0: no limit; past the limit,
  // Unavailable (the reply, should it come, is dropped).
  Status Await(RequestId id, nlohmann::json* reply, int timeout_ms = -1);
  Status Call(nlohmann::json request, nlohmann::json* reply) {
    return Await(Send(std::move(request)), reply);
  }

  const std::string& socket_path() const { return socket_path_; }

 private:
  struct Slot {
    bool done = false;
    Status status;
    nlohmann::json reply;
  };

  SidecarConnection(int fd, std::string socket_path);
  void ReadReplies();
  void Dispatch(nlohmann::json reply);
  // Fails every request waiting, and every later one, with `why`.
  void FailAll(const Status& why);

  const int fd_;
  const std::string socket_path_;
  std::mutex write_mutex_;  // one frame at a time on the socket

  std::mutex mutex_;
  std::condition_variable replied_;
  std::map<RequestId, Slot> slots_;  // sent, not yet awaited
  RequestId next_id_ = 1;
  Status broken_;  // not ok once the connection is gone
  std::thread reader_;
};

// The Status of a failed reply: the protocol's code mapped to Status::Code,
// the agent's message unchanged.
Status StatusFromReply(const nlohmann::json& reply);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_SIDECAR_CONNECTION_H_
