// A shard's checkpoints on disk: one file per checkpointed step,
// "<dir>/step-<step>.ckpt", a serialized ShardCheckpoint. Writes are atomic
// (temporary file, fsync, rename, fsync of the folder): a crash mid-write
// leaves the previous checkpoints intact and never a torn file under a
// checkpoint's name. The newest kKeep are kept: a rollback may need the one
// before the newest, when a peer shard died before writing that one.
//
// Not synchronised: the shard calls it under its own lock.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "kubeps.pb.h"

namespace kubeps {

class CheckpointStore {
 public:
  static constexpr int kKeep = 3;

  // Creates `dir` (and its parents) if needed.
  static Status Open(const std::string& dir, std::unique_ptr<CheckpointStore>* out);

  Status Write(const v1::ShardCheckpoint& checkpoint);
  Status Read(uint64_t step, v1::ShardCheckpoint* checkpoint) const;
  // The newest readable checkpoint; *found = false when there is none.
  // Unreadable files are skipped, and named in `skipped`.
  Status ReadLatest(v1::ShardCheckpoint* checkpoint, bool* found, std::string* skipped) const;
  // Steps that have a checkpoint, oldest first.
  std::vector<uint64_t> Steps() const;
  const std::string& dir() const { return dir_; }

 private:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(uint64_t step) const;

  std::string dir_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_STORE_H_
