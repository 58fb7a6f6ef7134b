// One parameter-server shard: stores the parts of the parameters placed on
// this server, with their optimizer state, and applies pushed gradients.
//
// Sync mode: a part at version v accepts one gradient per worker for step v;
// when all M have arrived it sums them in rank order (so the result does not
// depend on arrival order), divides by M, applies the optimizer once and
// moves to v+1. In an elastic job each push says how many workers the step
// has (M may change from step to step) and how many of the step's examples
// its gradient is the mean over; shares that differ weight the sum. Async mode: every push is
// applied at once. Pulls long-poll until the wanted version exists.
//
// Thread-safe: every RPC thread of the server calls it. One lock guards the
// parts' bookkeeping; no tensor's bytes move while it is held (a push copies
// its gradients in, and a pull's values go out, outside it).
#ifndef KUBEPS_PS_SERVER_SHARD_H_
#define KUBEPS_PS_SERVER_SHARD_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <grpcpp/support/status.h>
#include "common/metrics.h"

#include "common/optimizer.h"
#include "common/request_limits.h"
#include "common/update_threads.h"
#include "kubeps.pb.h"
#include "ps-server/checkpoint_store.h"
#include "ps-server/checkpoint_writer.h"
#include "ps-server/dedup_table.h"
#include "ps-server/push_data.h"
#include "ps-server/value_buffer.h"

namespace kubeps {

// What a shard does with a push holding NaN or Inf (spec.nonFinite).
enum class NonFinitePolicy {
  kFail,      // refuse it (INVALID_ARGUMENT naming the worker and the key): the worker fails
  kSkipStep,  // accept it once and skip the update it belongs to, counting it
};

struct ShardOptions {
  bool sync = true;
  NonFinitePolicy non_finite = NonFinitePolicy::kFail;
  int num_workers = 1;  // ranks a push may come from: an elastic job's maxReplicas
  int batch_size = 0;   // each worker's (spec.batchSize), which checkpoints record
  int num_servers = 1;  // the job's; its checkpoints say it (ShardCheckpoint.server_count)
  OptimizerConfig optimizer;
  std::string checkpoint_dir;          // "" = no checkpoints
  uint64_t checkpoint_interval = 100;  // sync: steps; async: applied pushes
  int update_threads = 1;              // a big part's update is split over this many
  // Sync: what names the files of /dev/shm that a big part's values move to
  // once a worker on this host asks to map them (value_buffer.h); "" never.
  std::string shared_values_owner;
};

// A part's values at one version. Values once published are never written
// again (an update writes to another buffer, one no answer holds any more),
// so a pull takes a reference under the shard's lock and sends them after
// releasing it, without a copy: the answer on the wire reads them in place.
using PartValues = std::shared_ptr<const ValueBuffer>;

// What a pull answers: when ready, the parts' values, in the request's order.
struct PullAnswer {
  bool ready = false;
  uint64_t version = 0;            // smallest version among the values answered
  std::vector<PartValues> values;  // empty when landed
  bool landed = false;             // values were written to the worker's shared memory instead
  std::vector<v1::MappedValues> mapped;  // landed: the parts the worker maps instead
};

// Where a pull's values go instead of the answer: the landing regions of a
// worker on this host (ps_service.cc). Called part by part, outside the
// shard's lock, so the values go straight from the shard's memory to the
// worker's.
class PullLanding {
 public:
  virtual ~PullLanding() = default;
  // Where part `index` of the pull goes, claimed for this handling (Done
  // follows the copy), or null where another handling of the same pull has
  // written it; an error (ABORTED: the worker moved on) ends the pull.
  virtual grpc::Status Begin(int index, float** region) = 0;
  virtual void Done(int index, uint64_t version) = 0;
  // Whether the worker may map part `index` where the server keeps it
  // (v1::MappedValues) instead.
  virtual bool MayMap(int index) const { return false; }
};

class Shard {
 public:
  // `metrics` must outlive the shard.
  Shard(const ShardOptions& options, std::unique_ptr<Optimizer> optimizer, MetricsServer* metrics);

  grpc::Status Init(const v1::InitRequest& request, v1::InitResponse* response);
  // `request`'s data field is not read: `data` holds the gradients.
  grpc::Status Push(const v1::PushRequest& request, PushData& data);
  // A waiting pull ends early, CANCELLED, once `cancelled` says so (its
  // call was cancelled; looked at every kLongPollSlice), and UNAVAILABLE
  // once Stop() was called.
  // With `landing`, a ready answer's values go there (answer->landed).
  grpc::Status Pull(const v1::PullRequest& request, PullAnswer* answer,
                    const std::function<bool()>& cancelled = {}, PullLanding* landing = nullptr);
  // The server is shutting down: every waiting pull ends now, later ones at once.
  void Stop();

  // Loads the newest checkpoint, if any, at start; *step is its step or -1.
  // Damaged checkpoint files are renamed aside first (and logged). A folder
  // or file that cannot be read now is an error: starting from an older
  // step, or fresh, would lose training. FAILED_PRECONDITION: the
  // checkpoint is of a job this one cannot resume from (FitsThisJob).
  Status LoadLatestCheckpoint(int64_t* step);
  // An elastic job's examples of one step, as its pushes said, or the
  // checkpoint loaded; 0 for a fixed job.
  uint32_t GlobalBatch() const;
  // The spec.batchSize of the job whose training the shard's state holds:
  // the job's that wrote the checkpoint loaded, until an elastic push of
  // this one (which says the global batch it trains with) comes.
  uint32_t StateBatchSize() const;
  // The workers of the job that wrote the checkpoint loaded at start; 0: none.
  uint32_t LoadedCheckpointWorkers() const;
  // The steps this shard holds a checkpoint of, oldest first: those on
  // disk, not one still being written (checkpoint_writer.h). Where the
  // folder cannot be listed now, those it listed last (the error is logged).
  std::vector<uint64_t> CheckpointSteps() const;
  // Returns once every checkpoint taken so far is written, or failed to be.
  void DrainCheckpoints();
  // Before LoadLatestCheckpoint: holds the folder for `me` (waiting for an
  // earlier process of this job to let go, until `stop`; another job's
  // process there is a kFailedPrecondition error, CheckpointFolderLock),
  // refusing a folder halfway through a reshard (RefuseHalfResharded), then
  // the checkpoints are run `me.run_id`'s, and without `resume` another
  // run's are deleted (CheckpointStore::ClaimForRun).
  Status ClaimCheckpoints(const FolderHolder& me, bool resume, StopToken* stop,
                          const FolderLockWait& waiting);
  // A checkpoint was loaded at start and no generation has brought the
  // shard in since: its restart calls for a recovery.
  bool awaiting_recovery() const;
  // The newest step every shard holds (from the scheduler): kept on disk.
  void KeepCheckpoint(int64_t step);
  // At the job's end: a checkpoint of the final state, so that the job run
  // again finds nothing left to train. An error names the folder.
  Status WriteFinalCheckpoint();
  // A failed checkpoint write is logged, counted and tolerated (a full disk
  // freed, a storage blip): the job can still recover to an older step every
  // shard holds. After this many in a row (none written since, nor a
  // checkpoint restored), the shard gives up: training on with nothing to
  // recover to would lose the work since at the next crash.
  static constexpr int kMaxCheckpointFailuresInARow = 10;
  // Non-empty, naming the folder and the last error, once the shard gave up.
  std::string CheckpointFailure() const;
  // Non-empty, naming the new holder, once a change to the checkpoint folder
  // found that another process took it over (CheckpointFolderLock): this
  // one was taken for lost and must stop without touching it again.
  std::string TakenOver() const;
  // Rollback (sync mode): replaces the state with the checkpoint of `step`
  // and enters `generation`; requests of older generations are ABORTED.
  // Step 0 on a shard that holds nothing and has no checkpoint of it (a
  // fresh start) just enters the generation.
  Status RestoreCheckpoint(uint64_t step, uint64_t generation);
  // Async: enters `generation` keeping the state (a restarted async shard
  // goes on from the checkpoint it loaded; the job rolls nothing back).
  void EnterGeneration(uint64_t generation);
  uint64_t generation() const;
  // Async: each worker's step as far as this shard knows it (NodeInfo.
  // async_worker_steps): the step after the newest of its steps whose push
  // was applied, by rank. Unset in a sync job, and where the checkpoint the
  // shard resumed from was written before these were kept.
  std::optional<v1::AsyncWorkerSteps> AsyncWorkerSteps() const;

  // Current value of a part, for tests and checkpoints; empty if unknown.
  std::vector<float> PartValue(uint32_t key, uint64_t offset) const;
  uint64_t PartVersion(uint32_t key, uint64_t offset) const;
  const DedupTable& dedup() const { return dedup_; }
  // The scheduler's view of every node's current incarnation (heartbeats):
  // which life of a restarted worker the exactly-once table follows.
  void SetCurrentIncarnations(const std::map<std::string, uint64_t>& current) {
    dedup_.SetCurrentIncarnations(current);
  }

 private:
  using Values = std::shared_ptr<ValueBuffer>;  // written only before it is published
  struct Part {
    std::string name;  // its tensor's, as first initialised ("" unnamed)
    Values value;
    OptimizerState state;
    uint64_t version = 0;
    // Sync mode: the value at version - 1 (empty before the first update and
    // after a restore). A worker that died between its pushes to two parts
    // leaves one a step ahead; its replacement needs that step's parameters
    // of every part to recompute the gradient the other part waits for.
    // Parts are never more than one step apart in sync mode (a worker pushes
    // step S only after pulling S from every part), so one value is enough.
    // It costs a second copy of the parameters on each shard, but no copying:
    // an update writes the new values into the buffer of the version before
    // (once no pull answer holds it) and the current one becomes previous.
    Values previous;
    // Sync mode: one slot per worker for the step being gathered, which has
    // arrived where contributed says so. The slots keep their size from
    // step to step, so a push is copied in without allocating. The step's
    // last push is not copied: its slot receives the mean instead.
    std::vector<std::vector<float>> contributions;
    std::vector<bool> contributed;
    // By rank: the Claim::order of the push copying into that worker's slot,
    // outside mutex_, or 0. Only that push touches the slot until it lets go.
    std::vector<uint64_t> copying;
    // Sync: the step's update is being computed outside mutex_. Its values
    // stay readable; its optimizer state does not, and it has no previous
    // version (that buffer receives the update), so pulls and snapshots
    // wait.
    bool updating = false;
    std::vector<uint32_t> shares;  // by rank: examples behind its gradient (0: equal shares)
    int received = 0;
    int expected = 0;   // contributors of the step being gathered, once one arrived
    int mean_rank = 0;  // whose slot holds the step's mean, once the last gradient arrived
    uint32_t global_batch = 0;
    // Sync, SkipStep: a non-finite gradient was gathered for this step, so
    // the step completes without an update.
    bool skip_update = false;
  };
  using PartKey = std::pair<uint32_t, uint64_t>;  // (key, offset)

  // Checks that the parts are within the bounds above and listed once each,
  // that each exists with the stated length (`must_exist`) and that `data`
  // holds exactly their floats, as `encoding` packs them; names the first
  // offender otherwise.
  grpc::Status CheckParts(const google::protobuf::RepeatedPtrField<v1::PartRef>& parts,
                          size_t data_bytes, bool must_exist,
                          GradientEncoding encoding = GradientEncoding::kFloat32) const;
  // Under mutex_: the push's checks against the parts (their step, the
  // step's workers), and the snapshot when a checkpoint is due.
  grpc::Status CheckStep(const v1::PushRequest& request, const PushData& data,
                         std::unique_ptr<v1::ShardCheckpoint>* due);
  // The push applied once (DedupTable), from its claims to its updates; an
  // async checkpoint that falls due goes to `due`.
  grpc::Status ApplyOnce(const v1::PushRequest& request, PushData& data,
                         std::unique_ptr<v1::ShardCheckpoint>* due);
  // A push moves its gradients in three stages, so that no lock is held
  // while bytes move: under mutex_ it claims its parts (ClaimParts), then
  // copies the gradients in without the lock (CopyIn), then under mutex_
  // again lets go and counts them in (Release, Apply).
  struct MeanPlan {              // how the step's last push sums the step's gradients
    std::vector<int> ranks;      // the step's contributors, the last among them, in rank order
    std::vector<float> weights;  // by position in ranks (equal shares: unused)
    bool equal_shares = true;
  };
  struct Claim {
    Part* part = nullptr;  // null: skipped (an applied step, or this worker's gradient is in)
    size_t length = 0;
    // Sync: when claimed, every other gradient of the step was in or being
    // copied in, so this push may be the step's last (AwaitLast says).
    bool may_complete = false;
    bool completes = false;  // it was: its slot holds the step's mean
    uint64_t order = 0;      // when its push claimed, among all pushes
  };
  // Requires mutex_. Sync: claims the worker's slot of every part the push
  // brings a gradient for; every push claims all its parts at once, so
  // that a push waits only for pushes that claimed before it.
  grpc::Status ClaimParts(const v1::PushRequest& request, std::vector<Claim>* claims);
  // Requires mutex_: another push of the same worker still copies into one
  // of the request's parts (a resend under a new id, a restarted worker).
  bool SameWorkerCopying(const v1::PushRequest& request) const;
  // Without mutex_: reads the push's gradients into the claimed slots (or,
  // async, into `async_gradient`); returns the index of the first part
  // holding NaN or Inf, or -1.
  int CopyIn(const v1::PushRequest& request, PushData& data, std::vector<Claim>* claims,
             std::vector<float>* async_gradient);
  // Sync, takes mutex_: waits until no push that claimed the part before
  // this one still copies into it, then says whether this push's gradient
  // is the step's last, and if so how to sum them.
  bool AwaitLast(const v1::PushRequest& request, const Claim& claim, MeanPlan* plan);
  // Without mutex_: reads the step's last gradient, from worker `rank`, and
  // sums it with the others in rank order into that worker's slot
  // (mean_rank); false if it holds NaN or Inf.
  static bool GatherLast(Part& part, int rank, size_t n, const MeanPlan& plan, PushData& data);
  // A sync step's update, computed outside mutex_ by the push that
  // completed the step: the new values go to `next`.
  struct Update {
    Part* part = nullptr;
    Values next;
  };
  // Require mutex_. Release lets go of the claims; Apply then counts the
  // gradients in and updates where a step completes (async: at once).
  void Release(const v1::PushRequest& request, const std::vector<Claim>& claims);
  // Requires mutex_, after Release: a claim whose step completed without it
  // is dropped; one that would complete a step it did not sum is refused.
  // Neither happens while every step's pushes agree on its workers.
  grpc::Status CheckCounts(const v1::PushRequest& request, std::vector<Claim>* claims) const;
  void Apply(const v1::PushRequest& request, const std::vector<Claim>& claims, bool skip,
             const std::vector<float>& async_gradient, std::vector<Update>* updates);
  // Requires mutex_ (held by `lock`): waits until no push holds a claim or
  // computes an update, before parts_ is replaced.
  void AwaitPushesOutsideLock(std::unique_lock<std::mutex>& lock);
  // Sync, require mutex_: a step whose gradients are all in ends at once
  // when its update is skipped; otherwise CompleteStep marks the part
  // updating and says where the update goes, RunUpdate (without mutex_)
  // computes it, and PublishUpdate makes it the part's next version.
  Update CompleteStep(Part& part);
  void RunUpdate(const Update& update);
  // The optimizer's update of one part, split over update_threads_.
  void ApplyOptimizer(const float* from, float* to, const float* gradient, size_t n,
                      OptimizerState* state);
  void PublishUpdate(Update& update);
  void NextStep(Part& part);  // the step's bookkeeping starts over at the next version
  // The contributors a sync push says its step has; a fixed job's pushes
  // say none and mean every worker.
  int Contributors(const v1::PushRequest& request) const;
  void ResetContributions(Part& part) const;
  // A buffer of n floats to write an update to: `candidate` when no pull
  // answer holds it any more (and it lies where NewValues would put it), a
  // new one otherwise.
  Values Writable(const Values& candidate, size_t n);
  // Requires mutex_. A new buffer of n floats: in shared memory once a
  // worker asked to map values (sync, big parts), else on the heap; where
  // /dev/shm cannot hold it, on the heap from then on.
  Values NewValues(size_t n);
  bool Shares(size_t n) const {
    return sharing_ == Sharing::kYes && n * sizeof(float) >= kMinMappedBytes;
  }
  grpc::Status CheckGeneration(uint64_t generation) const;  // requires mutex_
  // An Init's parts against those the shard holds: the same lengths and
  // names. Parts it does not hold are not judged. Requires mutex_.
  grpc::Status CheckDeclaredAsStored(const v1::InitRequest& request) const;
  // Takes a checkpoint when one is due (requires mutex_); the caller
  // writes it once the lock is released.
  bool CheckpointDue(uint64_t* step) const;
  // Requires mutex_: the state as a checkpoint of `step`, in the message
  // the writer wrote last (CheckpointWriter::Blank).
  std::unique_ptr<v1::ShardCheckpoint> TakeCheckpoint(uint64_t step);
  void Install(const v1::ShardCheckpoint& checkpoint);  // requires mutex_
  // FAILED_PRECONDITION where this job cannot resume from `checkpoint`:
  // written by a job of another number of servers, of optimizer none
  // against another (gradients against parameters), or by an async job for
  // a sync one (a step that counts pushes).
  Status FitsThisJob(const v1::ShardCheckpoint& checkpoint) const;
  Status WriteCheckpoint(const v1::ShardCheckpoint& checkpoint);

  const ShardOptions options_;
  const std::unique_ptr<Optimizer> optimizer_;
  UpdateThreads update_threads_;  // one thread: each update whole on its push's thread
  DedupTable dedup_;

  mutable std::mutex mutex_;  // guards parts_ and every Part
  std::condition_variable advanced_;
  std::map<PartKey, Part> parts_;
  uint64_t generation_ = 0;
  // Sync mode, after a restart from a checkpoint: serve nothing until the
  // scheduler's recovery tells this shard which step the job resumes from.
  bool awaiting_recovery_ = false;
  bool stopping_ = false;
  // Sync: whether big parts' new buffers go to shared memory: once a worker
  // on this host asked to map values (PullLanding::MayMap), until /dev/shm
  // had no room for one (then never again: each try would scan /dev/shm).
  enum class Sharing { kNotAsked, kYes, kNoRoom };
  Sharing sharing_ = Sharing::kNotAsked;
  // Init adds parts only until the first push (or a checkpoint) fixes the
  // key set: a part added later would never advance and would stop the
  // shard's checkpoints (CheckpointDue takes the lowest version).
  bool key_set_fixed_ = false;
  int64_t last_checkpoint_ = -1;  // step (sync) or push count (async) of the last one
  uint64_t applied_pushes_ = 0;
  uint32_t global_batch_ = 0;      // elastic: the examples of a step, as pushes and checkpoints say
  uint32_t state_batch_size_ = 0;  // StateBatchSize
  uint32_t loaded_checkpoint_workers_ = 0;
  // Async: AsyncWorkerSteps, and whether the shard can tell them.
  v1::AsyncWorkerSteps async_worker_steps_;
  bool async_worker_steps_known_ = true;
  // Pushes holding claims or computing updates: parts_ stays as it is until they are done.
  int pushes_outside_lock_ = 0;
  int parts_updating_ = 0;  // sync: parts whose Part::updating is set
  int quiescing_ = 0;       // callers of AwaitPushesOutsideLock waiting: pushes claim nothing
  uint64_t claims_made_ = 0;
  std::unique_ptr<CheckpointStore> checkpoints_;
  mutable std::mutex write_mutex_;  // one checkpoint write at a time; guards the four below
  int failures_in_a_row_ = 0;
  std::string last_failure_;
  std::string taken_over_;
  // A checkpoint of an older generation, taken before a rollback and queued
  // since, is not written: its step is of the timeline the rollback left.
  uint64_t oldest_writable_generation_ = 0;
  // What CheckpointSteps listed last, and the listing error it last logged.
  mutable std::mutex listed_mutex_;
  mutable std::vector<uint64_t> listed_steps_;
  mutable std::string listing_error_;

  prometheus::Counter& pushes_;
  prometheus::Counter& pulls_;
  prometheus::Counter& updates_;
  prometheus::Counter& push_bytes_;
  prometheus::Counter& pull_bytes_;
  prometheus::Counter& duplicates_;
  prometheus::Counter& checkpoints_written_;
  prometheus::Counter& nonfinite_pushes_;
  prometheus::Counter& updates_skipped_;
  prometheus::Counter& checkpoint_failures_;
  // FoldersNotFlushed (durable_file.h) as the last write saw it: the
  // counter takes what came since. Under write_mutex_.
  prometheus::Counter& folders_not_flushed_;
  uint64_t folders_not_flushed_seen_ = 0;
  prometheus::Gauge& learning_rate_;  // of the last update, as the schedule gives it
  // Last: its thread writes through the members above until it ends.
  std::unique_ptr<CheckpointWriter> writer_;  // where checkpoints_ is
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_SHARD_H_
