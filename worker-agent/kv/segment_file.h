// For the pod's agent (kubeps-agent --serve): the in-process KV client's own
// shared-memory segment, where the training program's tensors can live so
// that the agent copies nothing between the program and the servers. Kept
// out of kv_worker.h, the SDK's header: only the agent needs it.
#ifndef KUBEPS_WORKER_AGENT_KV_SEGMENT_FILE_H_
#define KUBEPS_WORKER_AGENT_KV_SEGMENT_FILE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/shared_memory.h"
#include "worker-agent/kv/kv_worker.h"

namespace kubeps {

// Where `kv` is the in-process client (KVWorker::Start) and a server on
// this host maps its segment, places tensors of `sizes` and lays them out
// in the segment now, before InitTensors (which keeps both for the same
// sizes), and says where the file is: kv->SharedValues(key) and
// SharedGrads(key) then point into it. Nothing otherwise.
std::optional<SegmentFile> PrepareSegment(KVWorker* kv, const std::vector<uint64_t>& sizes);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_SEGMENT_FILE_H_
