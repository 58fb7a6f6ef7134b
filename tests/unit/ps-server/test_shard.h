// What the shard tests share: a shard with plain arithmetic (SGD, learning
// rate 1: new value = old value - mean gradient) and floats as the bytes a
// request carries.
#ifndef KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_
#define KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "common/metrics.h"
#include "common/optimizer.h"
#include "ps-server/shard.h"

namespace kubeps::shard_testing {

inline ShardOptions PlainShardOptions(bool sync, int num_workers) {
  ShardOptions options;
  options.sync = sync;
  options.num_workers = num_workers;
  options.optimizer.name = "sgd";
  options.optimizer.learning_rate = 1.0f;
  return options;
}

inline std::unique_ptr<Shard> MakeShard(const ShardOptions& options) {
  std::string error;
  auto optimizer = MakeOptimizer(options.optimizer, &error);
  EXPECT_NE(optimizer, nullptr) << error;
  return std::make_unique<Shard>(options, std::move(optimizer), &NullMetrics());
}

inline std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// A push's header from worker `rank` (its id "worker-<rank>", incarnation
// 1) for a part of `length` floats at offset 0 of each key.
inline v1::PushRequest PushOfKeys(int rank, uint64_t seq, uint64_t step,
                                  const std::vector<uint32_t>& keys, uint32_t length) {
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-" + std::to_string(rank));
  request.mutable_id()->set_incarnation(1);
  request.mutable_id()->set_seq(seq);
  request.set_worker_rank(rank);
  request.set_step(step);
  for (uint32_t key : keys) {
    v1::PartRef* p = request.add_parts();
    p->set_key(key);
    p->set_length(length);
  }
  return request;
}

// `values` as one piece of a push's data, where they lie: a push through
// shared memory.
inline std::vector<std::string_view> OnePiece(const std::vector<float>& values) {
  return {std::string_view(reinterpret_cast<const char*>(values.data()),
                           values.size() * sizeof(float))};
}

// `bytes` cut into pieces of `size` bytes (the last may be shorter), as
// gRPC hands a request's data in slices.
inline std::vector<std::string_view> CutInto(const std::string& bytes, size_t size) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < bytes.size(); i += size) {
    pieces.emplace_back(bytes.data() + i, std::min(size, bytes.size() - i));
  }
  return pieces;
}

// Initialises a part of `length` floats at offset 0 for each key, its i-th
// value value(key, i).
inline void InitKeys(Shard& shard, const std::vector<uint32_t>& keys, uint32_t length,
                     const std::function<float(uint32_t key, uint32_t i)>& value) {
  v1::InitRequest request;
  request.mutable_id()->set_node_id("worker-0");
  std::vector<float> values;
  for (uint32_t key : keys) {
    v1::PartRef* p = request.add_parts();
    p->set_key(key);
    p->set_length(length);
    for (uint32_t i = 0; i < length; ++i) values.push_back(value(key, i));
  }
  request.set_data(Bytes(values));
  v1::InitResponse response;
  ASSERT_TRUE(shard.Init(request, &response).ok());
}

}  // namespace kubeps::shard_testing

#endif  // KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_
