// One batch's calls to its server: Push, Pull and PushPull, each with its
// resends, the shared-memory staging and landing around it, its line of the
// step trace and its metrics. Split from kv_worker.cc, which makes the
// batches and the tickets they complete.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/membership.h"
#include "common/step_trace.h"
#include "worker-agent/kv/kv_worker_impl.h"
#include "worker-agent/kv/tensor_wire.h"

namespace kubeps {
namespace {

using Clock = std::chrono::steady_clock;

// "keys 4-5, 2.00 MB, server 1": what a request carries, for the step trace.
std::string TraceName(const std::vector<const Part*>& batch) {
  uint32_t lowest = UINT32_MAX, highest = 0;
  uint64_t elements = 0;
  for (const Part* part : batch) {
    lowest = std::min(lowest, part->key);
    highest = std::max(highest, part->key);
    elements += part->length;
  }
  char size[32];
  std::snprintf(size, sizeof size, ", %.2f MB, server ", elements * sizeof(float) / 1e6);
  return (lowest == highest ? "key " + std::to_string(lowest)
                            : "keys " + std::to_string(lowest) + "-" + std::to_string(highest)) +
         size + std::to_string(batch.front()->server);
}

}  // namespace

void AddPartRefs(const std::vector<const Part*>& batch,
                 google::protobuf::RepeatedPtrField<v1::PartRef>* refs, uint64_t* elements) {
  *elements = 0;
  for (const Part* part : batch) {
    v1::PartRef* ref = refs->Add();
    ref->set_key(part->key);
    ref->set_offset(part->offset);
    ref->set_length(part->length);
    *elements += part->length;
  }
}

void KVWorkerImpl::PreparePush(const std::vector<const Part*>& batch,
                               const std::vector<const float*>& grads, uint64_t step,
                               const v1::PullRequest* then_pull, OutgoingPush* push) {
  v1::PushRequest& header = push->header;  // the request but its data
  *header.mutable_id() = NextRequestId();
  header.set_worker_rank(rank_);
  header.set_step(step);
  header.set_generation(generation_);
  {
    std::lock_guard<std::mutex> lock(membership_mutex_);
    if (elastic_ && MembershipKnown(membership_, step)) {
      const StepMembership mine = MembershipOf(membership_, rank_, step);
      header.set_contributors(mine.count);
      header.set_share(static_cast<uint32_t>(mine.examples()));
      header.set_global_batch(static_cast<uint32_t>(mine.global_batch));
    }
  }
  AddPartRefs(batch, header.mutable_parts(), &push->elements);
  if (encoding_ != GradientEncoding::kFloat32) {
    header.set_encoding(static_cast<v1::GradientEncoding>(encoding_));
    header.set_threshold(options_.compression_threshold);
  }
  if (then_pull) *header.mutable_then_pull() = *then_pull;
  const int server = batch.front()->server;
  // Encoded once, into shared memory or into the request: a resend sends
  // these very bytes, and a two-bit residual moves on once per push. The
  // data go from the tensors themselves where they need no encoding.
  push->staged = shared_ && shared_->MayTry(server) &&
                 shared_->StagePush(batch, grads, encoding_, options_.compression_threshold,
                                    &residuals_, header.mutable_shared());
  // Staging regions still in use (a push of the same tensors in flight):
  // the push goes with its data, naming no segment.
  if (!push->staged) header.clear_shared();
  if (push->staged) {
    push->request = PushRequestWithBytes(header, "");
  } else if (encoding_ == GradientEncoding::kFloat32) {
    push->request = PushRequestOverTensors(header, batch, grads);
  } else {
    push->request = PushRequestEncoded(header, batch, grads, encoding_, &residuals_);
  }
}

Status KVWorkerImpl::PushSent(const std::vector<const Part*>& batch, uint64_t step,
                              const OutgoingPush& push, const Status& sent, Clock::time_point start,
                              const char* what) {
  if (push.staged) shared_->EndPush(batch);
  Acknowledge(push.header.id().seq());
  if (!sent.ok() && (sent.IsAborted() || RollbackAnnounced())) {
    return Status::Aborted(std::string(what) + " of step " + std::to_string(step) + " to " +
                           ServerName(batch.front()->server) + ": the job rolled back");
  }
  if (!sent.ok()) return sent;
  if (StepTrace::Get().open()) {
    StepTrace::Get().Record(
        std::string(what) + " of step " + std::to_string(step) + ", " + TraceName(batch), start,
        Clock::now());
  }
  push_latency_->Observe(SecondsSince(start));
  push_bytes_->Increment(static_cast<double>(push.elements * sizeof(float)));
  if (push.header.has_shared())
    shared_bytes_->Increment(static_cast<double>(push.elements * sizeof(float)));
  return sent;
}

Status KVWorkerImpl::PushBatch(const std::vector<const Part*>& batch,
                               const std::vector<const float*>& grads, uint64_t step) {
  const auto start = Clock::now();
  OutgoingPush push;
  PreparePush(batch, grads, step, nullptr, &push);
  const auto link = Link(batch.front()->server);
  Status s = SendPush(batch, &push, "Push", 0, [&](grpc::ClientContext& c) {
    return CallPush(link->channel.get(), &c, push.request);
  });
  return PushSent(batch, step, push, s, start, "push");
}

// Sends a push, with resends. A staged push the server cannot read (it
// cannot map the segment after all) is sent again, the same request id,
// with its staged bytes in the request: the server refused it before
// looking at its id, so it is applied once.
Status KVWorkerImpl::SendPush(const std::vector<const Part*>& batch, OutgoingPush* push,
                              const char* rpc, int extra_wait_ms,
                              const std::function<grpc::Status(grpc::ClientContext&)>& call) {
  const int server = batch.front()->server;
  bool unmapped = false;
  auto send = [&] {
    const auto since = Clock::now();
    bool said = false;
    for (;;) {
      Status s = caller_.Call(
          ServerName(server), rpc,
          [&](grpc::ClientContext& c) {
            grpc::Status status = call(c);
            unmapped = push->staged &&
                       status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
                       status.error_message().rfind("shared memory:", 0) == 0;
            return status;
          },
          extra_wait_ms, [this] { return GivesUpResending(); });
      if (!WaitsOnSilentServer(server, &s, since, &said)) return s;
    }
  };
  Status s = send();
  if (!unmapped) {
    if (push->staged && s.ok()) shared_->Learned(server, true);
    return s;
  }
  // Refused after the job stopped or rolled back: that is the answer (s
  // says it), not a push to send again over TCP.
  if (GivesUpResending()) return s;
  if (shared_->Learned(server, false)) {
    KLOG_INFO << ServerName(server) << " cannot read this worker's shared memory; "
              << "tensors to and from it go over TCP: " << s.message();
  }
  std::string data = shared_->StagedBytes(batch, encoding_);
  push->header.clear_shared();
  push->request = PushRequestWithBytes(push->header, std::move(data));
  shared_->EndPush(batch);
  push->staged = false;
  return send();
}

// A worker that gave up on a silent server would gain nothing and cost the
// job a restart of its backoffLimit, one per worker: a drained server's pod
// takes longer to come back (scheduling, the image, the checkpoint) than the
// resends last, and its return opens a recovery, which ends the wait.
bool KVWorkerImpl::WaitsOnSilentServer(int server, Status* s, Clock::time_point since,
                                       bool* said) const {
  if (s->ok()) return false;
  if (Status stopped = JobStopped(); !stopped.ok()) {
    *s = stopped;
    return false;
  }
  if (s->code() != Status::Code::kUnavailable) return false;
  if (options_.resend.max_resends == 0 || RollbackAnnounced() || stopping_) return false;
  if (SecondsSince(since) * 1000 > options_.peer_wait_limit_ms) return false;
  if (!*said) {
    KLOG_ERROR << ServerName(server) << " answers no request; waiting for it to come back, or "
               << "for the job's recovery, up to " << options_.peer_wait_limit_ms / 1000
               << " s: " << s->message();
    *said = true;
  }
  return true;
}

bool KVWorkerImpl::GivesUpResending() const { return RollbackAnnounced() || !JobStopped().ok(); }

bool KVWorkerImpl::OpenPull(const std::vector<const Part*>& batch,
                            const std::vector<float*>& values, uint64_t min_version,
                            v1::PullRequest* request, uint64_t* elements) {
  AddPartRefs(batch, request->mutable_parts(), elements);
  request->set_min_version(min_version);
  request->set_wait_ms(options_.pull_wait_ms);
  request->set_generation(generation_);
  // Offered to a server on this host, the answer may land in shared memory.
  const int server = batch.front()->server;
  return shared_ && shared_->MayTry(server) &&
         shared_->OpenPull(batch, values, request->mutable_shared());
}

std::function<void()> KVWorkerImpl::AnswerWrites(const std::vector<const Part*>& batch,
                                                 const std::vector<float*>& values) {
  if (!shared_) return {};
  return [this, &batch, &values] { shared_->Written(batch, values); };
}

// Ends a pull's offer of landing regions, when the pull is answered or gives up.
struct KVWorkerImpl::PullOffer {
  SharedMemoryPath* shared;
  const std::vector<const Part*>& batch;
  ~PullOffer() {
    if (shared) shared->EndPull(batch);
  }
};

Status KVWorkerImpl::PullAnswered(const std::vector<const Part*>& batch,
                                  const v1::PullRequest& request, bool offered, uint64_t elements,
                                  const std::vector<float*>& values,
                                  const std::shared_ptr<Pending>& pending, PullAnswer* answer) {
  if (offered) {
    shared_->Learned(batch.front()->server, answer->landed);
    if (answer->landed) {
      if (Status c = shared_->TakeLanded(batch, request.shared(), answer->mapped, values,
                                         &answer->version);
          !c.ok()) {
        return c;
      }
      shared_bytes_->Increment(static_cast<double>(elements * sizeof(float)));
      uint64_t mapped = 0;
      for (const v1::MappedValues& m : answer->mapped) mapped += batch[m.part()]->length;
      mapped_bytes_->Increment(static_cast<double>(mapped * sizeof(float)));
      answer->bytes = elements * sizeof(float);
    }
  }
  pull_bytes_->Increment(static_cast<double>(answer->bytes));
  std::lock_guard<std::mutex> lock(pending->mutex);
  pending->version = std::min(pending->version, answer->version);
  return Status::Ok();
}

Status KVWorkerImpl::PushPullBatch(const std::vector<const Part*>& batch,
                                   const std::vector<const float*>& grads,
                                   const std::vector<float*>& values, uint64_t step,
                                   const std::shared_ptr<Pending>& pending, bool* answered) {
  const auto start = Clock::now();
  *answered = false;
  v1::PullRequest pull;
  uint64_t elements = 0;
  const bool offered = OpenPull(batch, values, step + 1, &pull, &elements);
  PullOffer offer{offered ? shared_.get() : nullptr, batch};
  OutgoingPush push;
  PreparePush(batch, grads, step, &pull, &push);
  const auto link = Link(batch.front()->server);
  PullAnswer answer;
  Status s = SendPush(batch, &push, "PushPull", options_.pull_wait_ms, [&](grpc::ClientContext& c) {
    return CallPushPull(link->channel.get(), &c, push.request, push.header.then_pull(), batch,
                        values, &answer, AnswerWrites(batch, values));
  });
  if (Status pushed = PushSent(batch, step, push, s, start, "push and pull"); !pushed.ok())
    return pushed;
  if (!answer.ready) return Status::Ok();  // a peer is late: the caller pulls
  Status taken =
      PullAnswered(batch, push.header.then_pull(), offered, elements, values, pending, &answer);
  if (taken.code() == Status::Code::kGone) return Status::Ok();  // the caller pulls again
  *answered = true;
  pull_latency_->Observe(SecondsSince(start));
  return taken;
}

Status KVWorkerImpl::PullBatch(const std::vector<const Part*>& batch,
                               const std::vector<float*>& values, uint64_t min_version,
                               const std::shared_ptr<Pending>& pending) {
  const auto start = Clock::now();
  v1::PullRequest request;
  uint64_t elements = 0;
  const bool offered = OpenPull(batch, values, min_version, &request, &elements);
  PullOffer offer{offered ? shared_.get() : nullptr, batch};
  const int server = batch.front()->server;
  const auto link = Link(server);
  auto last_report = start;
  bool said_silent = false;
  for (;;) {
    PullAnswer answer;
    if (RollbackAnnounced()) {
      return Status::Aborted("pull from " + ServerName(server) + ": the job rolled back");
    }
    // Another request of the ticket failed (a refused push): what this pull
    // waits for may never come, and the ticket's error is already decided.
    if (pending->failed())
      return Status::Aborted("pull from " + ServerName(server) + ": not needed");
    Status s = caller_.Call(
        ServerName(server), "Pull",
        [&](grpc::ClientContext& c) {
          return CallPull(link->channel.get(), &c, request, batch, values, &answer,
                          AnswerWrites(batch, values));
        },
        options_.pull_wait_ms, [this] { return GivesUpResending(); });
    if (!s.ok() && (s.IsAborted() || RollbackAnnounced())) {
      return Status::Aborted("pull from " + ServerName(server) + ": the job rolled back");
    }
    if (WaitsOnSilentServer(server, &s, start, &said_silent)) continue;
    if (!s.ok()) return s;
    if (answer.ready) {
      Status taken = PullAnswered(batch, request, offered, elements, values, pending, &answer);
      if (taken.code() != Status::Code::kGone) {
        if (StepTrace::Get().open()) {
          StepTrace::Get().Record("pull of version " + std::to_string(min_version) + ", " +
                                      TraceName(batch) + " (waits for every worker's push)",
                                  start, Clock::now());
        }
        pull_latency_->Observe(SecondsSince(start));
        return taken;
      }
      // The server freed the values it named since it answered: it rolled
      // back (asked again, it says so) or is going away (a recovery
      // follows). Asked again after a pause, as a pull not ready.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Not ready (or gone): some worker has not pushed this step yet (slow,
    // or being restarted). Keep waiting, say so now and then, and give up
    // only after the peer wait limit.
    if (SecondsSince(start) * 1000 > options_.peer_wait_limit_ms) {
      return Status::Error("gave up waiting for version " + std::to_string(min_version) + " on " +
                           ServerName(server) + " after " +
                           std::to_string(options_.peer_wait_limit_ms) + " ms");
    }
    if (SecondsSince(last_report) > 10) {
      KLOG_INFO << "still waiting for version " << min_version << " on " << ServerName(server)
                << " (" << WhyAPeerMayBeLate() << ")";
      last_report = Clock::now();
    }
  }
}

}  // namespace kubeps
