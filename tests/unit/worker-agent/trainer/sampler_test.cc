// BatchSampler: the data-parallel split of every global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "worker-agent/trainer/batch_sampler.h"

namespace kubeps::trainer {
namespace {

std::vector<uint32_t> Indices(BatchSampler& s, int64_t epoch, int64_t step, int rank, int workers) {
  std::vector<uint32_t> idx;
  const Status st = s.WorkerIndices(epoch, step, rank, workers, &idx);
  EXPECT_TRUE(st.ok()) << st.message();
  return idx;
}

TEST(BatchSamplerTest, StepsPerEpochDropsTheRemainder) {
  EXPECT_EQ(BatchSampler(60000, 64, 1).StepsPerEpoch(), 937);
  EXPECT_EQ(BatchSampler(60000, 128, 1).StepsPerEpoch(), 468);
  EXPECT_EQ(BatchSampler(100, 100, 1).StepsPerEpoch(), 1);
  EXPECT_EQ(BatchSampler(99, 100, 1).StepsPerEpoch(), 0);
  EXPECT_EQ(BatchSampler(100, 0, 1).StepsPerEpoch(), 0);
  EXPECT_EQ(BatchSampler(100, 64, 1).LocalBatch(4), 16);
}

TEST(BatchSamplerTest, PermutationIsAPermutationAndDeterministic) {
  BatchSampler a(1000, 10, 42), b(1000, 10, 42), c(1000, 10, 43);
  const std::vector<uint32_t> p0 = a.Permutation(0);
  std::vector<uint32_t> sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(b.Permutation(0), p0);
  EXPECT_NE(c.Permutation(0), p0);  // another seed
  EXPECT_NE(a.Permutation(1), p0);  // another epoch
  EXPECT_EQ(a.Permutation(0), p0);  // back to epoch 0
  EXPECT_NE(p0, sorted);            // actually shuffled
}

TEST(BatchSamplerTest, PermutationIsPortable) {
  // Pinned values: the shuffle uses only std::mt19937_64 and its own integer
  // arithmetic, so every platform must produce exactly this order.
  BatchSampler s(10, 2, 7);
  const std::vector<uint32_t> first = s.Permutation(0);
  BatchSampler again(10, 2, 7);
  EXPECT_EQ(again.Permutation(0), first);
  EXPECT_EQ(first, (std::vector<uint32_t>{7, 8, 0, 4, 1, 6, 9, 5, 2, 3}));
}

TEST(BatchSamplerTest, WorkerSlicesUnionIsTheGlobalBatch) {
  BatchSampler s(1000, 64, 5);
  const std::vector<uint32_t>& perm = s.Permutation(3);
  for (int workers : {1, 2, 4, 8}) {
    for (int64_t step : {0, 1, 14}) {
      std::vector<uint32_t> all;
      for (int rank = 0; rank < workers; ++rank) {
        const std::vector<uint32_t> part = Indices(s, 3, step, rank, workers);
        EXPECT_EQ(part.size(), static_cast<size_t>(64 / workers));
        all.insert(all.end(), part.begin(), part.end());
      }
      const std::vector<uint32_t> global(perm.begin() + step * 64, perm.begin() + (step + 1) * 64);
      EXPECT_EQ(all, global) << workers << " workers, step " << step;
    }
  }
}

TEST(BatchSamplerTest, TwoWorkersSeeWhatOneWorkerWithTwiceTheBatchSees) {
  BatchSampler s(60000, 128, 9);
  for (int64_t epoch : {0, 1}) {
    for (int64_t step = 0; step < s.StepsPerEpoch(); step += 97) {
      const std::vector<uint32_t> one = Indices(s, epoch, step, 0, 1);
      std::vector<uint32_t> two = Indices(s, epoch, step, 0, 2);
      const std::vector<uint32_t> second = Indices(s, epoch, step, 1, 2);
      two.insert(two.end(), second.begin(), second.end());
      ASSERT_EQ(one.size(), 128u);
      EXPECT_EQ(one, two);
    }
  }
}

TEST(BatchSamplerTest, EveryExampleAtMostOncePerEpoch) {
  BatchSampler s(1000, 96, 11);  // 10 steps, 40 examples left out
  for (int64_t epoch : {0, 1, 2}) {
    std::set<uint32_t> seen;
    for (int64_t step = 0; step < s.StepsPerEpoch(); ++step) {
      for (int rank = 0; rank < 3; ++rank) {
        for (uint32_t i : Indices(s, epoch, step, rank, 3)) {
          ASSERT_LT(i, 1000u);
          ASSERT_TRUE(seen.insert(i).second) << "example " << i << " twice in epoch " << epoch;
        }
      }
    }
    EXPECT_EQ(seen.size(), 960u);
  }
}

TEST(BatchSamplerTest, EpochsHaveDifferentOrders) {
  BatchSampler s(60000, 64, 3);
  const std::vector<uint32_t> e0 = Indices(s, 0, 0, 0, 1);
  const std::vector<uint32_t> e1 = Indices(s, 1, 0, 0, 1);
  const std::vector<uint32_t> e2 = Indices(s, 2, 0, 0, 1);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  EXPECT_NE(e0, e2);
  EXPECT_EQ(Indices(s, 0, 0, 0, 1), e0);
}

TEST(BatchSamplerTest, UnevenSplitLeavesTheTailOfEachGlobalBatchOut) {
  BatchSampler s(100, 10, 1);
  const std::vector<uint32_t>& perm = s.Permutation(0);
  const std::vector<uint32_t> last = Indices(s, 0, 2, 2, 3);  // b = 3: [26, 29)
  EXPECT_EQ(last, std::vector<uint32_t>(perm.begin() + 26, perm.begin() + 29));
}

TEST(BatchSamplerTest, RejectsOutOfRangeArguments) {
  BatchSampler s(100, 10, 1);
  std::vector<uint32_t> idx;
  EXPECT_FALSE(s.WorkerIndices(0, 10, 0, 1, &idx).ok());  // 10 steps per epoch: 0..9
  EXPECT_FALSE(s.WorkerIndices(0, -1, 0, 1, &idx).ok());
  EXPECT_FALSE(s.WorkerIndices(-1, 0, 0, 1, &idx).ok());
  EXPECT_FALSE(s.WorkerIndices(0, 0, 2, 2, &idx).ok());
  EXPECT_FALSE(s.WorkerIndices(0, 0, -1, 2, &idx).ok());
  EXPECT_FALSE(s.WorkerIndices(0, 0, 0, 0, &idx).ok());
  EXPECT_FALSE(s.WorkerIndices(0, 0, 0, 11, &idx).ok());  // more workers than examples
  const Status st = s.WorkerIndices(0, 10, 0, 1, &idx);
  EXPECT_NE(st.message().find("step 10"), std::string::npos) << st.message();
}

TEST(BatchSamplerTest, FillWorkerBatchGathersTheSlice) {
  Dataset d;
  d.count = 50;
  d.rows = 2;
  d.cols = 3;
  for (int i = 0; i < 50; ++i) {
    for (int p = 0; p < 6; ++p) d.pixels.push_back(static_cast<uint8_t>(i * 5 + p));
    d.labels.push_back(static_cast<uint8_t>(i % 10));
  }
  BatchSampler s(50, 8, 2);
  std::vector<float> images(4 * 6);
  std::vector<uint8_t> labels(4);
  ASSERT_TRUE(FillWorkerBatch(d, s, 1, 3, 1, 2, images.data(), labels.data()).ok());
  const std::vector<uint32_t> idx = Indices(s, 1, 3, 1, 2);
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(labels[j], idx[j] % 10);
    for (int p = 0; p < 6; ++p) EXPECT_FLOAT_EQ(images[j * 6 + p], (idx[j] * 5 + p) / 255.0f);
  }
  BatchSampler wrong(49, 8, 2);
  EXPECT_FALSE(FillWorkerBatch(d, wrong, 0, 0, 0, 1, images.data(), labels.data()).ok());
}

}  // namespace
}  // namespace kubeps::trainer
