#include "ps-server/scheduler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <random>

#include "common/host_port.h"
#include "common/logging.h"
#include "common/long_poll.h"
#include "common/membership.h"

namespace kubeps {
namespace {

const char* RoleName(v1::Role role) {
  switch (role) {
    case v1::SERVER:
      return "server";
    case v1::WORKER:
      return "worker";
    default:
      return "unknown";
  }
}

// Replicas are named like "worker-3" (and pods "job-worker-3"): the number
// is the rank they would like, so logs, pod names and ranks agree.
int PreferredRank(const std::string& node_id) {
  size_t dash = node_id.rfind('-');
  if (dash == std::string::npos || dash + 1 == node_id.size()) return -1;
  int rank = 0;
  for (size_t i = dash + 1; i < node_id.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(node_id[i])) || rank > 1000000) return -1;
    rank = rank * 10 + (node_id[i] - '0');
  }
  return rank;
}

int Registered(const std::vector<std::string>& ids) {
  int n = 0;
  for (const auto& id : ids) n += !id.empty();
  return n;
}

// The preferred rank when it is free, else the lowest free one.
int FreeRank(const std::vector<std::string>& ids, int preferred, int expected) {
  if (preferred >= 0 && preferred < expected && ids[preferred].empty()) return preferred;
  for (int r = 0; r < expected; ++r) {
    if (ids[r].empty()) return r;
  }
  return -1;
}

// A node's rank from before the scheduler restarted, taken since (by a new
// process) or past the job's ranks: refused before anything is noted.
grpc::Status RankFree(const v1::NodeInfo& node, const std::vector<std::string>& ids, int expected) {
  const int rank = node.rank();
  const bool in_range = rank >= 0 && rank < expected;
  if (in_range && ids[rank].empty()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      node.node_id() + " had rank " + std::to_string(rank) +
                          " before the scheduler restarted, which " +
                          (in_range ? ids[rank] + " holds now" : "the job has no more") +
                          ": it cannot go on under another");
}

// 128 random bits, hex.
std::string NewRegistrationKey() {
  std::random_device device;
  char hex[33];
  for (int i = 0; i < 4; ++i) std::snprintf(hex + 8 * i, 9, "%08x", device());
  return hex;
}

// Compares in time independent of where the strings differ.
bool SameKey(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A job whose workers are fixed has them all, from the start, for ever.
ElasticOptions WorkersOf(const SchedulerOptions& options) {
  if (options.elastic.elastic) return options.elastic;
  ElasticOptions fixed;
  fixed.initial_workers = fixed.min_workers = fixed.max_workers = options.num_workers;
  return fixed;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& options, MetricsServer* metrics)
    : options_(options),
      server_ids_(options.num_servers),
      worker_ids_(options.elastic.elastic ? options.elastic.max_workers : options.num_workers),
      elastic_(WorkersOf(options)),
      registered_(metrics->Gauge("kubeps_scheduler_registered_nodes",
                                 "Nodes (servers and workers) registered with the scheduler")),
      workers_(metrics->Gauge("kubeps_job_workers",
                              "Workers that compute the job's steps (an elastic job's change "
                              "with the membership)")),
      common_checkpoint_(metrics->Gauge(
          "kubeps_scheduler_common_checkpoint_step",
          "The newest step every shard holds a checkpoint of (-1: none known): the step a "
          "recovery goes back to")) {
  common_checkpoint_.Set(-1);
  workers_.Set(static_cast<double>(elastic_.Members().size()));
}

grpc::Status Scheduler::Register(const v1::RegisterRequest* request,
                                 v1::RegisterResponse* response) {
  const v1::NodeInfo& node = request->node();
  if (node.node_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "node.node_id is empty");
  }
  std::vector<std::string>* ids = nullptr;
  int expected = 0;
  if (node.role() == v1::SERVER) {
    if (node.address().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "server " + node.node_id() + " sent no address");
    }
    // Every worker dials this address: one it cannot parse ("fd00::7:5000",
    // an IPv6 address without brackets) is refused here, naming the server,
    // rather than failing on every worker.
    std::string host;
    int port = 0;
    if (Status s = SplitHostPort(node.address(), &host, &port); !s.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "server " + node.node_id() + ": " + s.message());
    }
    ids = &server_ids_;
    expected = options_.num_servers;
  } else if (node.role() == v1::WORKER) {
    ids = &worker_ids_;
    expected = WorkerSlots();
  } else {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "node.role must be SERVER or WORKER");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto existing = members_.find(node.node_id());
  int rank;
  if (existing != members_.end()) {
    if (existing->second.info.role() != node.role()) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          node.node_id() + " registered before as a " + RoleName(existing->second.info.role()));
    }
    const Member& registered = existing->second;
    if (registered.info.incarnation() != node.incarnation()) {
      const auto silent_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - registered.last_seen)
              .count();
      if (silent_ms < options_.replace_silent_after_ms) {
        // A restarted process's predecessor is dead and falls silent; one
        // that still beats is alive, and a second process claiming its
        // name (a hostile or confused client) would take its rank, its
        // address and, for a server, open a recovery. UNAVAILABLE: a real
        // restart is resent until the old life has been silent long enough.
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            node.node_id() + " is registered and alive (incarnation " +
                                std::to_string(registered.info.incarnation()) + ", heard from " +
                                std::to_string(silent_ms) +
                                " ms ago): another process claiming its name is "
                                "refused until that one has been silent for " +
                                std::to_string(options_.replace_silent_after_ms) + " ms");
      }
    }
    rank = existing->second.info.rank();
    if (node.role() == v1::WORKER && !options_.sync)
      response->set_resume_step(existing->second.reported_step);
    if (node.role() == v1::SERVER) {
      checkpoint_steps_[node.node_id()].assign(node.checkpoint_steps().begin(),
                                               node.checkpoint_steps().end());
    }
    if (existing->second.info.incarnation() != node.incarnation()) {
      KLOG_INFO << RoleName(node.role()) << " " << rank << " (" << node.node_id()
                << ") re-registered after a restart; it keeps rank " << rank;
      departed_.erase(node.node_id());  // a new life of a worker that had left may join again
      if (node.role() == v1::WORKER) {
        finished_workers_.erase(rank);
        elastic_.Departed(rank);
      }
      if (node.role() == v1::SERVER && options_.sync && started_) StartRecovery(node);
      if (node.role() == v1::WORKER && options_.sync && options_.workers_keep_parameters &&
          started_) {
        if (GenerationReady()) {
          RollBackForRestartedWorker(node);
        } else {
          // A rollback is being restored (another restart): this worker
          // joins it, at a checkpoint step too. A new one could pick a step
          // a shard has deleted since, as it restored, before its beat says.
          KLOG_INFO << node.node_id() << " restarted during the rollback to step " << restore_step_
                    << " (generation " << generation_ << "): it joins it";
        }
      }
    }
  } else {
    if (Registered(*ids) >= expected) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "the job expects " + std::to_string(expected) + " " +
                              RoleName(node.role()) + "s and all ranks are taken; " +
                              node.node_id() + " is one too many");
    }
    if (node.has_rank()) {
      // A node that had a rank before this scheduler started keeps it,
      // which its id need not say; given another, it would train on
      // another's share of the data or serve another's parameters.
      if (grpc::Status kept = RankFree(node, *ids, expected); !kept.ok()) return kept;
      rank = node.rank();
    } else {
      rank = FreeRank(*ids, PreferredRank(node.node_id()), expected);
    }
    (*ids)[rank] = node.node_id();
    // A new process in the rank of a worker another node said had finished.
    if (node.role() == v1::WORKER && !node.registered_before()) finished_workers_.erase(rank);
    if (node.role() == v1::SERVER) {
      checkpoint_steps_[node.node_id()].assign(node.checkpoint_steps().begin(),
                                               node.checkpoint_steps().end());
    }
    // A node registering again: this scheduler restarted and lost its
    // memory. The job's recovery state is rebuilt from what the nodes know
    // rather than from a state file: the nodes outlive the scheduler by
    // design, a file would need a volume on Kubernetes and could disagree
    // with them. Such a job has started already: no first start (which would
    // roll it back to the shards' newest common checkpoint) ever follows.
    if (node.registered_before()) {
      restarted_ = true;
      elastic_.Adopt(node.membership());
      AdoptFinishedWorkers(node);
    }
    if (node.generation() > generation_) {
      generation_ = node.generation();
      restore_step_ = node.restore_step();
      restored_.clear();
      KLOG_INFO << RoleName(node.role()) << " " << rank << " (" << node.node_id()
                << ") registered again after a scheduler restart; the job is in recovery "
                << "generation " << generation_ << " from step " << restore_step_;
    }
  }
  Member& member = members_[node.node_id()];
  // A resend of the same life's registration keeps its key.
  if (member.registration_key.empty() || member.info.incarnation() != node.incarnation()) {
    member.registration_key = NewRegistrationKey();
    // Before the start, a restarted scheduler decides it with the view
    // (ServersRestartedWithTheScheduler).
    member.keeps_state =
        node.role() == v1::SERVER && !options_.sync && !node.registered_before() && started_;
  }
  member.info = node;
  member.info.set_rank(rank);
  member.last_seen = Clock::now();
  ++epoch_;
  registered_.Set(static_cast<double>(Registered(server_ids_) + Registered(worker_ids_)));
  if (ViewReady() && !started_) {
    started_ = true;
    started_at_ = Clock::now();
    if (!restarted_) {
      FirstStart();
    } else {
      ServersRestartedWithTheScheduler();
    }
    // Every worker that registered: they wait for the view, silent till then.
    const std::vector<int> workers = RegisteredWorkers(/*beating=*/false);
    if (elastic_.elastic() && !elastic_.started()) KeepCheckpointsGlobalBatch(workers.size());
    elastic_.Start(workers, restore_step_, Clock::now());
  }
  response->set_rank(rank);
  response->set_registration_key(member.registration_key);
  changed_.notify_all();
  return grpc::Status::OK;
}

bool Scheduler::GenerationReady() const {
  return generation_ == 0 || static_cast<int>(restored_.size()) == options_.num_servers;
}

bool Scheduler::ViewReady() const {
  if (Registered(server_ids_) != options_.num_servers) return false;
  // A worker that finished before this scheduler restarted never registers
  // with it: its process has ended.
  const auto here = [&](int rank) {
    return !worker_ids_[rank].empty() || finished_workers_.count(rank) > 0;
  };
  if (elastic_.elastic() && (started_ || restarted_)) {
    // The current members (a restarted scheduler learnt them back from the
    // workers), whatever the number the job started with: a dropped worker
    // is not waited for.
    const std::vector<int> members = elastic_.Members();
    return std::all_of(members.begin(), members.end(), here);
  }
  int workers = 0;
  for (int rank = 0; rank < static_cast<int>(worker_ids_.size()); ++rank) workers += here(rank);
  return workers >= options_.num_workers;
}

// The workers a node registering again heard had finished, where none has
// registered here under that rank since.
void Scheduler::AdoptFinishedWorkers(const v1::NodeInfo& node) {
  for (int rank : node.finished_workers()) {
    if (rank >= 0 && rank < WorkerSlots() && worker_ids_[rank].empty() &&
        finished_workers_.insert(rank).second) {
      KLOG_INFO << node.node_id() << " says worker " << rank << " finished before the restart";
    }
  }
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

// The end of a long poll that did not end with its condition met: an error
// for a cancelled call or a stopping scheduler, OK (not ready) for a wait
// that ran out. Requires mutex_.
grpc::Status Scheduler::LongPollOutcome(const char* call, LongPollEnd end) const {
  if (end == LongPollEnd::kCancelled) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        std::string(call) + " was cancelled while it waited");
  }
  if (stopping_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the scheduler is shutting down (the job is over or it was stopped)");
  }
  return grpc::Status::OK;
}

grpc::Status Scheduler::GetClusterView(const v1::ClusterViewRequest* request,
                                       v1::ClusterView* response,
                                       const std::function<bool()>& cancelled) {
  if (auto w = CheckLongPollWait("GetClusterView", request->wait_ms()); !w.ok()) return w;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!request->node_id().empty() && !members_.count(request->node_id())) {
    // Registered with the scheduler before this one (restarted since):
    // waited for here, it would wait for this scheduler for ever.
    response->set_register_again(true);
    return grpc::Status::OK;
  }
  const LongPollEnd end = WaitLongPoll(
      lock, changed_, request->wait_ms(), [&] { return stopping_ || ViewReady(); }, cancelled);
  if (grpc::Status s = LongPollOutcome("GetClusterView", end); !s.ok()) return s;
  const bool ready = end == LongPollEnd::kReady;
  response->set_ready(ready);
  response->set_num_servers(options_.num_servers);
  response->set_num_workers(options_.num_workers);
  response->set_epoch(epoch_);
  if (!ready) return grpc::Status::OK;
  for (const auto& id : server_ids_) *response->add_servers() = members_.at(id).info;
  for (const auto& id : worker_ids_) {
    if (!id.empty()) *response->add_workers() = members_.at(id).info;  // elastic: free slots
  }
  return grpc::Status::OK;
}

grpc::Status Scheduler::Barrier(const v1::BarrierRequest* request, v1::BarrierResponse* response,
                                const std::function<bool()>& cancelled) {
  if (auto w = CheckLongPollWait("Barrier", request->wait_ms()); !w.ok()) return w;
  if (request->rank() < 0 || request->rank() >= WorkerSlots()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "barrier rank " + std::to_string(request->rank()) + " out of range");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const std::string& name = request->name();
  if (!released_barriers_.count(name)) {
    barriers_[name].insert(request->rank());
    if (ReleaseIfComplete(name)) changed_.notify_all();
  }
  // An elastic job's members change while it waits (a scale-down, a drop).
  const LongPollEnd end = WaitLongPoll(
      lock, changed_, request->wait_ms(),
      [&] { return stopping_ || released_barriers_.count(name) > 0 || ReleaseIfComplete(name); },
      cancelled);
  if (grpc::Status s = LongPollOutcome("Barrier", end); !s.ok()) return s;
  response->set_released(end == LongPollEnd::kReady);
  return grpc::Status::OK;
}

// Every worker of the job arrived: a fixed job's all, an elastic job's
// members of the step the workers are at, whatever the number it started
// with (one taken in at a later step is not waited for: it waits for that).
bool Scheduler::ReleaseIfComplete(const std::string& name) {
  auto it = barriers_.find(name);
  if (it == barriers_.end()) return false;
  const std::set<int>& arrived = it->second;
  bool complete = static_cast<int>(arrived.size()) == options_.num_workers;
  if (elastic_.elastic() && elastic_.started()) {
    const std::vector<int> members = elastic_.MembersOfNow();
    complete = std::all_of(members.begin(), members.end(),
                           [&](int rank) { return arrived.count(rank) > 0; });
  }
  if (!complete) return false;
  released_barriers_.insert(name);
  barriers_.erase(it);
  return true;
}

std::vector<std::string> Scheduler::DeadNodes() const {
  std::vector<std::string> dead;
  auto limit = Clock::now() - std::chrono::milliseconds(options_.dead_after_ms);
  for (const auto& [id, member] : members_) {
    bool finished = member.info.role() == v1::WORKER &&
                    (finished_workers_.count(member.info.rank()) || departed_.count(id));
    if (!finished && member.last_seen < limit) dead.push_back(id);
  }
  return dead;
}

// A sync step waits for every worker's push and every shard's update, and
// nothing else said which node a stalled job waited for.
void Scheduler::SaySilentNodes(const std::vector<std::string>& dead) {
  // Not while workers wait for the view (they beat once they have it), nor
  // as the nodes exit at the job's end.
  const auto now = Clock::now();
  if (!started_ || now - started_at_ < std::chrono::milliseconds(options_.dead_after_ms) ||
      !failure_.empty() || MembersFinished()) {
    return;
  }
  for (const std::string& id : dead) {
    if (!said_silent_.emplace(id, members_.at(id).last_seen).second) continue;
    KLOG_ERROR << id << " has sent the scheduler nothing for " << options_.dead_after_ms / 1000.0
               << " s (its process frozen or overloaded, its node cut off or going away)"
               << (options_.sync ? ": the job's steps wait for it" : "");
  }
  for (auto it = said_silent_.begin(); it != said_silent_.end();) {
    if (std::find(dead.begin(), dead.end(), it->first) != dead.end()) {
      ++it;
      continue;
    }
    if (members_.count(it->first)) {  // not an elastic job's worker dropped
      const double silent_s = std::chrono::duration<double>(now - it->second).count();
      KLOG_INFO << it->first << " is heard again, about " << std::lround(silent_s)
                << " s after its last word";
    }
    it = said_silent_.erase(it);
  }
}

grpc::Status Scheduler::Heartbeat(const v1::HeartbeatRequest* request,
                                  v1::HeartbeatResponse* response) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = members_.find(request->node_id());
  if (it == members_.end()) {
    // This scheduler restarted since the node registered (or the node was
    // never registered): it learns the node again from its registration.
    // The rest of the answer is filled in as before; the node ignores it.
    response->set_register_again(true);
  } else if (it->second.info.incarnation() != request->incarnation()) {
    // A newer process of this node registered since. Told the job's
    // generation, an old server would roll its folder back to the restore
    // step, deleting what its successor wrote since: it is told only this.
    response->set_replaced(true);
    return grpc::Status::OK;
  }
  for (const auto& name : request->passed_barriers()) {
    // A barrier some worker passed was released, though a restarted
    // scheduler may not remember it.
    if (it != members_.end() && it->second.info.role() == v1::WORKER &&
        released_barriers_.insert(name).second) {
      barriers_.erase(name);
      changed_.notify_all();
    }
  }
  if (it != members_.end() && it->second.info.incarnation() == request->incarnation()) {
    it->second.last_seen = Clock::now();
    if (it->second.info.role() == v1::WORKER) {
      elastic_.ReportStep(request->step(), Clock::now());
      it->second.reported_step = std::max(it->second.reported_step, request->step());
    }
    if (it->second.info.role() == v1::WORKER && request->has_program_state_missing())
      RollBackToHeldState(it->first, request->program_state_missing());
  }
  ReviseMembership();
  it = members_.find(request->node_id());  // a worker dropped just now is gone
  const bool current = it != members_.end() && it->second.info.role() == v1::SERVER &&
                       it->second.info.incarnation() == request->incarnation();
  if (current && request->restored_generation() == generation_) {
    restored_.insert(request->node_id());
  }
  if (current) {
    checkpoint_steps_[request->node_id()].assign(request->checkpoint_steps().begin(),
                                                 request->checkpoint_steps().end());
    // The shard's word on each async worker's step, as it is now (OwnStep).
    if (request->has_async_worker_steps()) {
      *it->second.info.mutable_async_worker_steps() = request->async_worker_steps();
    } else {
      it->second.info.clear_async_worker_steps();
    }
    // During a recovery a shard may still list steps past the one restored
    // (a write that ended after the recovery began), which it deletes once
    // it restored: the step in common is said from the restored lists only.
    if (ViewReady() && GenerationReady()) common_step_ = NewestCommonStep(ServerSteps());
  }
  // Until every node has registered again, a restarted scheduler does not
  // know what its servers' restarts call for (a new server process may come
  // first): a server is brought into no generation before then.
  response->set_generation(current && !started_ ? request->restored_generation() : generation_);
  response->set_restore_step(restore_step_);
  response->set_keep_state(current && it->second.keeps_state);
  response->set_generation_ready(failure_.empty() && GenerationReady());
  response->set_common_checkpoint_step(common_step_);
  common_checkpoint_.Set(static_cast<double>(common_step_));
  response->set_failure(failure_);
  response->set_failure_reason(failure_reason_);
  const std::vector<std::string> dead = DeadNodes();
  for (const std::string& id : dead) response->add_dead_nodes(id);
  SaySilentNodes(dead);
  const bool shutdown = MembersFinished();
  response->set_shutdown(shutdown);
  for (int rank : finished_workers_) response->add_finished_workers(rank);
  if (elastic_.elastic() && it != members_.end() && it->second.info.role() == v1::WORKER) {
    *response->mutable_membership() = elastic_.schedule();
  }
  // Only with the generation ready: until every shard restored it, some
  // may still say the steps of a newer checkpoint than the one restored.
  if (!options_.sync && it != members_.end() && it->second.info.role() == v1::WORKER &&
      response->generation_ready()) {
    if (std::optional<uint64_t> own = OwnStep(it->second)) response->set_own_step(*own);
  }
  response->set_epoch(epoch_);
  if (current) {
    for (const auto& id : worker_ids_) {
      if (!id.empty())
        (*response->mutable_worker_incarnations())[id] = members_.at(id).info.incarnation();
    }
  }
  if (shutdown && request->heard_job_over() && it != members_.end() &&
      it->second.info.role() == v1::SERVER) {
    told_to_stop_.insert(request->node_id());
    changed_.notify_all();
  }
  return grpc::Status::OK;
}

grpc::Status Scheduler::Finish(const v1::FinishRequest* request, v1::FinishResponse* response) {
  if (request->rank() < 0 || request->rank() >= WorkerSlots()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "finish rank " + std::to_string(request->rank()) + " out of range");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto member = members_.find(request->node_id());
  if (member == members_.end() || member->second.info.role() != v1::WORKER ||
      member->second.info.rank() != request->rank()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        request->node_id() + " is not the registered worker of rank " +
                            std::to_string(request->rank()));
  }
  if (!SameKey(member->second.registration_key, request->registration_key())) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "Finish for " + request->node_id() + " (rank " +
                            std::to_string(request->rank()) +
                            ") refused: the caller is not the process registered under that "
                            "name (its registration key does not match)");
  }
  const std::vector<int> members = elastic_.Members();
  if (elastic_.elastic() && !std::binary_search(members.begin(), members.end(), request->rank())) {
    // Scaled away: it pushed its last step and leaves; the job goes on.
    if (departed_.insert(request->node_id()).second) {
      KLOG_INFO << "worker " << request->rank() << " (" << request->node_id()
                << ") left the job: it was scaled away";
      elastic_.Departed(request->rank());
      // It left before hearing of a rollback to before its last step: the
      // steps redone without it are planned again, in a generation of their own.
      if (request->generation() < generation_ && options_.sync) {
        if (std::string line = elastic_.Rollback(restore_step_, {request->rank()}); !line.empty()) {
          OpenGeneration(restore_step_);
          KLOG_INFO << "recovery: generation " << generation_ << " redoes the steps from "
                    << restore_step_ << " without it; " << line;
        }
      }
    }
  } else {
    finished_workers_.insert(request->rank());
    finished_steps_ = std::max(finished_steps_, request->steps_done());
    // Its program has ended, and the job went back to before its last step
    // (another worker restarted while it evaluated): nobody can redo its
    // steps, and the others would wait for them until their limits.
    // Unless it went back no further than the step after its last one.
    if (options_.sync && options_.workers_keep_parameters && request->generation() < generation_ &&
        (request->steps_done() == 0 || restore_step_ < request->steps_done()) && failure_.empty()) {
      failure_ = "worker " + std::to_string(request->rank()) + " (" + request->node_id() +
                 ") finished in generation " + std::to_string(request->generation()) +
                 ", before the rollback to step " + std::to_string(restore_step_) +
                 " (generation " + std::to_string(generation_) +
                 ") that another worker's restart called for: its program has ended and cannot "
                 "redo those steps";
      KLOG_ERROR << failure_;
    }
  }
  changed_.notify_all();
  return grpc::Status::OK;
}

bool Scheduler::AllWorkersFinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return MembersFinished();
}

int Scheduler::WorkerSlots() const {
  return options_.elastic.elastic ? options_.elastic.max_workers : options_.num_workers;
}

bool Scheduler::MembersFinished() const {
  const std::vector<int> members = elastic_.Members();
  if (members.empty()) return false;  // an elastic job before its start
  for (int rank : members) {
    if (!finished_workers_.count(rank)) return false;
  }
  return true;
}

std::vector<int> Scheduler::ComputingWorkers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return elastic_.MembersOfNow();
}

std::string Scheduler::SetDesiredWorkers(int workers, std::optional<uint64_t> at_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!elastic_.elastic()) return "the job's workers are fixed: it has no elasticPolicy";
  const int before = elastic_.desired();
  std::string refused = elastic_.SetDesired(workers, at_step);
  if (refused.empty()) {
    KLOG_INFO << "the job is to have " << workers << " workers (it had " << before << ")"
              << (at_step ? " from step " + std::to_string(*at_step) : std::string());
    ReviseMembership();
  }
  return refused;
}

std::vector<int> Scheduler::RegisteredWorkers(bool beating) const {
  std::vector<int> ranks;
  const auto limit = Clock::now() - std::chrono::milliseconds(options_.dead_after_ms);
  for (int rank = 0; rank < static_cast<int>(worker_ids_.size()); ++rank) {
    const std::string& id = worker_ids_[rank];
    if (id.empty() || departed_.count(id)) continue;
    if (!beating || members_.at(id).last_seen >= limit) ranks.push_back(rank);
  }
  return ranks;
}

std::set<int> Scheduler::GoneWorkers() const {
  std::set<int> gone;
  for (int rank = 0; rank < static_cast<int>(worker_ids_.size()); ++rank) {
    if (worker_ids_[rank].empty() || departed_.count(worker_ids_[rank])) gone.insert(rank);
  }
  return gone;
}

void Scheduler::ReviseMembership() {
  if (!elastic_.elastic() || !started_ || !failure_.empty()) return;
  DropLostWorkers();
  if (failure_.empty()) {
    if (std::string line = elastic_.Plan(RegisteredWorkers()); !line.empty()) {
      KLOG_INFO << line;
      changed_.notify_all();
    }
  }
  // Every change of the members (a plan, a drop, a rollback) is seen here,
  // at the latest at the next heartbeat.
  workers_.Set(static_cast<double>(elastic_.Members().size()));
}

bool Scheduler::WaitServersToldToStop(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    return static_cast<int>(told_to_stop_.size()) >= Registered(server_ids_);
  });
}

std::string Scheduler::Failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

std::string Scheduler::FailureReason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_reason_;
}

bool Scheduler::WaitAllWorkersFinished(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return MembersFinished(); });
}

}  // namespace kubeps
