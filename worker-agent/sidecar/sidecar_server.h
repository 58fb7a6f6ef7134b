// The agent's serving mode (`kubeps-agent --serve`, docs/sidecar-protocol.md):
// a Unix socket in the pod's shared directory through which the pod's
// training process reaches the KV client, one session at a time.
//
//   SidecarServer::Start(options, kv, &server);  // agent.sock, then agent.json
//   server->Serve();                              // until a session said finish
//
// Threads: Serve's caller accepts connections (a second client while one
// holds the agent is refused with the holder's pid); each session has its
// reader thread, and the requests that block run on a pool shared by the
// sessions, so their replies may come out of order. A session ends on bye,
// on end of stream or when its client dies: its requests in flight are
// waited for and its shared-memory file deleted before the next one starts.
//
// Thread-safe: Shutdown may be called from any thread; the rest from one.
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_SIDECAR_SERVER_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_SIDECAR_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/sidecar_folder.h"
#include "common/status.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/task_pool.h"
#include "worker-agent/sidecar/shared_tensors.h"
#include "worker-agent/sidecar/step_metrics.h"

namespace kubeps::sidecar {

class Session;

struct SidecarOptions {
  std::string socket_dir;  // shared with the training process's container
  std::string job_name;
  std::string replica;               // this pod's replica, e.g. worker-0
  bool sync = true;                  // the job's mode
  std::string optimizer = "sgd";     // the servers'; `none` when they only average
  std::string non_finite = "Fail";   // spec.nonFinite: Fail or SkipStep
  bool elastic = false;              // the worker role has an elasticPolicy
  uint64_t batch_size = 0;           // spec.batchSize, per worker
  uint64_t checkpoint_interval = 0;  // spec.checkpoint.intervalSteps
  MetricsServer* metrics = nullptr;  // null: nothing exported
  int progress_interval_ms = 2000;
  int pool_threads = 8;  // requests that block (wait, barrier, init, membership, finish) at once
  // SessionContext::kv_segment: where the KV client can hold the program's
  // tensors in its own shared segment. Empty: never.
  std::function<std::optional<SegmentFile>(const std::vector<uint64_t>& numels)> kv_segment;
};

// Creates `dir` if needed and deletes what an earlier agent left there
// (agent.json, agent.sock, shared-memory files), so that a client waiting
// for agent.json does not read a dead agent's nonce.
Status PrepareSocketDirectory(const std::string& dir);

class SidecarServer {
 public:
  // Listens on <dir>/agent.sock (mode 0600), then writes <dir>/agent.json
  // (atomically, with a fresh nonce): call it once the KV worker has
  // registered. `kv` must outlive the server.
  static Status Start(const SidecarOptions& options, KVWorker* kv,
                      std::unique_ptr<SidecarServer>* out);
  // Cuts a session still open and waits for it to end; deletes the socket
  // and agent.json.
  ~SidecarServer();
  SidecarServer(const SidecarServer&) = delete;
  SidecarServer& operator=(const SidecarServer&) = delete;

  // Serves sessions until one that said finish has ended, or Shutdown is
  // called; then deletes agent.json and the socket (no client should reach
  // an agent on its way out). An error only when accepting fails.
  Status Serve();
  // Makes Serve return soon and cuts the session still open. Any thread.
  void Shutdown();

  const std::string& nonce() const { return nonce_; }
  std::string socket_path() const;
  uint64_t steps() const { return step_metrics_.steps(); }
  // Why the job must end, as a termination reason and message, once a
  // session saw a failure no restart cures (SessionContext::on_job_failure);
  // empty reason otherwise.
  std::pair<std::string, std::string> JobFailure() const;
  // The step from which this worker was scaled away, once the session that
  // learned it said finish (SessionContext::on_scaled_away).
  std::optional<uint64_t> ScaledAwayAt() const;

 private:
  enum class Slot { kFree, kActive, kEnding };

  SidecarServer(const SidecarOptions& options, KVWorker* kv);
  Status Listen();
  Status WriteAgentFile();
  void Accept(int fd);
  void RunSession(int fd, int peer_pid);
  void Refuse(int fd, const std::string& why);
  std::string DescribeHolder() const;  // mutex_ held
  void Wake();
  void RemoveFiles();

  const SidecarOptions options_;
  KVWorker* const kv_;
  std::string nonce_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  StepMetrics step_metrics_;
  std::vector<uint64_t> known_numels_;  // what the sessions declared to the servers
  TaskPool pool_;

  mutable std::mutex mutex_;
  std::condition_variable slot_changed_;
  Slot slot_ = Slot::kFree;
  int session_fd_ = -1;               // open while the slot is not free
  int holder_pid_ = 0;                // the session's client, as the kernel sees it (0: unknown)
  const Session* session_ = nullptr;  // the open session, on its reader's stack
  bool finished_ = false;             // a session that said finish has ended
  std::pair<std::string, std::string> job_failure_;  // the first one a session saw
  std::atomic<bool> computed_{false};                // a session pushed a step
  std::optional<uint64_t> scaled_away_at_;
  std::thread reader_;
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_SIDECAR_SERVER_H_
