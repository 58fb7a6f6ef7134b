// A sync shard keeps a big part's values where a worker on its host can map
// them (ps-server/value_buffer.h) once a pull asks: the answer names the
// file instead of landing a copy, and the part's two buffers alternate, so
// that the buffer a worker reads version v from is written again only with
// version v + 2. Async shards and small parts keep landing copies.
#include <sys/mman.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/shared_memory.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using shard_testing::Bytes;

constexpr uint32_t kBig = 32768;  // floats: 128 KiB, worth mapping
constexpr uint32_t kSmall = 256;  // 1 KiB: landed

// Landing regions of the test's own, and whether the pull may map.
class TestLanding final : public PullLanding {
 public:
  TestLanding(bool may_map, size_t floats) : may_map_(may_map), region_(floats) {}
  grpc::Status Begin(int, float** region) override {
    *region = region_.data();
    return grpc::Status::OK;
  }
  void Done(int, uint64_t version) override { landed_version_ = version; }
  bool MayMap(int) const override { return may_map_; }
  const std::vector<float>& region() const { return region_; }
  uint64_t landed_version() const { return landed_version_; }

 private:
  const bool may_map_;
  std::vector<float> region_;
  uint64_t landed_version_ = UINT64_MAX;
};

ShardOptions MappingOptions(bool sync) {
  ShardOptions options = shard_testing::PlainShardOptions(sync, 2);
  options.shared_values_owner = "shard-mapped-values-test";
  return options;
}

v1::PullRequest PullOf(uint32_t length, uint64_t min_version) {
  v1::PullRequest request;
  v1::PartRef* part = request.add_parts();
  part->set_key(0);
  part->set_length(length);
  request.set_min_version(min_version);
  return request;
}

PullAnswer Pull(Shard& shard, uint32_t length, uint64_t version, PullLanding* landing) {
  PullAnswer answer;
  EXPECT_TRUE(shard.Pull(PullOf(length, version), &answer, {}, landing).ok());
  EXPECT_TRUE(answer.ready);
  return answer;
}

// Both workers push a gradient of `g` everywhere for `step`: SGD at rate 1
// takes g from every value.
void Step(Shard& shard, uint32_t length, uint64_t step, float g) {
  const std::vector<float> gradient(length, g);
  for (int rank = 0; rank < 2; ++rank) {
    v1::PushRequest request = shard_testing::PushOfKeys(rank, step, step, {0}, length);
    PushData data(shard_testing::OnePiece(gradient));
    ASSERT_TRUE(shard.Push(request, data).ok());
  }
}

// A worker's mapping of the buffer an answer names, as it maps it.
class Mapped {
 public:
  explicit Mapped(const v1::MappedValues& mapped, uint32_t length) : bytes_(length * 4) {
    at_ = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    Status s = MapPrivately(mapped.segment(), mapped.nonce(), mapped.offset(), bytes_, at_);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  ~Mapped() { ::munmap(at_, bytes_); }
  float at(size_t i) const { return static_cast<const float*>(at_)[i]; }

 private:
  size_t bytes_;
  void* at_;
};

TEST(ShardMappedValuesTest, AWorkerReadsVersionVUntilTheServerWritesVersionVPlus2) {
  auto shard = shard_testing::MakeShard(MappingOptions(true));
  shard_testing::InitKeys(*shard, {0}, kBig, [](uint32_t, uint32_t i) { return i % 7; });
  TestLanding landing(true, kBig);

  // The initial values came in a request and lie on the heap: landed.
  PullAnswer v0 = Pull(*shard, kBig, 0, &landing);
  EXPECT_TRUE(v0.landed);
  EXPECT_TRUE(v0.mapped.empty());
  EXPECT_EQ(landing.region()[3], 3.0f);

  // The pull asked to map: the next versions go to shared memory.
  Step(*shard, kBig, 0, 1.0f);
  PullAnswer v1 = Pull(*shard, kBig, 1, &landing);
  ASSERT_EQ(v1.mapped.size(), 1u);
  EXPECT_EQ(v1.mapped[0].part(), 0u);
  EXPECT_EQ(v1.mapped[0].version(), 1u);
  EXPECT_EQ(v1.mapped[0].offset() % PageSize(), 0u);
  Mapped one(v1.mapped[0], kBig);
  EXPECT_EQ(one.at(3), 2.0f);  // 3 - 1

  Step(*shard, kBig, 1, 1.0f);
  PullAnswer v2 = Pull(*shard, kBig, 2, &landing);
  ASSERT_EQ(v2.mapped.size(), 1u);
  EXPECT_NE(v2.mapped[0].segment(), v1.mapped[0].segment());
  Mapped two(v2.mapped[0], kBig);
  EXPECT_EQ(two.at(3), 1.0f);
  EXPECT_EQ(one.at(3), 2.0f) << "version 2 was written over version 1";

  // Version 3 goes to version 1's buffer: a worker's mapping of it shows
  // the new values as the server writes them, and version 2's stays.
  Step(*shard, kBig, 2, 1.0f);
  PullAnswer v3 = Pull(*shard, kBig, 3, &landing);
  ASSERT_EQ(v3.mapped.size(), 1u);
  EXPECT_EQ(v3.mapped[0].segment(), v1.mapped[0].segment());
  EXPECT_EQ(v3.mapped[0].version(), 3u);
  EXPECT_EQ(one.at(3), 0.0f);
  EXPECT_EQ(two.at(3), 1.0f);
  EXPECT_EQ(shard->PartValue(0, 0)[3], 0.0f);
}

TEST(ShardMappedValuesTest, AWorkersWritesToItsMappingNeverReachTheServer) {
  auto shard = shard_testing::MakeShard(MappingOptions(true));
  shard_testing::InitKeys(*shard, {0}, kBig, [](uint32_t, uint32_t) { return 5.0f; });
  TestLanding landing(true, kBig);
  Pull(*shard, kBig, 0, &landing);
  Step(*shard, kBig, 0, 1.0f);
  PullAnswer v1 = Pull(*shard, kBig, 1, &landing);
  ASSERT_EQ(v1.mapped.size(), 1u);
  Mapped mapped(v1.mapped[0], kBig);
  float* written = static_cast<float*>(
      ::mmap(nullptr, kBig * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_TRUE(MapPrivately(v1.mapped[0].segment(), v1.mapped[0].nonce(), v1.mapped[0].offset(),
                           kBig * 4, written)
                  .ok());
  written[0] = 99.0f;
  EXPECT_EQ(shard->PartValue(0, 0)[0], 4.0f);
  EXPECT_EQ(mapped.at(0), 4.0f);
  ::munmap(written, kBig * 4);
}

TEST(ShardMappedValuesTest, APullThatMayNotMapGetsTheValuesLanded) {
  auto shard = shard_testing::MakeShard(MappingOptions(true));
  shard_testing::InitKeys(*shard, {0}, kBig, [](uint32_t, uint32_t i) { return i % 7; });
  TestLanding mapping(true, kBig), copying(false, kBig);
  Pull(*shard, kBig, 0, &mapping);
  Step(*shard, kBig, 0, 1.0f);
  Step(*shard, kBig, 1, 1.0f);
  PullAnswer answer = Pull(*shard, kBig, 2, &copying);
  EXPECT_TRUE(answer.landed);
  EXPECT_TRUE(answer.mapped.empty());
  EXPECT_EQ(copying.landed_version(), 2u);
  EXPECT_EQ(copying.region()[3], 1.0f);
  // Over TCP: the answer holds the values, wherever they lie.
  PullAnswer over_tcp = Pull(*shard, kBig, 2, nullptr);
  ASSERT_EQ(over_tcp.values.size(), 1u);
  EXPECT_EQ(over_tcp.values[0]->Copy(), shard->PartValue(0, 0));
}

TEST(ShardMappedValuesTest, SmallPartsAndAsyncShardsAreLanded) {
  for (const auto& [sync, length] : {std::pair{true, kSmall}, std::pair{false, kBig}}) {
    auto shard = shard_testing::MakeShard(MappingOptions(sync));
    shard_testing::InitKeys(*shard, {0}, length, [](uint32_t, uint32_t) { return 1.0f; });
    TestLanding landing(true, length);
    for (uint64_t step = 0; step < 3; ++step) {
      Pull(*shard, length, sync ? step : 0, &landing);
      Step(*shard, length, step, 0.5f);
    }
    PullAnswer answer = Pull(*shard, length, sync ? 3 : 0, &landing);
    EXPECT_TRUE(answer.landed);
    EXPECT_TRUE(answer.mapped.empty()) << (sync ? "a small part" : "an async shard");
    EXPECT_EQ(landing.region()[0], sync ? -0.5f : -2.0f);
  }
}

}  // namespace
}  // namespace kubeps
