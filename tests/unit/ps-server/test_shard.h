// What the shard tests share: a shard with plain arithmetic (SGD, learning
// rate 1: new value = old value - mean gradient) and floats as the bytes a
// request carries.
#ifndef KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_
#define KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_

#include <memory>
#include <string>
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

}  // namespace kubeps::shard_testing

#endif  // KUBEPS_TESTS_UNIT_PS_SERVER_TEST_SHARD_H_
