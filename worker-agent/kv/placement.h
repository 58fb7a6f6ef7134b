// Key placement: which server stores which part of which tensor. A pure
// function of the tensor sizes and the number of servers, so every worker
// computes the same answer without asking anyone.
//
//  - A tensor smaller than big_array_bound elements goes whole to one
//    server: the one with the fewest elements so far (ties: lowest rank),
//    taking tensors in key order. This balances bytes, not key counts.
//  - A larger tensor is cut into num_servers near-equal slices, slice i on
//    server i (MXNET_KVSTORE_BIGARRAY_BOUND's rule).
//  - Any part longer than max_part_elems is cut again into chunks, so big
//    tensors travel as several requests in flight at once.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_WORKER_AGENT_KV_PLACEMENT_H_
#define KUBEPS_WORKER_AGENT_KV_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "worker-agent/kv/sdk_export.h"

namespace kubeps {

struct Part {
  uint32_t key;
  uint64_t offset;  // elements into the tensor
  uint64_t length;  // elements
  int server;       // server rank
};

struct PlacementOptions {
  uint64_t big_array_bound = 1000000;
  uint64_t max_part_elems = 1 << 19;  // 2 MiB of float32
};

// Parts of every tensor, grouped by key in key order, offsets increasing.
KUBEPS_EXPORT std::vector<Part> PlaceTensors(const std::vector<uint64_t>& tensor_sizes,
                                             int num_servers, const PlacementOptions& options);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_PLACEMENT_H_
