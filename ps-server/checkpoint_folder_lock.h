// One live process per shard checkpoint folder. Two servers writing one
// folder corrupt each other's training: each prunes, rolls back and resumes
// from files the other wrote. That happens where two TrainingJobs were given
// the same spec.checkpoint.path (a manifest copied under a new name), and
// where a replica's replacement starts while the old process still runs (a
// pod force-deleted from a node cut off from the API server, whose kubelet
// has not stopped it yet).
//
// So a server holds an exclusive lock (flock) on "<folder>/owner.lock" for
// its whole life, and "<folder>/owner" says who it is, with a nonce of its
// own. The kernel drops the lock when the process dies, however it dies; on
// NFSv4 the server's lease does when the holder's node stops renewing it. A
// process that finds the lock held reads who holds it:
// - an earlier process of this run (this replica's), or a holder whose
//   record is not complete: it waits, saying so every kWaitReport, until the
//   lock is free or `stop` comes;
// - another run (another job sharing the path, or an earlier run of this
//   job, deleted and created again): it waits up to `other_run_grace` (the
//   time a deleted job's pod may take to stop), then fails naming the folder
//   and the holder; waiting longer would only have this run resume later
//   from the other's checkpoints.
//
// Where the lock does not exclude (a file system without locks, NFS mounted
// with local_lock or nolock, FUSE volumes, which lock on one node only; a
// lease that lapsed while the holder was cut off), the record still fences:
// CheckStillOurs, called before every change to the folder, finds another
// holder's nonce there once a successor has taken the folder over.
//
// Not thread-safe: one per folder, taken once at start.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_

#include <chrono>
#include <cstdint>
#include <functional>
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
  std::string node;  // the Kubernetes node; empty outside a cluster
  long pid = 0;
  std::string since;      // UTC, ISO 8601
  uint64_t nonce = 0;     // this process's, random
  bool complete = false;  // parsed: every field and the end mark were there

  // This process, for `run_id`, `job` and `replica`, on Kubernetes node
  // `node` (may be empty).
  static FolderHolder ThisProcess(std::string run_id, std::string job, std::string replica,
                                  std::string node = "");
  // "server-0 of job default/first (run 8e1c...) on first-server-0 (node
  // node-3), pid 12, since ...".
  std::string Describe() const;
  std::string Serialize() const;
  static FolderHolder Parse(const std::string& text);
};

// How a process waits for a held folder.
struct FolderLockWait {
  std::chrono::milliseconds poll{500};  // how often a held lock is tried again
  std::chrono::seconds other_run_grace{40};
  // Told, at every try while another process holds the folder, how long this
  // one has waited so far (the server's metric: a log line alone is not seen
  // by a dashboard or an alert).
  std::function<void(std::chrono::milliseconds waited)> on_wait;
};

class CheckpointFolderLock {
 public:
  static constexpr std::chrono::seconds kWaitReport{10};

  // Takes the lock on `folder` (which exists) for `me`. kAlreadyExists when
  // another run holds it past the grace; kAborted when `stop` came while
  // waiting; kUnavailable where locking failed in a way that may pass (an
  // I/O error); another error where the files cannot be made or written.
  static Status Take(const std::string& folder, const FolderHolder& me, StopToken* stop,
                     const FolderLockWait& waiting, std::unique_ptr<CheckpointFolderLock>* out);
  ~CheckpointFolderLock();  // lets go of the lock
  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;

  // kFailedPrecondition, naming the new holder, where the record says
  // another process took the folder over; OK where it is still this one's,
  // or cannot be read now (the change it guards fails on its own then).
  Status CheckStillOurs() const;
  // False where the file system refused the lock and only the record fences.
  bool locked() const { return fd_ >= 0; }

 private:
  CheckpointFolderLock(std::string folder, int fd, uint64_t nonce)
      : folder_(std::move(folder)), fd_(fd), nonce_(nonce) {}
  const std::string folder_;
  const int fd_;  // holds the lock; -1: unfenced by the kernel
  const uint64_t nonce_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_FOLDER_LOCK_H_
