// One live process per shard checkpoint folder. Two servers writing one
// folder corrupt each other's training: each prunes, rolls back and resumes
// from files the other wrote. That happens where two TrainingJobs were given
// the same spec.checkpoint.path (a manifest copied under a new name), and
// where a replica's replacement starts while the old process still runs (a
// pod force-deleted from a node cut off from the API server, whose kubelet
// has not stopped it yet).
//
// So a server holds an exclusive lock (flock) on "<folder>/owner" for its
// whole life and writes there who it is. The kernel drops the lock when the
// process dies, however it dies; on NFS (v4, or v3 with lockd) the server's
// lease does when the holder's node stops renewing it. A process that finds
// the lock held reads who holds it:
// - another job (namespace and name): an error naming the folder and the
//   holder, at once; waiting would only let this job resume later from the
//   other's checkpoints;
// - this job: an earlier process of this replica, or of an earlier run of
//   the job (deleted and created again while its old pods still run), or a
//   holder not yet known: it waits for the lock, saying so every
//   kWaitReport, until it is free or `stop` is requested.
// A file system without locks (ENOLCK: NFSv3 without lockd) is used
// unfenced, with a warning.
//
// Not thread-safe: one per folder, taken once at start.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/stop_token.h"

namespace kubeps {

// Who holds a folder, as its "owner" file says.
struct FolderHolder {
  std::string run_id;   // the TrainingJob's UID; a new one for every `kubeps run`
  std::string job;      // namespace/name
  std::string replica;  // server-0
  std::string host;
  long pid = 0;
  std::string since;  // UTC, ISO 8601

  // This process, for `run_id`, `job` and `replica`.
  static FolderHolder ThisProcess(std::string run_id, std::string job, std::string replica);
  // "server-0 of job default/first (run 8e1c...) on node-3, pid 12, since ...".
  std::string Describe() const;
  std::string Serialize() const;
  static FolderHolder Parse(const std::string& text);  // fields it lacks stay empty
};

class CheckpointFolderLock {
 public:
  static constexpr std::chrono::seconds kWaitReport{10};

  // Takes the lock on `folder` (which exists) for `me`. kFailedPrecondition
  // when another job holds it; kAborted when `stop` came while waiting;
  // another error when the lock file cannot be made. `poll` is how often a
  // held lock is tried again.
  static Status Take(const std::string& folder, const FolderHolder& me, StopToken* stop,
                     std::chrono::milliseconds poll, std::unique_ptr<CheckpointFolderLock>* out);
  ~CheckpointFolderLock();  // lets go of the lock
  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;

  // False where the file system has no locks and the folder is unfenced.
  bool fenced() const { return fd_ >= 0; }

 private:
  explicit CheckpointFolderLock(int fd) : fd_(fd) {}
  const int fd_;  // holds the lock; -1: unfenced
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_
