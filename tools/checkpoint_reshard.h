// `kubeps reshard`: a job's checkpoints cut again for another number of
// parameter servers, or another spec.bigArrayBound.
//
// Each server checkpoints the parts that key placement (placement.h) gives
// it among the job's servers, so a job run again with more or fewer servers
// finds every tensor cut otherwise than its shards would hold it. The
// parameters and the optimizer's state are elementwise: put back together
// and cut again the way the new job places them, they are the same numbers,
// and a sync job resumed from them goes on bit for bit as it would have with
// its old servers (a step's mean and the optimizer's update do not depend
// on which server computes which element).
//
// Offline, while no job runs on the folder: the newest step every old
// server holds is resharded, and the old folders are moved aside, not
// deleted.
#ifndef KUBEPS_TOOLS_CHECKPOINT_RESHARD_H_
#define KUBEPS_TOOLS_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kubeps.pb.h"
#include "worker-agent/kv/placement.h"

namespace kubeps::tools {

// The checkpoints of one step, one per old server in rank order, as
// `servers` servers would hold them under `placement`. Each tensor's
// pieces must cover it without gaps; pieces updated a different number of
// times go on with the most, said in `notes`. The exactly-once tables are
// left out (the job that resumes from them is a new run, whose workers are
// new senders).
Status ReshardCheckpoints(const std::vector<v1::ShardCheckpoint>& from, int servers,
                          const PlacementOptions& placement, std::vector<v1::ShardCheckpoint>* to,
                          std::vector<std::string>* notes = nullptr);

// True where `checkpoints` hold their parts exactly as `servers` servers
// place them under `placement`: nothing to reshard.
bool PlacedAsBy(const std::vector<v1::ShardCheckpoint>& checkpoints, int servers,
                const PlacementOptions& placement);

struct ReshardReport {
  uint64_t step = 0;
  int old_servers = 0;
  uint64_t tensors = 0;
  uint64_t bytes = 0;              // parameters and optimizer state
  std::string moved_aside;         // where the old folders went; "" when nothing changed
  std::vector<std::string> notes;  // what the new checkpoints hold otherwise than the old
};

// Reshards the checkpoints under `folder` (spec.checkpoint.path: one
// "server-<i>" folder per server) for `servers` servers: the newest step
// every old server (a folder holding checkpoints) holds and can read. Every
// "server-<i>" folder is moved aside, the empty ones a failed run left
// included. Refuses, changing nothing, where a server holds a folder (a job
// runs on it), where the old servers hold no step in common, or where the
// checkpoints cannot be put together; a move that fails is undone. The new
// folders hold only the resharded step, and the run mark of the old ones.
// While it moves folders, a journal in `folder` (kReshardJournal) says
// what: servers refuse the folder, and a reshard killed between two moves
// is finished by the next one before anything else. `after_each_move` is
// called after each move (tests: a kill between two).
Status ReshardFolder(const std::string& folder, int servers, const PlacementOptions& placement,
                     ReshardReport* report, const std::function<void()>& after_each_move = {});

}  // namespace kubeps::tools

#endif  // KUBEPS_TOOLS_CHECKPOINT_RESHARD_H_
