// Writes a shard's checkpoints on a thread of its own, in the order they
// were taken, so that the push that takes one is answered without waiting
// for the disk: a checkpoint is written durably (fsync of the file and its
// folder), which on a real disk takes tens of milliseconds for a model of
// a few million parameters, and the whole job's step waited for it.
//
// Nothing depends on a checkpoint being on disk when its push is answered:
// a shard reports to the scheduler only the steps on disk, and recovery
// goes back to the newest step every shard holds. One checkpoint at a time
// is held here: a push that takes the next one while the last is still
// being written waits for that write, as every push taking one did before,
// so a disk slower than the checkpoints come slows the job instead of
// filling memory with copies of the shard's state.
//
// The message written last is kept and handed out again (Blank), so that a
// shard's next checkpoint fills buffers it filled before instead of
// allocating its whole state anew each time. Touching fresh pages is what a
// checkpoint cost most (docs/performance.md, "Checkpoints without fresh
// memory"), and the copies were made under the shard's lock. A shard thus
// keeps one copy of its state beside it for good, where before it made two
// (the message and its serialized bytes) at each checkpoint.
//
// Thread-safe.
#ifndef KUBEPS_PS_SERVER_CHECKPOINT_WRITER_H_
#define KUBEPS_PS_SERVER_CHECKPOINT_WRITER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "kubeps.pb.h"

namespace kubeps {

class CheckpointWriter {
 public:
  using Write = std::function<void(const v1::ShardCheckpoint&)>;
  explicit CheckpointWriter(Write write);
  // Writes what was handed over, then ends its thread.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Hands `checkpoint` over and returns; waits first while the one before
  // is still being written.
  void Hand(std::unique_ptr<v1::ShardCheckpoint> checkpoint);
  // Returns once every checkpoint handed over before is written (or failed).
  void Drain();
  // A message to take the next checkpoint into: the one written last, or a
  // new one while that is still being written.
  std::unique_ptr<v1::ShardCheckpoint> Blank();

 private:
  void Run();

  const Write write_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<v1::ShardCheckpoint> queued_;
  std::unique_ptr<v1::ShardCheckpoint> written_;  // the last one, for Blank
  bool writing_ = false;
  bool ending_ = false;
  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_CHECKPOINT_WRITER_H_
