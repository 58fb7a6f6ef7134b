// KVWorkerImpl: the KV client behind kv_worker.h. The data plane (sharded
// push and pull with resend and exactly-once identities, in a thread pool)
// is here; membership (register, cluster view, heartbeats, barriers, finish)
// goes through the one scheduler client (common/scheduler_client.h).
// Internal: include kv_worker.h instead.
#ifndef KUBEPS_WORKER_AGENT_KV_KV_WORKER_IMPL_H_
#define KUBEPS_WORKER_AGENT_KV_KV_WORKER_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/gradient_codec.h"
#include "common/metrics.h"
#include "common/request_limits.h"
#include "common/resend.h"
#include "common/scheduler_client.h"
#include "common/status.h"
#include "kubeps.grpc.pb.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/placement.h"
#include "worker-agent/kv/rollback_copies.h"
#include "worker-agent/kv/shared_memory_path.h"
#include "worker-agent/kv/task_pool.h"
#include "worker-agent/kv/tensor_wire.h"

namespace kubeps {

class KVWorkerImpl final : public KVWorker {
 public:
  KVWorkerImpl(const KVOptions& options, std::shared_ptr<JobToken> token,
               std::shared_ptr<const TransportSecurity> security);
  ~KVWorkerImpl() override;
  // Registers, waits for the cluster view, starts the heartbeats.
  Status Start();

  int rank() const override { return rank_; }
  int size() const override { return num_workers_; }
  int num_servers() const override { return num_servers_; }
  Status InitTensors(const std::vector<const float*>& values,
                     const std::vector<uint64_t>& sizes) override;
  void NameTensors(std::vector<std::string> names) override { names_ = std::move(names); }
  Ticket Push(const std::vector<const float*>& grads, uint64_t step) override;
  Ticket Pull(const std::vector<float*>& values, uint64_t min_version) override;
  Ticket PushPull(const std::vector<const float*>& grads, const std::vector<float*>& values,
                  uint64_t step) override;
  Status Wait(Ticket ticket) override;
  Status WaitWithVersion(Ticket ticket, uint64_t* version) override;
  Status Barrier(const std::string& name) override;
  Status Finish() override;
  Status Recover(uint64_t* resume_step) override;
  // Recover, once a generation of at least `generation` is ready; where
  // given, *own_step receives the answer's (async: HeartbeatAnswer::own_step).
  Status RecoverFrom(uint64_t generation, uint64_t* resume_step,
                     std::optional<uint64_t>* own_step = nullptr);
  Status Membership(uint64_t step, StepMembership* out) override;
  int64_t NewestCommonCheckpoint() const override { return announced_common_checkpoint_; }
  Status RollBackToHeldState(uint64_t start, const std::vector<uint64_t>& held,
                             uint64_t* resume_step) override;
  const std::vector<Part>& parts() const override { return parts_; }
  // PrepareSegment (segment_file.h): places the tensors and makes the
  // segment now; InitTensors with the same sizes keeps both, and so does a
  // second call. True where there is a segment.
  bool PrepareTensors(const std::vector<uint64_t>& sizes);
  const SharedMemoryPath* shared() const { return shared_.get(); }
  // Where a server on this host can map the worker's segment: the tensor's
  // regions in it (SharedMemoryPath::Values, Grads), valid until tensors of
  // other sizes are declared; null without a segment, and for the gradients
  // where pushes are encoded (their staging holds the encoding).
  float* SharedValues(uint32_t key) override { return shared_ ? shared_->Values(key) : nullptr; }
  float* SharedGrads(uint32_t key) override {
    return shared_ && encoding_ == GradientEncoding::kFloat32 ? shared_->Grads(key) : nullptr;
  }

 private:
  struct Pending;
  void HeartbeatLoop();

  // Parts of the selected keys on each server, in batches of at most
  // KVOptions::tcp_request_elems elements, one RPC each, so that over TCP
  // several are in flight and the first parts come back while the last
  // still go out. Through shared memory nothing streams and every RPC costs
  // a gRPC call on both sides: batches of at most kSharedMemoryBatchElems.
  // Never more than kMaxPartsPerRequest parts or kMaxRequestBytes, which a
  // server would refuse.
  static constexpr uint64_t kSharedMemoryBatchElems = 8 << 20;  // 32 MiB of float32
  template <typename Ptr>
  std::vector<std::vector<const Part*>> Batches(const std::vector<Ptr>& selected) const;
  Ticket NewTicket(int requests, std::shared_ptr<Pending>* pending);
  // Async: a push of `step` says it in the heartbeats, and once waited for
  // with success the step after it, where a restarted program goes on
  // (Recover): a push cut short by the process's death is done again, one
  // that succeeded is not.
  void StepPushed(Pending& pending, uint64_t step);
  void Complete(const std::shared_ptr<Pending>& pending, const Status& status);
  v1::RequestId NextRequestId();
  void Acknowledge(uint64_t seq);
  // A line on stderr where the placement leaves a server without a part
  // (tensors too small to slice over every server).
  void SayServersWithoutParts(const std::vector<uint64_t>& sizes) const;
  // Rank 0's Init of `values` (check_only: another worker's check of the
  // names and lengths, nothing stored), a request per batch.
  Status SendInits(const std::vector<const float*>& values, bool check_only);
  Status PushBatch(const std::vector<const Part*>& batch, const std::vector<const float*>& grads,
                   uint64_t step);
  Status PullBatch(const std::vector<const Part*>& batch, const std::vector<float*>& values,
                   uint64_t min_version, const std::shared_ptr<Pending>& pending);
  // A batch's push and, once it is applied, its pull of version step + 1, in
  // one call (ParameterServer.PushPull). *answered is false when the push
  // succeeded but the version was not there within the long-poll slice (a
  // late peer): the caller pulls.
  Status PushPullBatch(const std::vector<const Part*>& batch,
                       const std::vector<const float*>& grads, const std::vector<float*>& values,
                       uint64_t step, const std::shared_ptr<Pending>& pending, bool* answered);

  // A push ready to go: its header, the request (the header and the data or,
  // staged in shared memory, the header alone) and its size in elements.
  struct OutgoingPush {
    v1::PushRequest header;
    grpc::ByteBuffer request;
    bool staged = false;
    uint64_t elements = 0;
  };
  void PreparePush(const std::vector<const Part*>& batch, const std::vector<const float*>& grads,
                   uint64_t step, const v1::PullRequest* then_pull, OutgoingPush* push);
  Status SendPush(const std::vector<const Part*>& batch, OutgoingPush* push, const char* rpc,
                  int extra_wait_ms, const std::function<grpc::Status(grpc::ClientContext&)>& call);
  // After a push's call: its staging region is free again and its id
  // acknowledged; a failure in a rollback becomes Aborted; `what` names it
  // in the step trace.
  Status PushSent(const std::vector<const Part*>& batch, uint64_t step, const OutgoingPush& push,
                  const Status& sent, std::chrono::steady_clock::time_point start,
                  const char* what);
  // A pull request of the batch; true when it offers landing regions in
  // shared memory (PullOffer ends the offer).
  bool OpenPull(const std::vector<const Part*>& batch, const std::vector<float*>& values,
                uint64_t min_version, v1::PullRequest* request, uint64_t* elements);
  struct PullOffer;
  // What a pull's answer calls before it writes its bytes into `values`.
  std::function<void()> AnswerWrites(const std::vector<const Part*>& batch,
                                     const std::vector<float*>& values);
  // Where a pull of `version` puts each tensor's values (Destination).
  std::vector<float*> Destinations(std::vector<float*> values, uint64_t version);
  // A ready answer: values copied out of the landing regions where they
  // landed, the ticket's version lowered to the answer's.
  Status PullAnswered(const std::vector<const Part*>& batch, const v1::PullRequest& request,
                      bool offered, uint64_t elements, const std::vector<float*>& values,
                      const std::shared_ptr<Pending>& pending, PullAnswer* answer);
  std::string ServerName(int server) const;
  static int64_t Priority(const std::vector<const Part*>& batch);

  // How this worker reaches one server. A server restarted on another
  // node (a pod made again gets a new IP) is reached at its new address
  // after the recovery that its restart opens: a link is replaced whole,
  // never changed, so a call holds the one it started with.
  struct ServerLink {
    ServerLink(const std::string& address, const TransportSecurity& security);
    std::string address;
    std::shared_ptr<grpc::Channel> channel;           // Push and Pull (tensor_wire.h)
    std::unique_ptr<v1::ParameterServer::Stub> stub;  // Init
  };
  std::shared_ptr<const ServerLink> Link(int server) const;
  // Follows the servers to the addresses the scheduler's view gives now.
  Status RefreshServerLinks();

  const KVOptions options_;
  const std::shared_ptr<const TransportSecurity> security_;
  MetricsServer* metrics_;
  ResendCaller caller_;
  SchedulerClient scheduler_;
  const uint64_t incarnation_;
  mutable std::mutex links_mutex_;
  std::vector<std::shared_ptr<const ServerLink>> links_;  // by server rank
  int rank_ = -1;
  int num_workers_ = 0;
  int num_servers_ = 0;  // fixed for the job's life
  std::vector<Part> parts_;
  std::vector<std::string> names_;  // by key (NameTensors), or none

  std::mutex mutex_;
  uint64_t next_seq_ = 0;
  std::set<uint64_t> unanswered_;  // sequence numbers that may still be resent
  Ticket next_ticket_ = 1;
  std::map<Ticket, std::shared_ptr<Pending>> pending_;

  // Recovery generations, as the scheduler's heartbeats announce them.
  std::atomic<uint64_t> generation_{0};  // the one requests carry
  std::atomic<uint64_t> announced_generation_{0};
  std::atomic<int64_t> announced_common_checkpoint_{-1};
  mutable std::mutex failure_mutex_;
  std::vector<std::string> silent_nodes_;  // the newest beat's dead_nodes
  std::string failure_;                    // the scheduler's reason to stop the job, if any
  std::string failure_reason_;             // and the termination reason it calls for
  // Who computes which step (common/membership.h), as the heartbeats bring
  // it; a fixed job's until then, or for ever.
  mutable std::mutex membership_mutex_;
  v1::Membership membership_;
  bool elastic_ = false;  // a heartbeat brought a schedule: pushes say their step's workers
  // One beat; its answer goes to the announced_ fields and, where given, to *answer.
  Status PollHeartbeat(HeartbeatAnswer* answer = nullptr);
  bool RollbackAnnounced() const;
  // Ok while the job goes on; once the scheduler stopped it, its words.
  Status JobStopped() const;
  // What a worker waiting for a step says of its cause.
  std::string WhyAPeerMayBeLate() const;
  // Whether a push or pull stops resending: the answer no longer matters
  // (a rollback), or the job has stopped.
  bool GivesUpResending() const;
  // Whether a call to `server` that failed with `s` is sent again rather
  // than failing the worker: the server answered none of the call's tries
  // (frozen, cut off, its pod being replaced), resends are on, the job goes
  // on and no rollback came, and the peer wait limit since `since` is not
  // spent. Says so once per call (*said). Where the job has stopped, a
  // failed *s becomes why: the server's silence is not the cause to report.
  bool WaitsOnSilentServer(int server, Status* s, std::chrono::steady_clock::time_point since,
                           bool* said) const;

  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> steps_pushed_{0};  // the step after the furthest pushed, told at Finish
  std::thread heartbeat_;
  GradientEncoding encoding_ = GradientEncoding::kFloat32;  // of pushes (options_.compression)
  // Two-bit: by key, what each value has not sent yet (gradient_codec.h).
  // A push writes only its own parts' ranges; two pushes of one key at once
  // (not waited for in between) would race on them.
  std::vector<std::vector<float>> residuals_;
  // A sync two-bit job's residuals as of the steps a rollback may go back
  // to: put back by Recover, so that the redone steps send the same bytes.
  std::unique_ptr<RollbackCopies> residual_copies_;
  // Pushes and pulls run on pools of their own: a pull long-polls until
  // every worker has pushed, and must never hold the thread a push of this
  // worker waits for.
  std::unique_ptr<TaskPool> push_pool_;
  std::unique_ptr<TaskPool> pull_pool_;
  // Null: every tensor goes over gRPC (options_.shared_memory off, no
  // server on this host, or the segment could not be made).
  std::unique_ptr<SharedMemoryPath> shared_;
  std::vector<uint64_t> laid_out_;  // the sizes parts_ and shared_ are of

  prometheus::Histogram* push_latency_ = nullptr;
  prometheus::Histogram* pull_latency_ = nullptr;
  prometheus::Counter* push_bytes_ = nullptr;
  prometheus::Counter* pull_bytes_ = nullptr;
  prometheus::Counter* shared_bytes_ = nullptr;
  prometheus::Counter* mapped_bytes_ = nullptr;
};

// What a ticket waits for: its requests still running, the first failure,
// and the version pulled.
struct KVWorkerImpl::Pending {
  std::mutex mutex;
  std::condition_variable done;
  int remaining = 0;
  Status status;
  uint64_t version = UINT64_MAX;  // smallest version pulled so far
  // Second stage (PushPull's pull when its pushes and pulls are batched
  // differently): started once every request of the first stage has
  // succeeded; it brings then_requests more requests.
  std::function<void()> then;
  int then_requests = 0;
  // Async: the step after the one pushed, said once the push succeeded
  // (KVWorkerImpl::StepPushed); 0: none.
  uint64_t step_done = 0;

  bool failed() {
    std::lock_guard<std::mutex> lock(mutex);
    return !status.ok();
  }
};

// Seconds since `start` on the steady clock.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The batch's parts as a request's references; *elements: their length in all.
void AddPartRefs(const std::vector<const Part*>& batch,
                 google::protobuf::RepeatedPtrField<v1::PartRef>* refs, uint64_t* elements);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_KV_WORKER_IMPL_H_
