// A shard's checkpoints on disk: one file per checkpointed step,
// "<dir>/step-<step>.ckpt", a ShardCheckpoint framed and checksummed
// (checkpoint_format.h). Writes are atomic (temporary file, fsync, rename,
// fsync of the folder): a crash mid-write
// leaves the previous checkpoints intact and never a torn file under a
// checkpoint's name. The newest kKeep are kept: a rollback may need the one
// before the newest, when a peer shard died before writing that one; and so is
// the step the scheduler names as the newest every shard holds (KeepStep),
// however old, since a recovery would roll back to it. Steps newer than that
// one are kept too (up to kMaxKept in all): the scheduler hears of a peer's
// checkpoints a heartbeat late, so one of them may be the next common step,
// and pruning it before the scheduler says so could leave a recovery
// nothing newer than step 0. A damaged file is renamed aside
// ("<name>.damaged") and never loaded; one that cannot be read now is an
// error. "<dir>/run" names the run the checkpoints belong to (ClaimForRun).
//
// Not synchronised but for the steps a rollback abandoned: the shard calls
// it under its own lock, and lists the steps from its heartbeat thread.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "kubeps.pb.h"
#include "ps-server/checkpoint_folder_lock.h"

namespace kubeps {

class CheckpointStore {
 public:
  static constexpr int kKeep = 3;
  // At most this many steps newer than the kept one stay on disk (a peer
  // that lags more has given up: Shard::kMaxCheckpointFailuresInARow).
  static constexpr int kMaxKept = 16;

  // Creates `dir` (and its parents) if needed. Changes nothing in it:
  // another process may hold it (Hold).
  static Status Open(const std::string& dir, std::unique_ptr<CheckpointStore>* out);

  // Write and the removals fail with kFailedPrecondition, changing nothing,
  // where another process took the folder over (CheckStillOurs).
  Status Write(const v1::ShardCheckpoint& checkpoint);
  // NotFound where there is no checkpoint of `step`.
  Status Read(uint64_t step, v1::ShardCheckpoint* checkpoint) const;
  // The newest loadable checkpoint; *found = false when there is none.
  // Damaged files (their bytes are not a checkpoint of their step) are
  // renamed aside, and named in `skipped`. A file or the folder that cannot
  // be read now (no free descriptor, an I/O error, a stale network mount)
  // is an error: an older checkpoint or a fresh start would lose training,
  // and a good file set aside would be lost for good.
  Status ReadLatest(v1::ShardCheckpoint* checkpoint, bool* found, std::string* skipped) const;
  // Reads every checkpoint and renames the damaged ones aside (naming them
  // in `skipped`), so that Steps() lists only loadable ones.
  Status SetAsideDamaged(std::string* skipped) const;
  // Steps that have a checkpoint, oldest first; an error where the folder
  // cannot be listed, never an empty list.
  Status Steps(std::vector<uint64_t>* steps) const;
  // Holds the folder for this process's life (checkpoint_folder_lock.h),
  // then removes the temporary files of writes a killed process left: before
  // anything in it is read or changed, by this process or by one waiting
  // for it (a holder's write in progress is not a leftover). From then on,
  // every change first checks that no successor took the folder over.
  Status Hold(const FolderHolder& me, StopToken* stop, const FolderLockWait& waiting);
  // kFailedPrecondition, naming the successor, where another process took
  // the folder over (CheckpointFolderLock::CheckStillOurs); OK before Hold.
  Status CheckStillOurs() const;
  // Records that the checkpoints belong to run `run_id` (on Kubernetes the
  // TrainingJob's UID, a new one for every `kubeps run`). Without `resume`
  // (spec.checkpoint.resume false), checkpoints of another run (another id,
  // or none recorded) are deleted first, and *removed says how many: the job
  // starts fresh, while a process of this run that restarted keeps its own,
  // which the recovery its restart calls for needs. The server decides this
  // from its own folder, before it registers: a scheduler deciding it had to
  // know whether the job ran before, which a scheduler restarted with the
  // server does not. An empty `run_id` (a server started by hand) records
  // nothing and deletes nothing.
  Status ClaimForRun(const std::string& run_id, bool resume, size_t* removed);
  // Deletes every checkpoint.
  Status RemoveAll();
  // Deletes the checkpoints of the steps after `step` (a rollback to it
  // abandoned them). One that cannot be deleted now is named in the error
  // and abandoned all the same: of a timeline the job left, it is no longer
  // among Steps() (a recovery must not go back to it), a write of its step
  // replaces it, and every later Write tries to delete it again. (A process
  // that restarts meanwhile finds it as a step: the folder is where it would
  // have to say otherwise, and what failed to change.)
  Status RemoveAfter(uint64_t step);
  // Never prune this step (-1: none).
  void KeepStep(int64_t step) { keep_step_ = step; }
  int64_t kept_step() const { return keep_step_; }
  const std::string& dir() const { return dir_; }

 private:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(uint64_t step) const;
  // Read, and *damaged = true where the file's bytes are at fault.
  Status ReadFile(uint64_t step, v1::ShardCheckpoint* checkpoint, bool* damaged) const;
  void SetAside(uint64_t step, std::string* skipped) const;
  // Every step with a file, abandoned ones included.
  Status ListSteps(std::vector<uint64_t>* steps) const;
  // Deletes the checkpoints of `first` and after; *removed: how many. The
  // first that cannot be deleted stops it, or, with `abandon`, is
  // abandoned and the rest deleted all the same.
  Status RemoveFrom(uint64_t first, size_t* removed, bool abandon = false);
  // Deletes the abandoned checkpoints that can be deleted now.
  void RetryAbandoned();

  std::string dir_;
  // Steps a rollback left whose files could not be deleted. Guarded: the
  // heartbeat thread lists the steps while a rollback changes it.
  mutable std::mutex abandoned_mutex_;
  std::set<uint64_t> abandoned_;
  std::unique_ptr<CheckpointFolderLock> lock_;  // from Hold on
  std::atomic<int64_t> keep_step_{-1};          // set by the heartbeat thread
};

// The file `kubeps reshard` (tools/checkpoint_reshard.h) keeps in
// spec.checkpoint.path while it moves the old server folders aside and the
// new ones in: until a reshard finishes the moves, some folders there are
// the old servers' and some the new ones'.
inline constexpr char kReshardJournal[] = ".reshard-in-progress";

// FailedPrecondition, with the reason CheckpointMismatch, where the folder
// holding server folder `dir` has a reshard's journal: a server would read
// a checkpoint of one number of servers beside others of another.
Status RefuseHalfResharded(const std::string& dir);

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_
