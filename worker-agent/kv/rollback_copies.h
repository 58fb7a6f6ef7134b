// What a sync job's rollback takes back in a C++ training program.
//
// A rollback (a parameter server restarted from its checkpoint) sends every
// worker back to the newest step all servers hold a checkpoint of: a
// multiple of the checkpoint interval, or the step the job resumed at, and
// the steps from there are computed again. The servers' state goes back
// with their checkpoints; the program's own (its parameters and its
// optimizer's state where the servers' optimizer is none, its random
// generators) must go back with it, or the redone steps apply their updates
// a second time. RollbackCopies keeps copies of the regions a program
// tracks, in host memory, at the steps a rollback may go back to, and puts
// one back after KVWorker::Recover:
//
//   kubeps::RollbackCopies copies(*kv);
//   copies.Track(weights.data(), weights.size() * sizeof(float));
//   copies.Track(momentum.data(), momentum.size() * sizeof(float));
//   while (step < total) {
//     copies.BeforeStep(step);
//     ... compute, PushPull, Wait ...
//     if (s.IsAborted()) {
//       kv->Recover(&step);
//       if (!copies.RollBack(step)) { /* none of that step: load your own */ }
//       continue;
//     }
//     ++step;
//   }
//
// The copies kept (3 by default; KUBEPS_ROLLBACK_COPIES in the environment
// says another number, 0 none) are those a rollback is likeliest to go back
// to: the newest step every server has checkpointed as the client last
// heard (KVWorker::NewestCommonCheckpoint), the newer ones, and the one
// before, as kubeps.torch keeps them. Not thread-safe: the training loop's.
#ifndef KUBEPS_WORKER_AGENT_KV_ROLLBACK_COPIES_H_
#define KUBEPS_WORKER_AGENT_KV_ROLLBACK_COPIES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "worker-agent/kv/sdk_export.h"

namespace kubeps {

class KVWorker;

class KUBEPS_EXPORT RollbackCopies {
 public:
  static constexpr int kDefaultKept = 3;

  // The interval and the newest common checkpoint from `kv`, which must
  // outlive this; `kept` copies at most (-1: KUBEPS_ROLLBACK_COPIES, else
  // kDefaultKept).
  explicit RollbackCopies(const KVWorker& kv, int kept = -1);
  // `interval`: spec.checkpoint.intervalSteps (0: a copy at the first step
  // only); `newest_common`: the newest step every server holds a
  // checkpoint of, -1 where not known.
  RollbackCopies(uint64_t interval, std::function<int64_t()> newest_common, int kept = -1);

  // A region of the program's state, copied and put back whole. It stays
  // where it is, at its size, while this object is used.
  void Track(void* data, size_t bytes);

  // Before the program computes `step`: its state is then the state at
  // every step since the one after the last it computed (an elastic worker
  // skips the steps others compute), and at the first step after the
  // object was made or a rollback, at that step. Copied where those steps
  // hold a multiple of the interval, or start the run.
  void BeforeStep(uint64_t step);

  // After KVWorker::Recover said `resume_step`: the copy of that step goes
  // back into the regions and the copies of later steps, another timeline's,
  // are dropped. False where no copy is of that step: the regions are left
  // as they are (a program restores them from files of its own).
  bool RollBack(uint64_t resume_step);

  // The steps of each copy kept, oldest first: [first, last] of each.
  std::vector<std::pair<uint64_t, uint64_t>> kept_steps() const;
  int kept() const { return kept_; }

 private:
  struct Region {
    void* data;
    size_t bytes;
  };
  struct Copy {
    uint64_t first = 0, last = 0;  // the steps the copied state is the state at
    std::vector<char> bytes;       // every region's, one after the other
  };
  // The copies to keep beside a new one, at most kept_ - 1.
  void DropUnlikely();

  uint64_t interval_;
  std::function<int64_t()> newest_common_;
  int kept_;
  std::vector<Region> regions_;
  std::vector<Copy> copies_;  // oldest first
  bool started_ = false;      // the next BeforeStep starts a run (made, or rolled back)
  uint64_t state_from_ = 0;   // once started: the first step the state is at
  std::vector<char> spare_;   // a dropped copy's memory, for the next
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_ROLLBACK_COPIES_H_
