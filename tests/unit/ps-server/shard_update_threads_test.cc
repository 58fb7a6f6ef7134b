// A shard that splits each big part's update over threads (ShardOptions::
// update_threads, common/update_threads.h) ends on the bits of one that
// does not.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

// Adam over a part of 300,000 floats, two workers, three steps: the shard
// that splits each update over 4 threads ends on the same bits (moments that
// differed after a step would move the values of the next).
TEST(ShardUpdateThreadsTest, AShardThatSplitsItsUpdatesEndsOnTheBitsOfOneThatDoesNot) {
  const uint32_t length = 300000;
  auto run = [&](int threads) {
    ShardOptions options = shard_testing::PlainShardOptions(true, 2);
    options.optimizer.name = "adam";
    options.optimizer.learning_rate = 0.01f;
    options.update_threads = threads;
    auto shard = shard_testing::MakeShard(options);
    shard_testing::InitKeys(*shard, {7}, length,
                            [](uint32_t, uint32_t i) { return std::sin(0.01f * i); });
    uint64_t seq = 0;
    for (uint64_t step = 0; step < 3; ++step) {
      for (int rank : {0, 1}) {
        std::vector<float> grad(length);
        for (uint32_t i = 0; i < length; ++i) grad[i] = std::cos(0.003f * i * (rank + step + 1));
        const v1::PushRequest request = shard_testing::PushOfKeys(rank, ++seq, step, {7}, length);
        PushData data(shard_testing::OnePiece(grad));
        EXPECT_TRUE(shard->Push(request, data).ok());
      }
    }
    EXPECT_EQ(shard->PartVersion(7, 0), 3u);
    return shard->PartValue(7, 0);
  };
  const std::vector<float> one = run(1), four = run(4);
  ASSERT_EQ(one.size(), length);
  ASSERT_EQ(four.size(), length);
  EXPECT_EQ(0, std::memcmp(one.data(), four.data(), length * sizeof(float)));
}

}  // namespace
}  // namespace kubeps
