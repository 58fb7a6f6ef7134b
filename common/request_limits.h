// Bounds of what one parameter-server request may name: its parts, each at
// most once, and the bytes they hold (a Pull's answer, a Push's data). The
// shards refuse a request past them (ps-server/shard.h); the KV client
// keeps its batches within them (worker-agent/kv/kv_worker.cc).
#ifndef KUBEPS_COMMON_REQUEST_LIMITS_H_
#define KUBEPS_COMMON_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace kubeps {

constexpr size_t kMaxPartsPerRequest = 65536;
constexpr uint64_t kMaxRequestBytes = 256ull << 20;
constexpr size_t kMaxTensorNameBytes = 1024;  // InitRequest.names: kept in every checkpoint

}  // namespace kubeps

#endif  // KUBEPS_COMMON_REQUEST_LIMITS_H_
