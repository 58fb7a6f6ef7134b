// The scheduler (ps-server/scheduler.h) and the job's checkpoints: the
// steps every shard holds, a first start over existing checkpoints, a
// start after the scheduler and servers restarted together, a recovery
// after a server restarted, where an async worker goes on from, and an
// elastic job's lost workers dropped.
#include "ps-server/scheduler.h"

#include <algorithm>

#include "common/logging.h"
#include "common/termination_message.h"

namespace kubeps {
namespace {

std::string JoinSteps(const std::vector<uint64_t>& steps) {
  if (steps.empty()) return "none";
  std::string out;
  for (uint64_t step : steps) out += (out.empty() ? "" : ",") + std::to_string(step);
  return out;
}

}  // namespace

int64_t NewestCommonStep(const std::vector<std::vector<uint64_t>>& steps) {
  if (steps.empty()) return -1;
  // Newest first through the first list; the first step every other list
  // holds too wins.
  std::vector<uint64_t> candidates = steps[0];
  std::sort(candidates.rbegin(), candidates.rend());
  for (uint64_t step : candidates) {
    bool everywhere = true;
    for (size_t i = 1; i < steps.size() && everywhere; ++i) {
      everywhere = std::find(steps[i].begin(), steps[i].end(), step) != steps[i].end();
    }
    if (everywhere) return static_cast<int64_t>(step);
  }
  return -1;
}

std::optional<uint64_t> Scheduler::OwnStep(const Member& worker) const {
  // The shards' word outlives every process of the worker, and this
  // scheduler: it is in their checkpoints, and they say it again when they
  // register. Where a worker died between its pushes to two shards, the
  // larger wins: its step is applied on one and lost on the other, never
  // applied twice.
  uint64_t own = worker.reported_step;
  for (const std::string& id : server_ids_) {
    if (id.empty()) return std::nullopt;
    const v1::NodeInfo& server = members_.at(id).info;
    if (!server.has_async_worker_steps()) return std::nullopt;
    const auto& next = server.async_worker_steps().next_step();
    if (auto said = next.find(worker.info.rank()); said != next.end())
      own = std::max(own, said->second);
  }
  return own;
}

std::vector<std::vector<uint64_t>> Scheduler::ServerSteps() const {
  std::vector<std::vector<uint64_t>> steps;
  for (const auto& id : server_ids_) {
    auto it = checkpoint_steps_.find(id);
    steps.push_back(it == checkpoint_steps_.end() ? std::vector<uint64_t>{} : it->second);
  }
  return steps;
}

std::string Scheduler::DescribeSteps() const {
  std::string out;
  for (const auto& id : server_ids_) {
    auto it = checkpoint_steps_.find(id);
    out += (out.empty() ? "" : "; ") + id + " holds steps " +
           JoinSteps(it == checkpoint_steps_.end() ? std::vector<uint64_t>{} : it->second);
    if (!options_.checkpoint_dir.empty()) out += " in " + options_.checkpoint_dir + "/" + id;
  }
  return out;
}

void Scheduler::FirstStart() {
  bool any = false;
  for (const auto& steps : ServerSteps()) any = any || !steps.empty();
  if (!any) return;  // a new job: nothing to resume, generation 0 as always
  const int64_t common = NewestCommonStep(ServerSteps());
  if (common < 0) {
    failure_ = "the job cannot resume: its shards hold no checkpoint step in common (" +
               DescribeSteps() +
               "); delete those folders or set spec.checkpoint.resume: false to start fresh";
    failure_reason_ = kReasonNoCommonCheckpoint;
    KLOG_ERROR << failure_;
    return;
  }
  generation_ = 1;
  restore_step_ = static_cast<uint64_t>(common);
  common_step_ = common;
  restored_.clear();
  KLOG_INFO << "first start over existing checkpoints: the job resumes from step " << common
            << ", the newest every shard holds (" << DescribeSteps() << ")";
  if (options_.sync && !elastic_.elastic()) SayAnotherGlobalBatch();
}

// The rest of the epoch a job resumes in, where it takes another global
// batch than its checkpoints' job: said, not refused, as the change is meant.
std::string Scheduler::EpochCost() const {
  return ": its global batch is another, so that it takes step " + std::to_string(restore_step_) +
         " for another number of examples of its epoch, and the rest of that epoch skips or "
         "repeats examples";
}

// A fixed job's global batch is its workers' batches together: started
// again with another number (suspended, its workers changed, resumed, as its
// CRD tells) or another spec.batchSize, it reads the checkpoint's step as
// another number of examples of its epoch.
void Scheduler::SayAnotherGlobalBatch() const {
  const uint32_t workers = ServersSay(&v1::NodeInfo::checkpoint_worker_count);
  const uint32_t batch = ServersSay(&v1::NodeInfo::checkpoint_batch_size);
  const bool other_workers = workers != 0 && static_cast<int>(workers) != options_.num_workers;
  if (!other_workers && !OtherBatchSize(batch)) return;
  KLOG_ERROR << "the checkpoints were written by a job of " << workers << " workers x "
             << (batch ? std::to_string(batch) : "?") << " examples, and this one has "
             << options_.num_workers << " x " << options_.batch_size << EpochCost()
             << " (a job with spec.replicaSpecs.worker.elasticPolicy keeps its global batch "
             << "where only its workers change)";
}

bool Scheduler::OtherBatchSize(uint32_t written) const {
  return written != 0 && options_.batch_size > 0 &&
         static_cast<int>(written) != options_.batch_size;
}

// An elastic job's global batch is the job's, whatever its workers: started
// again with others (Kueue's admission of fewer after an eviction, a rerun),
// the batchSize x workers of this start would read the checkpoint's step
// as another number of examples of its epoch, and train another number of
// steps. So does a restarted scheduler that no worker brought a schedule.
// Not where the job asks another spec.batchSize (a GPU ran out of memory
// with the old), nor where the kept batch could not be cut over as many
// workers as the job may have.
void Scheduler::KeepCheckpointsGlobalBatch(size_t workers) {
  const uint32_t kept = ServersSay(&v1::NodeInfo::checkpoint_global_batch);
  const uint64_t own = elastic_.schedule().global_batch();
  if (kept == 0 || kept == own) return;
  const std::string instead = std::string(", and this one takes its own, spec.batchSize x its ") +
                              std::to_string(workers) + " workers: " + std::to_string(own) +
                              " examples a step" + EpochCost();
  if (const uint32_t batch = ServersSay(&v1::NodeInfo::checkpoint_batch_size);
      OtherBatchSize(batch)) {
    KLOG_ERROR << "the checkpoints were written by a job of spec.batchSize " << batch
               << ", a global batch of " << kept << instead;
    return;
  }
  if (static_cast<int>(kept) < options_.elastic.max_workers) {
    KLOG_ERROR << "the checkpoints' global batch of " << kept << " examples cannot be cut over "
               << "elasticPolicy.maxReplicas (" << options_.elastic.max_workers << ") workers"
               << instead;
    return;
  }
  elastic_.KeepGlobalBatch(kept);
  KLOG_INFO << "the job's servers hold a global batch of " << kept
            << " examples a step (their checkpoints, their pushes); the job keeps it, cut over "
            << "its " << workers << (workers == 1 ? " worker" : " workers")
            << elastic_.ExamplesEach(workers)
            << ", so that its data goes on where it stopped (spec.batchSize x the workers "
            << "now would be " << own << ")";
}

// Every shard of a job holds checkpoints of the same job: the first server
// whose registration says the field (not 0) speaks for them.
uint32_t Scheduler::ServersSay(uint32_t (v1::NodeInfo::*field)() const) const {
  for (const std::string& id : server_ids_) {
    auto it = members_.find(id);
    if (it == members_.end()) continue;
    if (const uint32_t said = (it->second.info.*field)(); said != 0) return said;
  }
  return 0;
}

void Scheduler::ServersRestartedWithTheScheduler() {
  for (const std::string& id : server_ids_) {
    Member& member = members_[id];
    const v1::NodeInfo& server = member.info;
    if (!options_.sync) {
      // Its process is new: it goes on from what it loaded.
      member.keeps_state = !server.registered_before();
      continue;
    }
    // A drain stops the scheduler and servers together: a server's new
    // process restored a checkpoint and waits for the rollback its restart
    // calls for, as if this scheduler had seen it come back. So does one
    // whose recovery the scheduler before opened and died with, unheard by
    // it (by others perhaps: a generation is never ready while a shard
    // waits, so a new one costs only the restore).
    if (!server.registered_before() || server.awaits_recovery()) {
      StartRecovery(server);
      return;
    }
  }
  // So does a worker's new process where the workers keep the parameters.
  if (!options_.sync || !options_.workers_keep_parameters) return;
  for (const std::string& id : worker_ids_) {
    if (!id.empty() && !members_[id].info.registered_before()) {
      RollBackForRestartedWorker(members_[id].info);
      return;
    }
  }
}

void Scheduler::OpenGeneration(uint64_t step) {
  ++generation_;
  restore_step_ = step;
  restored_.clear();
  // What the shards held beyond `step` is the timeline left: never said to
  // be in common (Heartbeat says it again once every shard restored `step`).
  common_step_ = std::min(common_step_, static_cast<int64_t>(step));
}

void Scheduler::StartRecovery(const v1::NodeInfo& server) {
  if (!failure_.empty()) return;
  uint64_t step = 0;
  // A shard that restarted with no checkpoint at all (killed before its
  // first one) rolls the job back to its start, as it always did.
  const bool held = server.checkpoint_steps_size() > 0 || server.checkpoint_step() >= 0;
  if (held) {
    const int64_t common = NewestCommonStep(ServerSteps());
    if (common < 0) {
      failure_ = "recovery after the restart of " + server.node_id() +
                 " is impossible: the shards hold no checkpoint step in common (" +
                 DescribeSteps() + ")";
      failure_reason_ = kReasonNoCommonCheckpoint;
      KLOG_ERROR << failure_;
      return;
    }
    step = static_cast<uint64_t>(common);
  }
  // Where every shard holds the job's last step, the rollback redoes nothing.
  if (!finished_workers_.empty() && (finished_steps_ == 0 || step < finished_steps_)) {
    // The steps after `step` need every worker's pushes (an elastic job's
    // too: its finished members are in their schedule), and the finished
    // workers' programs have ended: redone, they would be waited for.
    std::string ranks;
    for (int rank : finished_workers_) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
    failure_ = server.node_id() + " restarted after worker" +
               (finished_workers_.size() > 1 ? "s " : " ") + ranks +
               " finished: its shard starts again from " +
               (held ? "its checkpoint of step " + std::to_string(step) : "the job's start") +
               ", and the steps after it cannot be redone by workers whose programs have "
               "ended, so its parameters of the job's last steps are lost; run the job again "
               "over its checkpoints (spec.checkpoint.path) to redo them";
    failure_reason_ = kReasonShardStateLost;
    KLOG_ERROR << failure_;
    return;
  }
  OpenGeneration(step);
  KLOG_INFO << "recovery: generation " << generation_
            << " rolls every shard and worker back to step " << restore_step_
            << ", the newest checkpoint every shard holds (" << server.node_id() << " restarted)";
  // Workers scaled away since cannot redo their steps: the others do.
  if (std::string line = elastic_.Rollback(step, GoneWorkers()); !line.empty()) {
    KLOG_INFO << line;
  }
}

// The servers hold averaged gradients, not parameters: the restarted
// worker's program can put back its own state only of a step it saved,
// which is a checkpoint step (kubeps.torch.resume_with), not the step the
// others are at. So everyone goes back there, the others to the copies of
// their state they keep at those steps: the job ends as if nothing happened.
void Scheduler::RollBackForRestartedWorker(const v1::NodeInfo& worker) {
  if (!failure_.empty()) return;
  if (!finished_workers_.empty()) {
    // Their programs have ended and cannot redo a step; the job's last
    // step is done, and the restarted program's state of it is its own.
    KLOG_INFO << worker.node_id() << " restarted after other workers finished: nothing is "
              << "rolled back";
    return;
  }
  const int64_t common = NewestCommonStep(ServerSteps());
  if (common < 0) {
    KLOG_INFO << worker.node_id() << " restarted, and the shards hold no checkpoint step in "
              << "common to roll the job back to: its program starts at the servers' step";
    return;
  }
  OpenGeneration(static_cast<uint64_t>(common));
  KLOG_INFO << "recovery: generation " << generation_
            << " rolls every shard and worker back to step " << restore_step_
            << ", the newest checkpoint every shard holds (" << worker.node_id()
            << " restarted; with the servers' optimizer none its program keeps the parameters, "
            << "of a checkpoint step)";
}

// A restart rolled the job back to the shards' newest common checkpoint,
// but the program's own save of that step may not have been written (it
// died after the servers' checkpoint of the step, before its own): it can
// start only at a step it holds, and every other worker goes back there too.
void Scheduler::RollBackToHeldState(const std::string& worker,
                                    const v1::ProgramStateMissing& missing) {
  // Said again in every beat until the answer announces a newer generation;
  // one said in an older generation is answered already.
  if (!failure_.empty() || missing.generation() != generation_ || !ViewReady() ||
      !GenerationReady() || !options_.sync || !options_.workers_keep_parameters) {
    return;
  }
  std::vector<uint64_t> held;
  for (uint64_t step : missing.held_steps()) {
    if (step <= missing.start_step()) held.push_back(step);
  }
  if (std::find(held.begin(), held.end(), missing.start_step()) != held.end()) return;
  const std::string program = worker + "'s program holds its own state of steps " +
                              JoinSteps(held) + ", not of step " +
                              std::to_string(missing.start_step()) + " where the job is";
  if (!finished_workers_.empty()) {
    failure_ = program + ", and other workers have finished: their programs cannot go back";
    failure_reason_ = kReasonProgramStateMissing;
    KLOG_ERROR << failure_;
    return;
  }
  std::vector<std::vector<uint64_t>> steps = ServerSteps();
  steps.push_back(held);
  const int64_t common = NewestCommonStep(steps);
  if (common < 0) {
    failure_ = program + "; no step of those is one every shard holds a checkpoint of (" +
               DescribeSteps() + "), so the job cannot go back to one";
    failure_reason_ = kReasonProgramStateMissing;
    KLOG_ERROR << failure_;
    return;
  }
  OpenGeneration(static_cast<uint64_t>(common));
  KLOG_INFO << "recovery: generation " << generation_
            << " rolls every shard and worker back to step " << restore_step_ << ": " << program
            << ", and " << restore_step_ << " is the newest of those every shard holds";
}

// An elastic job's workers silent for replaceTimeoutSeconds leave it.
void Scheduler::DropLostWorkers() {
  const auto limit = Clock::now() - std::chrono::milliseconds(options_.elastic.replace_timeout_ms);
  std::set<int> lost;
  std::string names;
  for (int rank : elastic_.Members()) {
    const std::string& id = worker_ids_[rank];
    if (id.empty() || finished_workers_.count(rank)) continue;
    if (members_.at(id).last_seen < limit) {
      lost.insert(rank);
      names += (names.empty() ? "" : ", ") + id + " (rank " + std::to_string(rank) + ")";
    }
  }
  if (lost.empty()) return;
  const int left = static_cast<int>(elastic_.Members().size() - lost.size());
  const int ms = options_.elastic.replace_timeout_ms;
  const std::string silent =
      ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
  // Another member finished: it did so once the last step's update was
  // made, so the lost one pushed every step (rank 0 evicted while it
  // evaluates). Nothing is redone, and the job needs no more workers.
  const bool every_step_done = options_.sync && !finished_workers_.empty();
  if (left < options_.elastic.min_workers && !every_step_done) {
    failure_ = "worker " + names + " has been gone for " + silent +
               " (elasticPolicy.replaceTimeoutSeconds) and the job cannot go on without it: " +
               std::to_string(left) + " workers would remain, below elasticPolicy.minReplicas (" +
               std::to_string(options_.elastic.min_workers) + ")";
    KLOG_ERROR << failure_;
    return;
  }
  const int64_t common = NewestCommonStep(ServerSteps());
  if (options_.sync && !every_step_done && common < 0) {
    failure_ = "worker " + names + " has been gone for " + silent +
               " (elasticPolicy.replaceTimeoutSeconds), and the job cannot go on without it: "
               "its shards hold no checkpoint in common to redo the steps from (" +
               DescribeSteps() + "); checkpoints come every spec.checkpoint.intervalSteps";
    KLOG_ERROR << failure_;
    return;
  }
  for (int rank : lost) {
    members_.erase(worker_ids_[rank]);  // a replacement registers afresh and joins again
    worker_ids_[rank].clear();
    finished_workers_.erase(rank);
  }
  if (!options_.sync || every_step_done) {
    // Async: no step waits for its gradients; the others go on without it.
    KLOG_INFO << "worker " << names << " has been gone for " << silent
              << " (elasticPolicy.replaceTimeoutSeconds): dropped"
              << (every_step_done ? " (other workers finished: it had pushed every step)" : "");
    if (std::string line = elastic_.Drop(lost); !line.empty()) KLOG_INFO << line;
    ++epoch_;
    changed_.notify_all();
    return;
  }
  // The steps the lost worker's contributions are missing from are computed
  // again by the others, from the newest step every shard holds.
  const uint64_t step = static_cast<uint64_t>(common);
  OpenGeneration(step);
  KLOG_INFO << "worker " << names << " has been gone for " << silent
            << " (elasticPolicy.replaceTimeoutSeconds): dropped; generation " << generation_
            << " rolls the job back to step " << step << " without it";
  if (std::string line = elastic_.Rollback(step, GoneWorkers()); !line.empty()) {
    KLOG_INFO << line;
  }
  ++epoch_;
  changed_.notify_all();
}

}  // namespace kubeps
