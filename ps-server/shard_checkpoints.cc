// The shard's checkpoints (ps-server/shard.h): when one is due, what it
// holds, writing it, and rolling the shard back to one.
#include "ps-server/shard.h"

#include <cstring>

#include <algorithm>

#include "common/logging.h"
#include "ps-server/durable_file.h"

namespace kubeps {

bool Shard::CheckpointDue(uint64_t* step) const {
  if (!checkpoints_ || parts_.empty()) return false;
  const uint64_t interval = std::max<uint64_t>(1, options_.checkpoint_interval);
  if (!options_.sync) {
    *step = applied_pushes_;
    return applied_pushes_ % interval == 0 &&
           static_cast<int64_t>(applied_pushes_) != last_checkpoint_;
  }
  // Sync: a worker pushes step S only after pulling version S from every
  // part of every shard, so here all parts are at one version S.
  uint64_t version = UINT64_MAX;
  for (const auto& [key, part] : parts_) version = std::min(version, part.version);
  *step = version;
  return version % interval == 0 && static_cast<int64_t>(version) != last_checkpoint_;
}

std::unique_ptr<v1::ShardCheckpoint> Shard::TakeCheckpoint(uint64_t step) {
  std::unique_ptr<v1::ShardCheckpoint> checkpoint = writer_->Blank();
  // Clear keeps the parts' messages and their strings' capacity, and a
  // shard's parts come in the same order each time (a map): each buffer is
  // filled again with as many bytes as before, without allocating.
  checkpoint->Clear();
  checkpoint->set_step(step);
  checkpoint->set_generation(generation_);
  checkpoint->set_server_count(static_cast<uint32_t>(options_.num_servers));
  checkpoint->set_optimizer(options_.optimizer.name);
  checkpoint->set_mode(options_.sync ? "sync" : "async");
  checkpoint->set_global_batch(global_batch_);
  checkpoint->set_worker_count(static_cast<uint32_t>(options_.num_workers));
  // A fixed job's global batch is its workers' batches, this job's.
  checkpoint->set_batch_size(global_batch_ > 0 ? state_batch_size_
                                               : static_cast<uint32_t>(options_.batch_size));
  auto fill = [](std::string* to, const auto& v) {
    to->assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  for (const auto& [key, part] : parts_) {
    auto* saved = checkpoint->add_parts();
    saved->set_key(key.first);
    saved->set_offset(key.second);
    saved->set_version(part.version);
    fill(saved->mutable_value(), *part.value);
    fill(saved->mutable_slot1(), part.state.slot1);
    fill(saved->mutable_slot2(), part.state.slot2);
    saved->set_optimizer_steps(part.state.steps);
    saved->set_name(part.name);
  }
  dedup_.Save(checkpoint.get());
  if (!options_.sync && async_worker_steps_known_)
    *checkpoint->mutable_async_worker_steps() = async_worker_steps_;
  last_checkpoint_ = static_cast<int64_t>(step);
  return checkpoint;
}

void Shard::Install(const v1::ShardCheckpoint& checkpoint) {
  auto floats = [](const std::string& b) {
    const float* f = reinterpret_cast<const float*>(b.data());
    return std::vector<float>(f, f + b.size() / sizeof(float));
  };
  parts_.clear();
  // A job run again with another optimizer (FitsThisJob refuses none against
  // the others) keeps the parameters, and the new optimizer's state starts
  // fresh: momentum's velocity is not Adam's first moment.
  const bool other_optimizer =
      !checkpoint.optimizer().empty() && checkpoint.optimizer() != options_.optimizer.name;
  for (const auto& saved : checkpoint.parts()) {
    Part& part = parts_[{saved.key(), saved.offset()}];
    part.value = NewValues(saved.value().size() / sizeof(float));
    std::memcpy(part.value->data(), saved.value().data(), part.value->size() * sizeof(float));
    if (!other_optimizer) {
      part.state.slot1 = floats(saved.slot1());
      part.state.slot2 = floats(saved.slot2());
      part.state.steps = saved.optimizer_steps();
    }
    part.version = saved.version();
    part.name = saved.name();
    ResetContributions(part);
  }
  dedup_.Restore(checkpoint);
  key_set_fixed_ = true;  // a checkpoint is taken after the first push
  last_checkpoint_ = static_cast<int64_t>(checkpoint.step());
  applied_pushes_ = options_.sync ? 0 : checkpoint.step();
  async_worker_steps_ = checkpoint.async_worker_steps();
  global_batch_ = checkpoint.global_batch();
  state_batch_size_ = checkpoint.batch_size();
  // Written before shards kept them: the workers' steps are lost, unless
  // no push came before it.
  async_worker_steps_known_ = checkpoint.has_async_worker_steps() || applied_pushes_ == 0;
}

uint32_t Shard::GlobalBatch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return global_batch_;
}

uint32_t Shard::StateBatchSize() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_batch_size_;
}

uint32_t Shard::LoadedCheckpointWorkers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return loaded_checkpoint_workers_;
}

std::optional<v1::AsyncWorkerSteps> Shard::AsyncWorkerSteps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.sync || !async_worker_steps_known_) return std::nullopt;
  return async_worker_steps_;
}

Status Shard::WriteCheckpoint(const v1::ShardCheckpoint& checkpoint) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (checkpoint.generation() < oldest_writable_generation_) {
    KLOG_INFO << "not writing the checkpoint of step " << checkpoint.step() << " of generation "
              << checkpoint.generation() << ": the job rolled back since";
    return Status::Ok();
  }
  Status s = checkpoints_->Write(checkpoint);
  if (const uint64_t seen = FoldersNotFlushed(); seen > folders_not_flushed_seen_) {
    folders_not_flushed_.Increment(static_cast<double>(seen - folders_not_flushed_seen_));
    folders_not_flushed_seen_ = seen;
  }
  if (s.code() == Status::Code::kFailedPrecondition) {
    taken_over_ = s.message();
    KLOG_ERROR << taken_over_;
    return s;
  }
  if (!s.ok()) {
    // Loud: a shard whose checkpoints stop can make a later recovery
    // impossible (the scheduler needs a step every shard holds).
    checkpoint_failures_.Increment();
    ++failures_in_a_row_;
    last_failure_ = "checkpoint of step " + std::to_string(checkpoint.step()) + " into " +
                    checkpoints_->dir() + " failed: " + s.message();
    KLOG_ERROR << last_failure_ << " (" << failures_in_a_row_ << " in a row; the shard gives up at "
               << kMaxCheckpointFailuresInARow << ")";
    return Status::Error(last_failure_);
  }
  failures_in_a_row_ = 0;
  checkpoints_written_.Increment();
  return s;
}

std::string Shard::TakenOver() const {
  std::lock_guard<std::mutex> lock(write_mutex_);
  return taken_over_;
}

std::string Shard::CheckpointFailure() const {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (failures_in_a_row_ < kMaxCheckpointFailuresInARow) return "";
  return std::to_string(failures_in_a_row_) +
         " checkpoint writes in a row failed, the last: " + last_failure_;
}

Status Shard::FitsThisJob(const v1::ShardCheckpoint& checkpoint) const {
  const std::string which =
      "the checkpoint of step " + std::to_string(checkpoint.step()) + " in " + checkpoints_->dir();
  const std::string start_fresh =
      "start fresh: spec.checkpoint.resume: false, or another spec.checkpoint.path";
  if (const uint32_t wrote = checkpoint.server_count();
      wrote != 0 && wrote != static_cast<uint32_t>(options_.num_servers)) {
    return Status::FailedPrecondition(
        which + " was written by a job of " + std::to_string(wrote) +
        " servers, and this job has " + std::to_string(options_.num_servers) +
        " (spec.replicaSpecs.ps.replicas): each server holds the parts that key placement gives "
        "it among the job's servers. Cut them for " +
        std::to_string(options_.num_servers) +
        " first (kubeps reshard JOB.yaml, while no job runs on them), run it with " +
        std::to_string(wrote) + " servers, or " + start_fresh);
  }
  const std::string& had = checkpoint.optimizer();
  if (!had.empty() && (had == "none") != (options_.optimizer.name == "none")) {
    return Status::FailedPrecondition(
        which + " was written by a job whose servers' optimizer is " + had +
        ", and this job's is " + options_.optimizer.name +
        " (spec.optimizer.name): with none the servers keep averaged gradients and the "
        "program the parameters, with any other the servers keep the parameters, so the one "
        "cannot resume from the other's checkpoints. Run it with optimizer " +
        had + ", or " + start_fresh);
  }
  // The other way round goes: each worker of the async job starts at the
  // sync job's step, as many examples as it had seen.
  if (checkpoint.mode() == "async" && options_.sync) {
    return Status::FailedPrecondition(
        which +
        " was written by an async job, and this job is sync (spec.mode): its step counts "
        "every worker's pushes, not the job's steps, so the sync job would start past steps "
        "that no worker trained. Run it async, or " +
        start_fresh);
  }
  return Status::Ok();
}

Status Shard::LoadLatestCheckpoint(int64_t* step) {
  *step = -1;
  if (!checkpoints_) return Status::Ok();
  DrainCheckpoints();
  v1::ShardCheckpoint checkpoint;
  bool found = false;
  std::string skipped;
  Status read = checkpoints_->ReadLatest(&checkpoint, &found, &skipped);
  if (!skipped.empty()) KLOG_ERROR << "skipped unreadable checkpoints: " << skipped;
  if (!read.ok()) return read;
  skipped.clear();
  // The steps reported to the scheduler must all be loadable.
  Status checked = checkpoints_->SetAsideDamaged(&skipped);
  if (!skipped.empty()) KLOG_ERROR << "skipped unreadable checkpoints: " << skipped;
  if (!checked.ok()) return checked;
  if (!found) return Status::Ok();
  if (Status fits = FitsThisJob(checkpoint); !fits.ok()) return fits;
  // Said once, at load: a rollback to the same step installs it again.
  if (!checkpoint.optimizer().empty() && checkpoint.optimizer() != options_.optimizer.name) {
    KLOG_INFO << "the checkpoint of step " << checkpoint.step() << " was written with optimizer "
              << checkpoint.optimizer() << ", and this job runs " << options_.optimizer.name
              << ": its parameters are kept, and " << options_.optimizer.name
              << "'s state starts fresh";
  }
  std::unique_lock<std::mutex> lock(mutex_);
  AwaitPushesOutsideLock(lock);
  Install(checkpoint);
  loaded_checkpoint_workers_ = checkpoint.worker_count();
  awaiting_recovery_ = options_.sync;
  KLOG_INFO << "loaded checkpoint of step " << checkpoint.step() << " from " << checkpoints_->dir();
  *step = static_cast<int64_t>(checkpoint.step());
  return Status::Ok();
}

void Shard::DrainCheckpoints() {
  if (writer_) writer_->Drain();
}

std::vector<uint64_t> Shard::CheckpointSteps() const {
  if (!checkpoints_) return {};
  std::vector<uint64_t> steps;
  Status listed = checkpoints_->Steps(&steps);
  std::lock_guard<std::mutex> lock(listed_mutex_);
  if (listed.ok()) {
    listed_steps_ = steps;
    listing_error_.clear();
  } else if (listed.message() != listing_error_) {  // once, not at every heartbeat
    listing_error_ = listed.message();
    KLOG_ERROR << listing_error_ << "; the scheduler is told the steps listed before";
  }
  return listed_steps_;
}

void Shard::KeepCheckpoint(int64_t step) {
  if (checkpoints_) checkpoints_->KeepStep(step);
}

Status Shard::ClaimCheckpoints(const FolderHolder& me, bool resume, StopToken* stop,
                               const FolderLockWait& waiting) {
  if (!checkpoints_) return Status::Ok();
  const std::string& run_id = me.run_id;
  size_t removed = 0;
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (Status s = checkpoints_->Hold(me, stop, waiting); !s.ok()) return s;
  if (Status s = RefuseHalfResharded(checkpoints_->dir()); !s.ok()) return s;
  if (Status s = checkpoints_->ClaimForRun(run_id, resume, &removed); !s.ok()) return s;
  if (removed > 0) {
    KLOG_INFO << "discarded an earlier run's checkpoints in " << checkpoints_->dir() << " ("
              << removed << "): spec.checkpoint.resume is false";
  }
  if (run_id.empty() && !resume && !CheckpointSteps().empty()) {
    KLOG_ERROR << "the checkpoints in " << checkpoints_->dir()
               << " are kept although spec.checkpoint.resume is false: KUBEPS_RUN_ID is unset, so "
                  "this server cannot tell its own run's from an earlier run's";
  }
  return Status::Ok();
}

bool Shard::awaiting_recovery() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return awaiting_recovery_;
}

Status Shard::WriteFinalCheckpoint() {
  DrainCheckpoints();  // the last one taken may be the final state: on disk when this returns
  std::unique_ptr<v1::ShardCheckpoint> last;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    AwaitPushesOutsideLock(lock);
    if (!checkpoints_ || parts_.empty() || awaiting_recovery_) return Status::Ok();
    uint64_t step = applied_pushes_;
    if (options_.sync) {
      step = UINT64_MAX;
      for (const auto& [key, part] : parts_) step = std::min(step, part.version);
    }
    // Taken is not written: the write of the last one taken may have failed.
    std::vector<uint64_t> written;  // where the folder cannot be listed, none
    (void)checkpoints_->Steps(&written);
    if (static_cast<int64_t>(step) == last_checkpoint_ &&
        std::binary_search(written.begin(), written.end(), step))
      return Status::Ok();
    last = TakeCheckpoint(step);
  }
  if (Status s = WriteCheckpoint(*last); !s.ok()) return s;
  KLOG_INFO << "final checkpoint of step " << last->step() << " in " << checkpoints_->dir();
  return Status::Ok();
}

void Shard::EnterGeneration(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_ = generation;
  }
  advanced_.notify_all();
  KLOG_INFO << "entered generation " << generation << " with the state it loaded";
}

Status Shard::RestoreCheckpoint(uint64_t step, uint64_t generation) {
  if (!checkpoints_) return Status::Error("cannot roll back: this shard keeps no checkpoints");
  // The checkpoints taken before the rollback are on disk (or failed) before
  // the folder is read.
  DrainCheckpoints();
  if (Status ours = checkpoints_->CheckStillOurs(); !ours.ok()) {
    std::lock_guard<std::mutex> writing(write_mutex_);
    taken_over_ = ours.message();
    return ours;
  }
  v1::ShardCheckpoint checkpoint;
  Status read = checkpoints_->Read(step, &checkpoint);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    AwaitPushesOutsideLock(lock);
    if (read.ok()) {
      Install(checkpoint);
    } else if (step != 0 || !parts_.empty()) {
      std::string held;
      for (uint64_t s : CheckpointSteps()) held += (held.empty() ? "" : ",") + std::to_string(s);
      return Status::Error(read.message() + " (" + checkpoints_->dir() + " holds steps " +
                           (held.empty() ? "none" : held) + ")");
    }
    // else a fresh start: nothing to restore; rank 0's Init fills this shard.
    generation_ = generation;
    awaiting_recovery_ = false;
    // Before any push of the new generation can take a checkpoint (this
    // lock), and while no write is under way (that one).
    std::lock_guard<std::mutex> writing(write_mutex_);
    oldest_writable_generation_ = generation;
    if (read.ok()) {
      // The steps after this one are of the timeline the job left; a later
      // recovery must not find them (the redo may differ: a worker fewer).
      if (Status removed = checkpoints_->RemoveAfter(step); !removed.ok()) {
        KLOG_ERROR << removed.message();
        if (removed.code() == Status::Code::kFailedPrecondition) taken_over_ = removed.message();
      }
      // The shard is back on a step it holds: what it trains from here on
      // is what a later write would protect.
      failures_in_a_row_ = 0;
    }
  }
  advanced_.notify_all();
  KLOG_INFO << (read.ok() ? "rolled back to the checkpoint of step " : "started empty at step ")
            << step << " (generation " << generation << ")";
  return Status::Ok();
}

}  // namespace kubeps
