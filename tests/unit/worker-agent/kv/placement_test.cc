// Key placement (worker-agent/kv/placement.h): small tensors whole on the
// least loaded server, a bias with its weight, big ones sliced over every
// server, long parts chunked, and the whole a pure function of its input.
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "worker-agent/kv/placement.h"

namespace kubeps {
namespace {

// No key follows another unless a test says so: the greedy rule alone.
PlacementOptions Options(uint64_t bound, uint64_t max_part, uint64_t follow_bound = 0) {
  PlacementOptions options;
  options.big_array_bound = bound;
  options.max_part_elems = max_part;
  options.follow_bound = follow_bound;
  return options;
}

bool Same(const Part& a, const Part& b) {
  return a.key == b.key && a.offset == b.offset && a.length == b.length && a.server == b.server;
}

// Every tensor covered exactly once, in key order with increasing offsets,
// no part longer than max_part, servers in range.
void ExpectValidPlacement(const std::vector<Part>& parts, const std::vector<uint64_t>& sizes,
                          int num_servers, const PlacementOptions& options) {
  std::map<uint32_t, uint64_t> covered;  // key -> elements covered so far (contiguous)
  uint32_t last_key = 0;
  bool first = true;
  for (const Part& p : parts) {
    ASSERT_LT(p.key, sizes.size());
    if (!first) {
      ASSERT_GE(p.key, last_key) << "parts not grouped in key order";
    }
    first = false;
    last_key = p.key;
    ASSERT_GT(p.length, 0u) << "empty part for key " << p.key;
    ASSERT_LE(p.length, std::max<uint64_t>(1, options.max_part_elems)) << "key " << p.key;
    ASSERT_GE(p.server, 0);
    ASSERT_LT(p.server, num_servers);
    // Contiguous, no gap, no overlap.
    ASSERT_EQ(p.offset, covered[p.key]) << "key " << p.key << ": gap or overlap at " << p.offset;
    covered[p.key] += p.length;
  }
  for (uint32_t key = 0; key < sizes.size(); ++key) {
    EXPECT_EQ(covered.count(key) ? covered[key] : 0u, sizes[key]) << "key " << key;
  }
}

TEST(PlacementTest, SmallTensorsWholeOnLeastLoadedServer) {
  // Greedy by elements in key order (ties: lowest rank):
  // key 0 (100) -> s0 [100, 0]; key 1 (50) -> s1 [100, 50];
  // key 2 (60) -> s1 [100, 110]; key 3 (10) -> s0 [110, 110];
  // key 4 (5) -> s0 (tie, lowest rank) [115, 110]; key 5 (1) -> s1.
  const std::vector<uint64_t> sizes = {100, 50, 60, 10, 5, 1};
  auto parts = PlaceTensors(sizes, 2, Options(1000, 1000));
  ASSERT_EQ(parts.size(), sizes.size());
  const std::vector<int> want_server = {0, 1, 1, 0, 0, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].key, i);
    EXPECT_EQ(parts[i].offset, 0u);
    EXPECT_EQ(parts[i].length, sizes[i]);
    EXPECT_EQ(parts[i].server, want_server[i]) << "key " << i;
  }
  ExpectValidPlacement(parts, sizes, 2, Options(1000, 1000));
}

TEST(PlacementTest, BalancesBytesNotKeyCounts) {
  // One big-but-under-bound tensor, then many small ones: they all go to
  // the other servers until the loads meet.
  const std::vector<uint64_t> sizes = {90, 10, 10, 10, 10, 10, 10};
  auto parts = PlaceTensors(sizes, 2, Options(100, 1000));
  ASSERT_EQ(parts.size(), sizes.size());
  EXPECT_EQ(parts[0].server, 0);
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i].server, 1) << "key " << i;
  // Round-robin by key would give 3 keys to each; by size the loads are 90/60.
}

TEST(PlacementTest, ASmallTensorAfterALargerOneJoinsItsServer) {
  // Weight, bias, weight, bias: each bias (fewer elements than the key
  // before, under the follow bound) goes with its weight, so a layer is one
  // request; each weight goes by load as before. Greedy alone would put key
  // 1 on server 1 and key 3 on server 0, splitting both layers.
  const std::vector<uint64_t> sizes = {100, 4, 60, 3};
  auto parts = PlaceTensors(sizes, 2, Options(1000, 1000, 50));
  ASSERT_EQ(parts.size(), sizes.size());
  const std::vector<int> want_server = {0, 0, 1, 1};
  for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(parts[i].server, want_server[i]) << i;
  ExpectValidPlacement(parts, sizes, 2, Options(1000, 1000, 50));

  // At or over the bound, or no smaller than the key before: by load.
  parts = PlaceTensors({100, 50, 60, 60}, 2, Options(1000, 1000, 50));
  EXPECT_EQ(parts[1].server, 1);
  EXPECT_EQ(parts[2].server, 1);
  EXPECT_EQ(parts[3].server, 0);
}

TEST(PlacementTest, AFollowerOfASlicedTensorGoesByLoad) {
  // Key 0 on server 0 (loads 3, 0); key 1 sliced over both (8, 5); key 2
  // follows a key that is on every server: the less loaded one, server 1.
  const std::vector<uint64_t> sizes = {3, 10, 2};
  auto parts = PlaceTensors(sizes, 2, Options(10, 1000, 50));
  ExpectValidPlacement(parts, sizes, 2, Options(10, 1000, 50));
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].server, 0);
  EXPECT_EQ(parts[3].key, 2u);
  EXPECT_EQ(parts[3].server, 1);
}

TEST(PlacementTest, TiesGoToLowestRank) {
  auto parts = PlaceTensors({5, 5, 5, 5}, 3, Options(1000, 1000));
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].server, 0);
  EXPECT_EQ(parts[1].server, 1);
  EXPECT_EQ(parts[2].server, 2);
  EXPECT_EQ(parts[3].server, 0);
}

TEST(PlacementTest, BigTensorSlicedOverAllServers) {
  // 10 >= bound 10: near-equal slices [0,3) [3,6) [6,10), slice i on server i.
  const std::vector<uint64_t> sizes = {10};
  auto parts = PlaceTensors(sizes, 3, Options(10, 1000));
  ASSERT_EQ(parts.size(), 3u);
  const uint64_t offsets[] = {0, 3, 6}, lengths[] = {3, 3, 4};
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(parts[s].key, 0u);
    EXPECT_EQ(parts[s].server, s);
    EXPECT_EQ(parts[s].offset, offsets[s]);
    EXPECT_EQ(parts[s].length, lengths[s]);
  }
  ExpectValidPlacement(parts, sizes, 3, Options(10, 1000));

  // One element under the bound: whole (with enough tensors to fill every
  // server, or it would be sliced to fill them).
  parts = PlaceTensors({9, 8, 7}, 3, Options(10, 1000));
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].length, 9u);
}

TEST(PlacementTest, BigTensorSlicesCountTowardsLoad) {
  // key 0 is sliced 4/4/4 (server loads 4, 4, 4), key 1 (3) then goes to
  // server 0, key 2 (2) to server 1.
  auto parts = PlaceTensors({12, 3, 2}, 3, Options(10, 1000));
  ASSERT_EQ(parts.size(), 5u);
  EXPECT_EQ(parts[3].key, 1u);
  EXPECT_EQ(parts[3].server, 0);
  EXPECT_EQ(parts[4].key, 2u);
  EXPECT_EQ(parts[4].server, 1);
}

TEST(PlacementTest, LongPartsAreChunked) {
  // One server, no slicing: 10 elements in chunks of at most 3 -> 4 chunks
  // of near-equal size at offsets 0, 2, 5, 7.
  auto parts = PlaceTensors({10}, 1, Options(1000, 3));
  ASSERT_EQ(parts.size(), 4u);
  const uint64_t offsets[] = {0, 2, 5, 7}, lengths[] = {2, 3, 2, 3};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].offset, offsets[i]) << i;
    EXPECT_EQ(parts[i].length, lengths[i]) << i;
    EXPECT_EQ(parts[i].server, 0);
  }

  // Slices are chunked too: 20 elements over 2 servers, chunks of at most 4.
  const std::vector<uint64_t> sizes = {20};
  auto sliced = PlaceTensors(sizes, 2, Options(8, 4));
  ExpectValidPlacement(sliced, sizes, 2, Options(8, 4));
  ASSERT_EQ(sliced.size(), 6u);  // 10 -> 3 chunks per server
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sliced[i].server, 0);
  for (size_t i = 3; i < 6; ++i) EXPECT_EQ(sliced[i].server, 1);
  EXPECT_EQ(sliced[3].offset, 10u);

  // A part exactly max_part long is not cut.
  auto exact = PlaceTensors({4}, 1, Options(1000, 4));
  ASSERT_EQ(exact.size(), 1u);
}

TEST(PlacementTest, OneServerTakesEverythingUnsliced) {
  const std::vector<uint64_t> sizes = {5000, 7, 3000};
  auto parts = PlaceTensors(sizes, 1, Options(10, 1 << 20));
  ASSERT_EQ(parts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parts[i].server, 0);
    EXPECT_EQ(parts[i].offset, 0u);
    EXPECT_EQ(parts[i].length, sizes[i]);
  }
}

TEST(PlacementTest, TensorSmallerThanServerCountStaysWhole) {
  // Over the bound but only 2 elements for 3 servers: no empty slices.
  auto parts = PlaceTensors({2, 1}, 3, Options(1, 1000));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].length, 2u);
  EXPECT_EQ(parts[0].server, 0);
  EXPECT_EQ(parts[1].length, 1u);
  EXPECT_EQ(parts[1].server, 1);
  // Exactly num_servers elements: one per server.
  auto even = PlaceTensors({3}, 3, Options(1, 1000));
  ASSERT_EQ(even.size(), 3u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(even[s].length, 1u);
}

// A server without a part holds nothing to checkpoint, and a recovery goes
// back to a step every server holds: a job with one (a small model on
// several servers) could not recover from a lost shard. Where the rules
// would leave one empty, the biggest tensors placed whole are sliced too.
TEST(PlacementTest, EveryServerHoldsAPartWhereTheTensorsAllowIt) {
  // A weight and its bias (a softmax regression): both on server 0 before.
  const PlacementOptions defaults;
  auto parts = PlaceTensors({7840, 10}, 2, defaults);
  ExpectValidPlacement(parts, {7840, 10}, 2, defaults);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].server, 0);  // the weight sliced, slice i on server i
  EXPECT_EQ(parts[0].length, 3920u);
  EXPECT_EQ(parts[1].server, 1);
  EXPECT_EQ(parts[2].server, 0);  // the bias by load (a tie: the lowest rank)

  // The biggest whole tensors are sliced first, and only as many as it takes.
  const std::vector<uint64_t> sizes = {100, 4, 60, 3, 8};
  parts = PlaceTensors(sizes, 4, Options(1000, 1000, 50));
  ExpectValidPlacement(parts, sizes, 4, Options(1000, 1000, 50));
  std::map<uint32_t, std::set<int>> servers_of;
  std::set<int> used;
  for (const Part& p : parts) servers_of[p.key].insert(p.server), used.insert(p.server);
  EXPECT_EQ(used.size(), 4u);
  EXPECT_EQ(servers_of[0].size(), 4u);
  for (uint32_t key = 1; key < sizes.size(); ++key) EXPECT_EQ(servers_of[key].size(), 1u) << key;

  // Where no tensor has as many elements as there are servers, one stays
  // empty: nothing can be sliced.
  used.clear();
  for (const Part& p : PlaceTensors({2, 1}, 3, Options(1000, 1000))) used.insert(p.server);
  EXPECT_EQ(used.size(), 2u);
}

TEST(PlacementTest, EmptyTensorsHaveNoParts) {
  auto parts = PlaceTensors({0, 4, 0}, 1, Options(1000, 1000));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].key, 1u);
  EXPECT_EQ(parts[0].server, 0);
  parts = PlaceTensors({0, 4, 0}, 2, Options(1000, 1000));
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].key, 1u);
  EXPECT_EQ(parts[1].key, 1u);
  EXPECT_TRUE(PlaceTensors({}, 2, Options(1000, 1000)).empty());
}

TEST(PlacementTest, PureFunctionAndValidForManyShapes) {
  const std::vector<std::vector<uint64_t>> shapes = {{1},
                                                     {7, 1, 1, 1},
                                                     {1000, 3, 2048, 17, 999, 1001},
                                                     {12345, 1, 6789, 2, 3, 100000},
                                                     {64, 64, 64, 64, 64},
                                                     {1 << 16, 10, 1 << 15}};
  for (const auto& sizes : shapes) {
    for (int servers = 1; servers <= 5; ++servers) {
      for (auto options :
           {Options(1000, 256), Options(1, 1), Options(1 << 20, 1 << 19), Options(500, 300)}) {
        auto a = PlaceTensors(sizes, servers, options);
        auto b = PlaceTensors(sizes, servers, options);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(Same(a[i], b[i])) << "part " << i;
        SCOPED_TRACE(::testing::Message()
                     << servers << " servers, bound " << options.big_array_bound << ", max part "
                     << options.max_part_elems);
        ExpectValidPlacement(a, sizes, servers, options);
        // A tensor is whole on one server or sliced over every one; the big
        // ones are sliced; and no server is empty while a tensor placed whole
        // could have been sliced.
        std::set<int> used;
        bool could_slice = false;
        for (uint32_t key = 0; key < sizes.size(); ++key) {
          std::set<int> on;
          for (const Part& p : a)
            if (p.key == key) on.insert(p.server), used.insert(p.server);
          if (sizes[key] == 0) continue;
          const bool sliceable = servers > 1 && sizes[key] >= static_cast<uint64_t>(servers);
          if (sliceable && sizes[key] >= options.big_array_bound) {
            EXPECT_EQ(on.size(), static_cast<size_t>(servers)) << "key " << key;
          } else {
            EXPECT_TRUE(on.size() == 1u || on.size() == static_cast<size_t>(servers)) << key;
          }
          could_slice = could_slice || (sliceable && on.size() == 1u);
        }
        if (could_slice) EXPECT_EQ(used.size(), static_cast<size_t>(servers));
      }
    }
  }
}

}  // namespace
}  // namespace kubeps
