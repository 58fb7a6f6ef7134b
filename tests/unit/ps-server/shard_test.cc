// One parameter-server shard (ps-server/shard.h), driven with protobuf
// messages through the service's wire codec (ps_service.h: a Push cut into
// gRPC slices of a few bytes and read in place, a Pull's answer parsed back
// by protobuf, so the hand-made wire format is checked against protobuf's
// on every call): sync aggregation (mean of M gradients, applied once,
// independent of arrival order), exactly-once pushes, step checks, async
// mode, long-polling pulls, first-value-wins Init, and the errors for
// malformed requests. SGD with learning rate 1 keeps the arithmetic plain:
// new value = old value - mean gradient.
#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ps-server/ps_service.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using shard_testing::Bytes;
using ::testing::HasSubstr;

struct Ref {
  uint32_t key;
  uint64_t offset;
  uint64_t length;
};

std::unique_ptr<Shard> MakeShard(bool sync, int num_workers) {
  return shard_testing::MakeShard(shard_testing::PlainShardOptions(sync, num_workers));
}

template <typename Message>
void SetParts(Message* m, const std::vector<Ref>& refs) {
  for (const Ref& r : refs) {
    v1::PartRef* p = m->add_parts();
    p->set_key(r.key);
    p->set_offset(r.offset);
    p->set_length(r.length);
  }
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

grpc::Status Init(Shard& shard, const std::vector<Ref>& refs, const std::vector<float>& values,
                  uint32_t* already = nullptr) {
  v1::InitRequest request;
  request.mutable_id()->set_node_id("worker-0");
  SetParts(&request, refs);
  request.set_data(Bytes(values));
  v1::InitResponse response;
  grpc::Status s = shard.Init(request, &response);
  if (already) *already = response.already_initialized();
  return s;
}

v1::PushRequest PushRequest(int rank, uint64_t seq, uint64_t step, const std::vector<Ref>& refs,
                            const std::vector<float>& grad, uint64_t incarnation = 1) {
  v1::PushRequest request;
  request.mutable_id()->set_node_id("worker-" + std::to_string(rank));
  request.mutable_id()->set_incarnation(incarnation);
  request.mutable_id()->set_seq(seq);
  request.set_worker_rank(rank);
  request.set_step(step);
  SetParts(&request, refs);
  request.set_data(Bytes(grad));
  return request;
}

// The request as gRPC hands it to the service: protobuf's bytes in slices
// of 5 bytes, so that every part's data straddles several of them.
grpc::Status PushThroughWire(Shard& shard, const v1::PushRequest& request) {
  const std::string bytes = request.SerializeAsString();
  std::vector<grpc::Slice> cut;
  for (size_t i = 0; i < bytes.size(); i += 5) {
    cut.emplace_back(bytes.data() + i, std::min<size_t>(5, bytes.size() - i));
  }
  const grpc::ByteBuffer buffer(cut.data(), cut.size());
  v1::PushRequest header;
  std::vector<grpc::Slice> slices;
  std::vector<std::string_view> pieces;
  EXPECT_TRUE(wire::DecodePush(buffer, &header, &slices, &pieces));
  EXPECT_TRUE(header.data().empty()) << "data stays in the slices";
  v1::PushRequest rest = request;
  rest.clear_data();
  EXPECT_EQ(header.SerializeAsString(), rest.SerializeAsString()) << "every other field decoded";
  GradientEncoding encoding;
  if (grpc::Status s = wire::CheckEncoding(header, &encoding); !s.ok()) return s;
  PushData data(pieces, encoding, header.threshold());
  return shard.Push(header, data);
}

// A push of `grad` as `encoding` (spec.compression) sends it.
grpc::Status EncodedPush(Shard& shard, int rank, uint64_t seq, uint64_t step,
                         const std::vector<Ref>& refs, const std::vector<float>& grad,
                         GradientEncoding encoding, float threshold = 0.5f) {
  v1::PushRequest request = PushRequest(rank, seq, step, refs, grad);
  request.set_encoding(static_cast<v1::GradientEncoding>(encoding));
  request.set_threshold(threshold);
  std::string data(EncodedBytes(encoding, grad.size()), '\0');
  std::vector<float> residual(grad.size(), 0.0f);
  EncodeGradient(encoding, grad.data(), grad.size(), threshold, residual.data(), data.data());
  request.set_data(data);
  return PushThroughWire(shard, request);
}

grpc::Status Push(Shard& shard, int rank, uint64_t seq, uint64_t step, const std::vector<Ref>& refs,
                  const std::vector<float>& grad, uint64_t incarnation = 1) {
  return PushThroughWire(shard, PushRequest(rank, seq, step, refs, grad, incarnation));
}

v1::PullResponse Pull(Shard& shard, const std::vector<Ref>& refs, uint64_t min_version,
                      uint32_t wait_ms, grpc::Status* status = nullptr) {
  v1::PullRequest request;
  SetParts(&request, refs);
  request.set_min_version(min_version);
  request.set_wait_ms(wait_ms);
  PullAnswer answer;
  grpc::Status s = shard.Pull(request, &answer);
  if (status)
    *status = s;
  else
    EXPECT_TRUE(s.ok()) << s.error_message();
  v1::PullResponse response;
  if (!s.ok()) return response;
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(wire::EncodePull(std::move(answer)).Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_TRUE(response.ParseFromString(bytes)) << "the answer is a PullResponse";
  return response;
}

const std::vector<Ref> kPart = {{0, 0, 3}};

TEST(ShardTest, SyncWaitsForAllWorkersThenAppliesMeanOnce) {
  auto shard = MakeShard(true, 3);
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);

  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {3, 0, 3}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}))
      << "applied before all 3 arrived";
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
  ASSERT_TRUE(Push(*shard, 1, 0, 0, kPart, {0, 3, 3}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
  ASSERT_TRUE(Push(*shard, 2, 0, 0, kPart, {0, 0, 3}).ok());
  // mean = {1, 1, 3}; a sum (not a mean) would give {-2, -4, -6}.
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);

  // Step 1 gathers afresh: nothing of step 0 is carried over.
  ASSERT_TRUE(Push(*shard, 2, 1, 1, kPart, {3, 3, 3}).ok());
  ASSERT_TRUE(Push(*shard, 0, 1, 1, kPart, {0, 0, 0}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  ASSERT_TRUE(Push(*shard, 1, 1, 1, kPart, {0, 0, 0}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-1, 0, -1}));
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);

  auto pulled = Pull(*shard, kPart, 2, 0);
  EXPECT_TRUE(pulled.ready());
  EXPECT_EQ(pulled.version(), 2u);
  EXPECT_EQ(Floats(pulled.data()), (std::vector<float>{-1, 0, -1}));
}

TEST(ShardTest, CompressedPushesAreDecodedAndAveragedInFloat32) {
  auto shard = MakeShard(true, 3);
  const std::vector<Ref> part = {{0, 0, 20}};
  ASSERT_TRUE(Init(*shard, part, std::vector<float>(20, 1.0f)).ok());
  std::vector<float> g0(20), g1(20), g2(20);
  for (int i = 0; i < 20; ++i) {
    g0[i] = 0.1f * i - 0.7f;
    g1[i] = 1.0f / (i + 3);
    g2[i] = i % 3 == 0 ? 0.9f : -0.2f;
  }
  // Each worker may send as it likes: the encoding is per request.
  ASSERT_TRUE(EncodedPush(*shard, 0, 0, 0, part, g0, GradientEncoding::kBFloat16).ok());
  ASSERT_TRUE(EncodedPush(*shard, 1, 0, 0, part, g1, GradientEncoding::kFloat16).ok());
  ASSERT_TRUE(EncodedPush(*shard, 2, 0, 0, part, g2, GradientEncoding::kTwoBit, 0.5f).ok());
  std::vector<float> expected(20);
  for (int i = 0; i < 20; ++i) {
    const float two_bit = g2[i] >= 0.5f ? 0.5f : 0.0f;  // -0.2 stays in the worker's residual
    float mean = BFloat16ToFloat(FloatToBFloat16(g0[i]));
    mean += HalfToFloat(FloatToHalf(g1[i]));
    mean += two_bit;
    mean *= 1.0f / 3;
    expected[i] = 1.0f - mean;
  }
  EXPECT_EQ(shard->PartValue(0, 0), expected);
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
}

TEST(ShardTest, ACompressedPushOfTheWrongSizeOrEncodingIsRefusedAndSaysWhy) {
  auto shard = MakeShard(true, 1);
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());
  v1::PushRequest request = PushRequest(0, 0, 0, kPart, {1, 1, 1});  // float32 bytes
  request.set_encoding(v1::BFLOAT16);
  grpc::Status s = PushThroughWire(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data holds 12 bytes, parts need 6 as bf16"));
  request.set_encoding(v1::TWO_BIT);
  request.set_threshold(0);
  s = PushThroughWire(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("a TWO_BIT push needs a threshold above 0"));
  request.set_encoding(static_cast<v1::GradientEncoding>(9));
  s = PushThroughWire(*shard, request);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("push encoding 9 is not one this server knows"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3})) << "nothing applied";
}

TEST(ShardTest, SyncResultIsBitIdenticalWhateverThePushOrder) {
  // Float addition is not associative with these: summed in rank order
  // (g0 + g1) + g2 and in arrival order 2, 1, 0 the results differ.
  const std::vector<std::vector<float>> grads = {
      {1.0f, 1e8f, 3.0f, 0.1f},
      {1e8f, 1.0f, -1e8f, 0.2f},
      {-1e8f, -1e8f, 1e8f, 0.3f},
  };
  const std::vector<Ref> part = {{4, 0, 4}};
  const std::vector<float> w0 = {0.5f, 0.25f, 0.0f, 1.0f};
  // Sanity: the orders really disagree on the raw sums.
  float rank_order = (grads[0][0] + grads[1][0]) + grads[2][0];
  float reverse_order = (grads[2][0] + grads[1][0]) + grads[0][0];
  ASSERT_NE(rank_order, reverse_order);

  auto forward = MakeShard(true, 3);
  auto backward = MakeShard(true, 3);
  ASSERT_TRUE(Init(*forward, part, w0).ok());
  ASSERT_TRUE(Init(*backward, part, w0).ok());
  for (int r : {0, 1, 2}) ASSERT_TRUE(Push(*forward, r, 0, 0, part, grads[r]).ok());
  for (int r : {2, 1, 0}) ASSERT_TRUE(Push(*backward, r, 0, 0, part, grads[r]).ok());
  std::vector<float> a = forward->PartValue(4, 0);
  std::vector<float> b = backward->PartValue(4, 0);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * sizeof(float)), 0);

  // And the value is the rank-order mean: w - ((g0 + g1) + g2) * (1/3).
  for (size_t i = 0; i < 4; ++i) {
    float sum = (grads[0][i] + grads[1][i]) + grads[2][i];
    float expected = w0[i] - 1.0f * (sum * (1.0f / 3.0f));
    EXPECT_EQ(a[i], expected) << "element " << i;
  }
}

TEST(ShardTest, ResentPushIsNotAppliedTwice) {
  // Async: without the dedup table a resend would be applied again.
  auto shard = MakeShard(false, 1);
  ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
  auto request = PushRequest(0, 0, 0, kPart, {1, 2, 3});
  ASSERT_TRUE(PushThroughWire(*shard, request).ok());
  ASSERT_TRUE(PushThroughWire(*shard, request).ok()) << "a resend is answered OK";
  ASSERT_TRUE(PushThroughWire(*shard, request).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{9, 8, 7}));
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);

  // Sync: a resend of rank 0's push does not count as a second arrival.
  auto sync = MakeShard(true, 2);
  ASSERT_TRUE(Init(*sync, kPart, {10, 10, 10}).ok());
  auto first = PushRequest(0, 0, 0, kPart, {2, 2, 2});
  ASSERT_TRUE(PushThroughWire(*sync, first).ok());
  ASSERT_TRUE(PushThroughWire(*sync, first).ok());
  EXPECT_EQ(sync->PartVersion(0, 0), 0u) << "a duplicate completed the step";
  ASSERT_TRUE(Push(*sync, 1, 0, 0, kPart, {4, 4, 4}).ok());
  EXPECT_EQ(sync->PartValue(0, 0), (std::vector<float>{7, 7, 7}));
  ASSERT_TRUE(PushThroughWire(*sync, first).ok()) << "late resend after the step";
  EXPECT_EQ(sync->PartValue(0, 0), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(sync->PartVersion(0, 0), 1u);
}

TEST(ShardTest, SecondPushFromSameWorkerForSameStepIsIgnored) {
  auto shard = MakeShard(true, 2);
  ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {2, 2, 2}).ok());
  // A restarted rank 0 redoing step 0 sends a new request (new seq).
  ASSERT_TRUE(Push(*shard, 0, 1, 0, kPart, {100, 100, 100}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 0u) << "rank 0's second push completed the step";
  ASSERT_TRUE(Push(*shard, 1, 0, 0, kPart, {4, 4, 4}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{7, 7, 7}));
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
}

TEST(ShardTest, PushForFutureStepIsFailedPrecondition) {
  auto shard = MakeShard(true, 1);
  ASSERT_TRUE(Init(*shard, kPart, {1, 1, 1}).ok());
  grpc::Status s = Push(*shard, 0, 0, 1, kPart, {1, 1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("key 0"));
  EXPECT_THAT(s.error_message(), HasSubstr("at step 0"));
  EXPECT_THAT(s.error_message(), HasSubstr("push is for step 1"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 1, 1}));
  // The rejected request was not recorded: the same id for the right step applies.
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{0, 0, 0}));
}

TEST(ShardTest, StalePushForAppliedStepIsIgnored) {
  auto shard = MakeShard(true, 1);
  ASSERT_TRUE(Init(*shard, kPart, {1, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}).ok());
  ASSERT_TRUE(Push(*shard, 0, 1, 1, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-1, -1, -1}));
  // A new request for step 0: OK, but changes nothing.
  ASSERT_TRUE(Push(*shard, 0, 2, 0, kPart, {5, 5, 5}).ok());
  EXPECT_EQ(shard->PartVersion(0, 0), 2u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-1, -1, -1}));
  // And it did not sit in a slot to pollute step 2.
  ASSERT_TRUE(Push(*shard, 0, 3, 2, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{-2, -2, -2}));
}

// A worker killed between its pushes to two parts (on two shards, or in two
// requests to one) leaves one part a step ahead. Its replacement replays up
// to the part that waits for it and must compute that step's gradient from
// the parameters of that step: the pull for version v answers every part as
// it was at v, even the part that has moved on to v + 1.
TEST(ShardTest, SyncPullOfAVersionAnswersPartsThatMovedOnAsTheyWereThen) {
  const std::vector<Ref> both = {{0, 0, 1}, {1, 0, 1}};
  const std::vector<Ref> first = {{0, 0, 1}};
  auto shard = MakeShard(true, 2);
  ASSERT_TRUE(Init(*shard, both, {10, 20}).ok());
  // Worker 0 reaches only the first part before it dies; worker 1 pushes both.
  ASSERT_TRUE(Push(*shard, 0, 0, 0, first, {2}).ok());
  ASSERT_TRUE(Push(*shard, 1, 0, 0, both, {4, 6}).ok());
  ASSERT_EQ(shard->PartVersion(0, 0), 1u);
  ASSERT_EQ(shard->PartVersion(1, 0), 0u);

  auto pulled = Pull(*shard, both, 0, 0);
  ASSERT_TRUE(pulled.ready());
  EXPECT_EQ(pulled.version(), 0u);
  EXPECT_EQ(Floats(pulled.data()), (std::vector<float>{10, 20}))
      << "the first part was answered as it is now, a step ahead of the second";

  // The replacement (registered with the scheduler, which the shard heard
  // in a heartbeat) pushes step 0 again: the first part keeps what it has,
  // the second completes, and both end as if nobody had died.
  shard->SetCurrentIncarnations({{"worker-0", 2}});
  ASSERT_TRUE(PushThroughWire(*shard, PushRequest(0, 0, 0, both, {2, 8}, /*incarnation=*/2)).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{10 - 3}));
  EXPECT_EQ(shard->PartValue(1, 0), (std::vector<float>{20 - 7}));
  auto after = Pull(*shard, both, 1, 0);
  EXPECT_EQ(after.version(), 1u);
  EXPECT_EQ(Floats(after.data()), (std::vector<float>{7, 13}));
}

// A worker restarted on a node whose clock is behind the old one's draws a
// smaller incarnation; before, the shard took its pushes for late
// duplicates of the old life, answered OK without applying them, and a sync
// job hung. Now the scheduler's view decides, and the dead life's late
// pushes get an error instead of a silent OK.
TEST(ShardTest, TheSchedulersViewNotTheNumbersOrderSaysWhichLifeOfAWorkerIsCurrent) {
  auto shard = MakeShard(false, 1);
  ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
  shard->SetCurrentIncarnations({{"worker-0", 900}});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}, /*incarnation=*/900).ok());

  // The restarted worker, with a smaller number, before the shard has heard
  // of it: not yet known, to be resent.
  grpc::Status early = Push(*shard, 0, 0, 0, kPart, {1, 1, 1}, /*incarnation=*/5);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(early.error_message(), HasSubstr("incarnation 5 of worker-0 is not yet known"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{9, 9, 9}));

  // Once the scheduler's view names it, its pushes are applied.
  shard->SetCurrentIncarnations({{"worker-0", 5}});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}, /*incarnation=*/5).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{8, 8, 8}));

  // A late push of the replaced life is refused, saying why, and changes nothing.
  grpc::Status late = Push(*shard, 0, 7, 0, kPart, {1, 1, 1}, /*incarnation=*/900);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(late.error_message(),
              HasSubstr("push from incarnation 900 of worker-0, which the scheduler has replaced "
                        "by incarnation 5: not applied"));
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{8, 8, 8}));
}

// The scheduler replaced a worker whose push was still on its way, and its
// successor, resuming at that push's step, has not pushed here yet. Before,
// the late push was applied, and the successor's push of the same step
// after it: an async step applied twice.
TEST(ShardTest, ALatePushOfAReplacedLifeIsRefusedBeforeItsSuccessorPushes) {
  auto shard = MakeShard(false, 1);
  ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
  shard->SetCurrentIncarnations({{"worker-0", 900}});
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}, /*incarnation=*/900).ok());
  shard->SetCurrentIncarnations({{"worker-0", 5}});
  grpc::Status late = Push(*shard, 0, 1, 1, kPart, {1, 1, 1}, /*incarnation=*/900);
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{9, 9, 9}));
  ASSERT_TRUE(Push(*shard, 0, 0, 1, kPart, {1, 1, 1}, /*incarnation=*/5).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{8, 8, 8}));
}

TEST(ShardTest, AsyncAppliesEveryPushAtOnce) {
  auto shard = MakeShard(false, 2);
  ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 2, 3}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{9, 8, 7}));
  EXPECT_EQ(shard->PartVersion(0, 0), 1u);
  ASSERT_TRUE(Push(*shard, 1, 0, 0, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{8, 7, 6}));
  // Same worker again, even with a "stale" step: applied in async mode.
  ASSERT_TRUE(Push(*shard, 0, 1, 0, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{7, 6, 5}));
  EXPECT_EQ(shard->PartVersion(0, 0), 3u);
  auto pulled = Pull(*shard, kPart, 0, 0);
  EXPECT_TRUE(pulled.ready());
  EXPECT_EQ(pulled.version(), 3u);
}

// A pull's answer reads the part's values in place until gRPC has sent
// them (wire::EncodePull). Updates that come meanwhile must leave them as
// they were when the pull was answered: the answer is of its version.
std::vector<float> AnswerFloats(PullAnswer answer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(wire::EncodePull(std::move(answer)).Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  v1::PullResponse response;
  EXPECT_TRUE(response.ParseFromString(bytes));
  return Floats(response.data());
}

PullAnswer HeldPull(Shard& shard, const std::vector<Ref>& refs, uint64_t min_version) {
  v1::PullRequest request;
  SetParts(&request, refs);
  request.set_min_version(min_version);
  PullAnswer answer;
  EXPECT_TRUE(shard.Pull(request, &answer).ok());
  EXPECT_TRUE(answer.ready);
  return answer;
}

TEST(ShardTest, AnAnswerNotYetSentKeepsItsValuesThroughLaterUpdates) {
  for (bool sync : {true, false}) {
    SCOPED_TRACE(sync ? "sync" : "async");
    auto shard = MakeShard(sync, 1);
    ASSERT_TRUE(Init(*shard, kPart, {10, 10, 10}).ok());
    PullAnswer at_0 = HeldPull(*shard, kPart, 0);
    ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 2, 3}).ok());
    PullAnswer at_1 = HeldPull(*shard, kPart, 1);
    // Sync updates write to the buffer of the version before, async ones in
    // place: with both answers held, neither may be written.
    for (uint64_t step = 1; step < 4; ++step) {
      ASSERT_TRUE(Push(*shard, 0, step, step, kPart, {1, 1, 1}).ok());
    }
    EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{6, 5, 4}));
    EXPECT_EQ(AnswerFloats(std::move(at_0)), (std::vector<float>{10, 10, 10}));
    EXPECT_EQ(AnswerFloats(std::move(at_1)), (std::vector<float>{9, 8, 7}));
    // Once let go, the buffers are written again: the values stay right.
    for (uint64_t step = 4; step < 6; ++step) {
      ASSERT_TRUE(Push(*shard, 0, step, step, kPart, {1, 1, 1}).ok());
    }
    EXPECT_EQ(AnswerFloats(HeldPull(*shard, kPart, 6)), (std::vector<float>{4, 3, 2}));
  }
}

TEST(ShardTest, MultiPartPushSplitsDataInOrder) {
  auto shard = MakeShard(true, 1);
  const std::vector<Ref> parts = {{0, 0, 2}, {0, 2, 1}, {3, 0, 2}};
  ASSERT_TRUE(Init(*shard, parts, {1, 2, 3, 4, 5}).ok());
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2}));
  EXPECT_EQ(shard->PartValue(0, 2), (std::vector<float>{3}));
  EXPECT_EQ(shard->PartValue(3, 0), (std::vector<float>{4, 5}));
  ASSERT_TRUE(Push(*shard, 0, 0, 0, parts, {1, 1, 2, 3, 4}).ok());
  auto pulled = Pull(*shard, {{3, 0, 2}, {0, 0, 2}}, 1, 0);
  ASSERT_TRUE(pulled.ready());
  EXPECT_EQ(Floats(pulled.data()), (std::vector<float>{1, 1, 0, 1}));
  EXPECT_EQ(shard->PartValue(0, 2), (std::vector<float>{1}));
}

TEST(ShardTest, PullBeforeVersionIsReadyFalseAfterWaitMs) {
  auto shard = MakeShard(true, 2);
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());
  auto start = std::chrono::steady_clock::now();
  auto pulled = Pull(*shard, kPart, 1, 60);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(pulled.ready());
  EXPECT_TRUE(pulled.data().empty());
  EXPECT_GE(waited, 55ms);
  EXPECT_LT(waited, 2s);
  // Version 0 is there at once.
  auto now = Pull(*shard, kPart, 0, 0);
  EXPECT_TRUE(now.ready());
  EXPECT_EQ(Floats(now.data()), (std::vector<float>{1, 2, 3}));
}

TEST(ShardTest, WaitingPullIsReleasedByLastPush) {
  auto shard = MakeShard(true, 2);
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());
  auto pull = std::async(std::launch::async, [&] { return Pull(*shard, kPart, 1, 10000); });
  ASSERT_TRUE(Push(*shard, 0, 0, 0, kPart, {1, 1, 1}).ok());
  EXPECT_EQ(pull.wait_for(50ms), std::future_status::timeout)
      << "released before the step completed";
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Push(*shard, 1, 0, 0, kPart, {3, 3, 3}).ok());
  ASSERT_EQ(pull.wait_for(5s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  auto pulled = pull.get();
  EXPECT_TRUE(pulled.ready());
  EXPECT_EQ(pulled.version(), 1u);
  EXPECT_EQ(Floats(pulled.data()), (std::vector<float>{-1, 0, 1}));
}

TEST(ShardTest, PullWaitingForUninitialisedPartIsReleasedByInit) {
  auto shard = MakeShard(true, 1);
  auto pull = std::async(std::launch::async, [&] { return Pull(*shard, kPart, 0, 10000); });
  EXPECT_EQ(pull.wait_for(30ms), std::future_status::timeout);
  ASSERT_TRUE(Init(*shard, kPart, {4, 5, 6}).ok());
  ASSERT_EQ(pull.wait_for(5s), std::future_status::ready);
  auto pulled = pull.get();
  EXPECT_TRUE(pulled.ready());
  EXPECT_EQ(Floats(pulled.data()), (std::vector<float>{4, 5, 6}));
}

TEST(ShardTest, InitTwiceKeepsFirstValue) {
  auto shard = MakeShard(true, 1);
  uint32_t already = 99;
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}, &already).ok());
  EXPECT_EQ(already, 0u);
  ASSERT_TRUE(Init(*shard, kPart, {7, 8, 9}, &already).ok());
  EXPECT_EQ(already, 1u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  // One old part and one new one: only the old one is counted and kept.
  ASSERT_TRUE(Init(*shard, {{0, 0, 3}, {1, 0, 2}}, {7, 8, 9, 5, 6}, &already).ok());
  EXPECT_EQ(already, 1u);
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard->PartValue(1, 0), (std::vector<float>{5, 6}));
}

TEST(ShardTest, MalformedPushIsInvalidArgumentNamingThePart) {
  auto shard = MakeShard(true, 2);
  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());

  grpc::Status s = Push(*shard, 0, 0, 0, {{7, 0, 3}}, {1, 1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("key 7"));
  EXPECT_THAT(s.error_message(), HasSubstr("not stored on this server"));

  s = Push(*shard, 0, 1, 0, {{0, 5, 3}}, {1, 1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("offset 5"));

  s = Push(*shard, 0, 2, 0, {{0, 0, 2}}, {1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("length 2"));
  EXPECT_THAT(s.error_message(), HasSubstr("stores 3 elements"));

  s = Push(*shard, 0, 3, 0, kPart, {1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data holds 8 bytes, parts need 12"));

  s = Push(*shard, 2, 4, 0, kPart, {1, 1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("worker_rank 2 outside [0, 2)"));
  s = Push(*shard, -1, 5, 0, kPart, {1, 1, 1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("worker_rank -1"));

  s = Push(*shard, 0, 6, 0, {}, {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("no parts"));

  s = Push(*shard, 0, 7, 0, {{0, 0, 0}}, {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("bad length"));

  // None of them changed anything or completed a step; the rejected ids
  // were not recorded as applied.
  EXPECT_EQ(shard->PartValue(0, 0), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(shard->PartVersion(0, 0), 0u);
  EXPECT_EQ(shard->dedup().TrackedRequests(), 0u);
}

TEST(ShardTest, MalformedInitAndPullAreInvalidArgument) {
  auto shard = MakeShard(true, 1);
  grpc::Status s = Init(*shard, kPart, {1, 2});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("data holds 8 bytes, parts need 12"));
  EXPECT_TRUE(shard->PartValue(0, 0).empty()) << "a rejected Init stored something";

  s = Init(*shard, {}, {});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("no parts"));

  ASSERT_TRUE(Init(*shard, kPart, {1, 2, 3}).ok());
  Pull(*shard, {}, 0, 0, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("no parts"));

  Pull(*shard, {{0, 0, 2}}, 0, 0, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("key 0"));
  EXPECT_THAT(s.error_message(), HasSubstr("stores 3 elements"));
}

TEST(ShardWireTest, AMalformedPushIsRefused) {
  const std::vector<std::string> malformed = {
      {'\x2a', '\x10', 'a', 'b', 'c'},  // data (field 5) of 16 bytes, 3 there
      {'\xff'},                         // a tag cut off
      {'\x22', '\x03', '\x08'},         // parts (field 4) of 3 bytes, 1 there
  };
  for (const std::string& bytes : malformed) {
    grpc::Slice slice(bytes.data(), bytes.size());
    v1::PushRequest header;
    std::vector<grpc::Slice> slices;
    std::vector<std::string_view> pieces;
    EXPECT_FALSE(wire::DecodePush(grpc::ByteBuffer(&slice, 1), &header, &slices, &pieces));
  }
}

TEST(ShardWireTest, ANotReadyPullAnswersNoData) {
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(wire::EncodePull(PullAnswer{}).Dump(&slices).ok());
  size_t bytes = 0;
  for (const grpc::Slice& slice : slices) bytes += slice.size();
  EXPECT_EQ(bytes, 0u) << "every field at its default, as protobuf leaves them out";
}

}  // namespace
}  // namespace kubeps
