// Key placement: which server stores which part of which tensor. A pure
// function of the tensor sizes and the number of servers, so every worker
// computes the same answer without asking anyone.
//
//  - A tensor smaller than big_array_bound elements goes whole to one
//    server: the one with the fewest elements so far (ties: lowest rank),
//    taking tensors in key order. This balances bytes, not key counts.
//  - Except a small tensor that follows a larger one (fewer than
//    follow_bound elements, and fewer than the key before it): it joins the
//    server of that key. Frameworks declare a layer's weight, then its bias,
//    and the backward pass makes both ready at once: on one server they
//    travel in one request each way instead of two. A request costs a gRPC
//    call on both sides (a tenth of a millisecond of CPU or more); a bias
//    on the fuller server costs a few KB of imbalance. After a sliced key
//    (on every server) the follower goes to the least loaded one.
//  - A larger tensor is cut into num_servers near-equal slices, slice i on
//    server i (MXNET_KVSTORE_BIGARRAY_BOUND's rule).
//  - Where those rules leave a server without a part, the biggest tensors
//    placed whole are sliced as well, as few as it takes: a server holding
//    nothing checkpoints nothing, and a recovery goes back to a step every
//    server holds. (Only where no tensor has as many elements as there are
//    servers does one stay empty.)
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
  uint64_t follow_bound = 1 << 16;    // 256 KiB of float32; 0: no key follows another
};

// Parts of every tensor, grouped by key in key order, offsets increasing.
KUBEPS_EXPORT std::vector<Part> PlaceTensors(const std::vector<uint64_t>& tensor_sizes,
                                             int num_servers, const PlacementOptions& options);

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_PLACEMENT_H_
