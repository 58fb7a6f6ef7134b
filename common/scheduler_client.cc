#include "common/scheduler_client.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "common/logging.h"
#include "common/membership.h"
#include "common/metrics.h"
#include "common/resend.h"
#include "kubeps.grpc.pb.h"

namespace kubeps {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// 64 random bits (never 0, which the shards' tables read as "none yet"):
// two lives of one node draw the same number with a chance of 2^-64.
uint64_t NewIncarnation() {
  std::random_device device;
  uint64_t value = 0;
  while (value == 0) value = (static_cast<uint64_t>(device()) << 32) | device();
  return value;
}

// Into a registration's NodeInfo or a HeartbeatRequest, which name these
// fields alike.
template <typename Message>
void Describe(const ShardReport& shard, Message* message) {
  message->clear_checkpoint_steps();
  for (uint64_t step : shard.checkpoint_steps) message->add_checkpoint_steps(step);
  if (shard.async_worker_steps) {
    *message->mutable_async_worker_steps() = *shard.async_worker_steps;
  } else {
    message->clear_async_worker_steps();
  }
}

}  // namespace

struct SchedulerClient::Stub {
  std::unique_ptr<v1::Scheduler::Stub> stub;
};

SchedulerClient::SchedulerClient(SchedulerClientOptions options)
    : options_(std::move(options)),
      incarnation_(NewIncarnation()),
      peer_("scheduler " + options_.scheduler_address),
      metrics_(options_.metrics ? options_.metrics : &NullMetrics()),
      caller_(
          std::make_unique<ResendCaller>(options_.resend, options_.token, metrics_, options_.stop)),
      stub_(new Stub{v1::Scheduler::NewStub(
          OpenChannel(options_.scheduler_address, options_.security.get()))}) {}

SchedulerClient::~SchedulerClient() = default;

v1::NodeInfo SchedulerClient::Node() const {
  v1::NodeInfo node;
  node.set_node_id(options_.node_id);
  node.set_role(options_.role == NodeRole::kServer ? v1::SERVER : v1::WORKER);
  node.set_address(options_.address);
  node.set_incarnation(incarnation_);
  if (rank_ >= 0) node.set_rank(rank_);  // to a restarted scheduler: the one to keep
  node.set_metrics_address(options_.metrics_address);
  node.set_checkpoint_step(options_.checkpoint_step);
  node.set_checkpoint_global_batch(options_.shard_at_start.global_batch);
  node.set_checkpoint_worker_count(options_.shard_at_start.checkpoint_workers);
  node.set_checkpoint_batch_size(options_.shard_at_start.batch_size);
  Describe(options_.shard_at_start, &node);
  return node;
}

uint64_t SchedulerClient::Registrations() {
  std::lock_guard<std::mutex> lock(register_again_mutex_);
  return registrations_;
}

// A node's rank is its share of the data and, for a server, of the
// parameters: a restarted scheduler that gives it another (the rank taken by
// a new process meanwhile) leaves it nothing to go on with.
Status SchedulerClient::SameRank(int rank) const {
  if (rank_ < 0 || rank == rank_) return Status::Ok();
  return Status::FailedPrecondition("the restarted scheduler gave " + options_.node_id + " rank " +
                                    std::to_string(rank) + ", not " + std::to_string(rank_));
}

Status SchedulerClient::RegisterAgain(uint64_t seen, const ShardReport* shard) {
  std::lock_guard<std::mutex> once(register_again_mutex_);
  if (registrations_ != seen) return Status::Ok();
  v1::RegisterRequest request;
  *request.mutable_node() = Node();
  if (shard) {
    Describe(*shard, request.mutable_node());
    request.mutable_node()->set_checkpoint_global_batch(shard->global_batch);
    request.mutable_node()->set_checkpoint_batch_size(shard->batch_size);
  }
  request.mutable_node()->set_generation(generation_.load());
  request.mutable_node()->set_restore_step(restore_step_.load());
  request.mutable_node()->set_registered_before(true);
  if (options_.awaits_recovery)
    request.mutable_node()->set_awaits_recovery(options_.awaits_recovery());
  {
    std::lock_guard<std::mutex> lock(membership_mutex_);
    *request.mutable_node()->mutable_membership() = membership_;
    for (int rank : finished_workers_) request.mutable_node()->add_finished_workers(rank);
  }
  v1::RegisterResponse response;
  Status s = caller_->Call(peer_, "Register", [&](grpc::ClientContext& c) {
    return stub_->stub->Register(&c, request, &response);
  });
  if (!s.ok()) return s;
  if (Status same = SameRank(response.rank()); !same.ok()) return same;
  {
    std::lock_guard<std::mutex> lock(key_mutex_);
    registration_key_ = response.registration_key();
  }
  ++registrations_;
  KLOG_INFO << options_.node_id << " registered again with the restarted scheduler (generation "
            << generation_.load() << ")";
  return s;
}

Status SchedulerClient::Register(int* rank) {
  v1::RegisterRequest request;
  *request.mutable_node() = Node();
  v1::RegisterResponse response;
  // The scheduler may not be up yet (its pod or Service still starting):
  // keep trying for as long as a peer wait is allowed.
  ResendPolicy patient = options_.resend;
  patient.max_resends = std::max(patient.max_resends,
                                 options_.peer_wait_limit_ms / std::max(1, patient.backoff_cap_ms));
  ResendCaller startup(patient, options_.token, metrics_, options_.stop);
  Status s = startup.Call(peer_, "Register", [&](grpc::ClientContext& c) {
    return stub_->stub->Register(&c, request, &response);
  });
  if (!s.ok()) return s;
  *rank = response.rank();
  if (rank_ < 0) rank_ = *rank;
  if (response.resume_step() > step_) step_ = response.resume_step();
  {
    std::lock_guard<std::mutex> lock(key_mutex_);
    registration_key_ = response.registration_key();
  }
  return Status::Ok();
}

Status SchedulerClient::AwaitClusterView(ClusterInfo* cluster) {
  const auto start = Clock::now();
  v1::ClusterViewRequest request;
  request.set_wait_ms(options_.long_poll_ms);
  request.set_node_id(options_.node_id);
  for (;;) {
    v1::ClusterView view;
    Status s = caller_->Call(
        peer_, "GetClusterView",
        [&](grpc::ClientContext& c) { return stub_->stub->GetClusterView(&c, request, &view); },
        options_.long_poll_ms);
    if (!s.ok()) return s;
    if (view.register_again()) {
      // The scheduler restarted since this node registered, and waits for it
      // as it waits for the view. The job has not started for this node: a
      // first registration again (RegisterAgain would say it had).
      int rank = -1;
      if (Status r = Register(&rank); !r.ok()) return r;
      if (Status same = SameRank(rank); !same.ok()) return same;
      continue;
    }
    if (view.ready()) {
      if (view.servers_size() != view.num_servers() || view.num_servers() < 1) {
        return Status::Error("the scheduler sent a cluster view with " +
                             std::to_string(view.servers_size()) + " servers for a job of " +
                             std::to_string(view.num_servers()));
      }
      cluster->num_workers = view.num_workers();
      cluster->server_addresses.clear();
      for (const auto& server : view.servers())
        cluster->server_addresses.push_back(server.address());
      return Status::Ok();
    }
    if (MillisSince(start) > options_.peer_wait_limit_ms) {
      return Status::Error("the cluster never completed: " + std::to_string(view.num_servers()) +
                           " servers and " + std::to_string(view.num_workers()) +
                           " workers expected, waited " +
                           std::to_string(options_.peer_wait_limit_ms) + " ms");
    }
  }
}

Status SchedulerClient::Heartbeat(uint64_t restored_generation, HeartbeatAnswer* answer,
                                  const ShardReport* shard) {
  v1::HeartbeatRequest request;
  if (shard) Describe(*shard, &request);
  request.set_node_id(options_.node_id);
  request.set_incarnation(incarnation_);
  request.set_restored_generation(restored_generation);
  request.set_step(step_);
  request.set_heard_job_over(heard_job_over_);
  {
    std::lock_guard<std::mutex> lock(beat_mutex_);
    for (const auto& name : passed_barriers_) request.add_passed_barriers(name);
    if (program_state_missing_) *request.mutable_program_state_missing() = *program_state_missing_;
  }
  uint64_t registrations_seen;
  {
    std::lock_guard<std::mutex> lock(register_again_mutex_);
    registrations_seen = registrations_;
    answer->refused = refused_;
    if (!refused_.empty()) return Status::Ok();
  }
  v1::HeartbeatResponse response;
  if (Status s = caller_->CallOnce(
          peer_, "Heartbeat",
          [&](grpc::ClientContext& c) { return stub_->stub->Heartbeat(&c, request, &response); });
      !s.ok())
    return s;
  if (response.register_again()) {
    // The scheduler restarted. This beat tells nothing; the next one, after
    // the registration, does.
    if (Status r = RegisterAgain(registrations_seen, shard); !r.ok()) {
      // Refused (its rank taken since by a new process, or past the job's):
      // this process cannot go on, and a new one registers anew. Once: a
      // later registration could take a rank freed meanwhile for a process
      // about to end.
      if (r.code() != Status::Code::kFailedPrecondition) return r;
      std::lock_guard<std::mutex> lock(register_again_mutex_);
      refused_ = answer->refused = r.message();
      return Status::Ok();
    }
    return Status::Unavailable(peer_ + " restarted; registered with it again");
  }
  answer->replaced = response.replaced();
  if (answer->replaced) return Status::Ok();
  generation_ = response.generation();
  restore_step_ = response.restore_step();
  answer->generation = response.generation();
  answer->restore_step = response.restore_step();
  answer->keep_state = response.keep_state();
  answer->generation_ready = response.generation_ready();
  answer->shutdown = response.shutdown();
  answer->common_checkpoint_step = response.common_checkpoint_step();
  answer->failure = response.failure();
  answer->failure_reason = response.failure_reason();
  answer->dead_nodes.assign(response.dead_nodes().begin(), response.dead_nodes().end());
  answer->worker_incarnations.clear();
  for (const auto& [node_id, incarnation] : response.worker_incarnations())
    answer->worker_incarnations[node_id] = incarnation;
  answer->membership = response.membership();
  answer->own_step =
      response.has_own_step() ? std::optional<uint64_t>(response.own_step()) : std::nullopt;
  {
    std::lock_guard<std::mutex> lock(membership_mutex_);
    if (response.membership().changes_size() > 0 &&
        NewerMembership(response.membership(), membership_)) {
      membership_ = response.membership();
    }
    finished_workers_.assign(response.finished_workers().begin(),
                             response.finished_workers().end());
  }
  return Status::Ok();
}

void SchedulerClient::SayProgramStateMissing(std::optional<v1::ProgramStateMissing> missing) {
  std::lock_guard<std::mutex> lock(beat_mutex_);
  program_state_missing_ = std::move(missing);
}

Status SchedulerClient::Barrier(const std::string& name, int rank,
                                const std::function<Status()>& stopped) {
  const auto start = Clock::now();
  v1::BarrierRequest request;
  request.set_name(name);
  request.set_rank(rank);
  request.set_wait_ms(options_.long_poll_ms);
  for (;;) {
    v1::BarrierResponse response;
    Status s = caller_->Call(
        peer_, "Barrier",
        [&](grpc::ClientContext& c) { return stub_->stub->Barrier(&c, request, &response); },
        options_.long_poll_ms);
    if (!s.ok()) return s;
    if (response.released()) {
      std::lock_guard<std::mutex> lock(beat_mutex_);
      if (std::find(passed_barriers_.begin(), passed_barriers_.end(), name) ==
          passed_barriers_.end()) {
        passed_barriers_.push_back(name);
      }
      return Status::Ok();
    }
    if (Status why = stopped(); !why.ok()) return why;
    if (MillisSince(start) > options_.peer_wait_limit_ms) {
      return Status::Error("barrier \"" + name + "\" not released after " +
                           std::to_string(options_.peer_wait_limit_ms) + " ms");
    }
  }
}

Status SchedulerClient::Finish(int rank, uint64_t steps_done) {
  v1::FinishRequest request;
  request.set_node_id(options_.node_id);
  request.set_rank(rank);
  request.set_steps_done(steps_done);
  v1::FinishResponse response;
  auto call = [&] {
    {
      std::lock_guard<std::mutex> lock(key_mutex_);
      request.set_registration_key(registration_key_);
    }
    request.set_generation(generation_);
    return caller_->Call(peer_, "Finish", [&](grpc::ClientContext& c) {
      return stub_->stub->Finish(&c, request, &response);
    });
  };
  const uint64_t registrations_seen = Registrations();
  Status s = call();
  // A scheduler that restarted since the last heartbeat does not know this
  // worker yet: register again and say it once more.
  if (s.code() == Status::Code::kFailedPrecondition &&
      RegisterAgain(registrations_seen, nullptr).ok())
    s = call();
  return s;
}

}  // namespace kubeps
