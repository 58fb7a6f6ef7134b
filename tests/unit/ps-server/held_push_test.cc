// A sync step's gradients held where they lie (PushData::Hold): a push whose
// answer waits for its step's update (a PushPull through shared memory) is
// not copied into the shard's slot but read from the worker's memory when
// the step's last push sums it, and that memory is let go once the step is
// updated. Anything else is copied as before.
#include <limits>
#include <memory>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "ps-server/ps_service.h"
#include "ps-server/push_data.h"
#include "ps-server/shard.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using shard_testing::OnePiece;

TEST(PushDataHoldTest, HoldsFloatsWholeInOnePieceOnlyWhereAllowed) {
  const std::vector<float> values = {1, 2, 3, 4};
  PushData data(OnePiece(values));
  bool finite = false;
  EXPECT_EQ(data.Hold(2, &finite), nullptr) << "holding was not allowed";
  data.AllowHolding(std::make_shared<int>(0));
  EXPECT_EQ(data.Hold(2, &finite), values.data()) << "nothing was read by the refusal";
  EXPECT_TRUE(finite);
  EXPECT_EQ(data.Hold(2, &finite), values.data() + 2);
}

TEST(PushDataHoldTest, FloatsCutBetweenPiecesOrCompressedAreNotHeldNorRead) {
  const std::vector<float> values = {1, 2, 3};
  const std::string bytes = shard_testing::Bytes(values);
  PushData cut(shard_testing::CutInto(bytes, 5));
  cut.AllowHolding(std::make_shared<int>(0));
  bool finite = false;
  EXPECT_EQ(cut.Hold(3, &finite), nullptr);
  std::vector<float> copy(3);
  EXPECT_TRUE(cut.Read(copy.data(), 3)) << "the refused Hold consumed the floats";
  EXPECT_EQ(copy, values);

  PushData compressed({bytes}, GradientEncoding::kFloat16);
  compressed.AllowHolding(std::make_shared<int>(0));
  EXPECT_EQ(compressed.Hold(1, &finite), nullptr);
}

TEST(PushDataHoldTest, FindsNaNWhereItLies) {
  const std::vector<float> values = {1, std::numeric_limits<float>::quiet_NaN()};
  PushData data(OnePiece(values));
  data.AllowHolding(std::make_shared<int>(0));
  bool finite = true;
  EXPECT_NE(data.Hold(2, &finite), nullptr);
  EXPECT_FALSE(finite);
}

class HeldPushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shard_ = shard_testing::MakeShard(shard_testing::PlainShardOptions(true, 2));
    shard_testing::InitKeys(*shard_, {0}, 3, [](uint32_t, uint32_t i) { return i + 1.0f; });
  }
  // Worker `rank`'s push of step 0 in one piece, allowed to be held with
  // `keeper` (null: not allowed).
  grpc::Status Push(int rank, const std::vector<float>& grad,
                    const std::shared_ptr<const void>& keeper) {
    v1::PushRequest request = shard_testing::PushOfKeys(rank, 0, 0, {0}, 3);
    PushData data(OnePiece(grad));
    if (keeper) data.AllowHolding(keeper);
    return shard_->Push(request, data);
  }
  std::unique_ptr<Shard> shard_;
  std::shared_ptr<const void> keeper_ = std::make_shared<int>(0);
};

TEST_F(HeldPushTest, AHeldGradientIsReadWhereItLiesUntilItsStepIsUpdated) {
  std::vector<float> first = {2, 2, 2};
  ASSERT_TRUE(Push(0, first, keeper_).ok());
  EXPECT_EQ(keeper_.use_count(), 2) << "the shard keeps the worker's memory while it holds it";
  // A worker leaves its gradient alone until its PushPull is answered; this
  // change, which no worker makes, shows that the shard made no copy.
  first = {4, 4, 4};
  const std::vector<float> second = {0, 2, 4};
  ASSERT_TRUE(Push(1, second, nullptr).ok());
  EXPECT_EQ(shard_->PartVersion(0, 0), 1u);
  // SGD with learning rate 1: w - (g0 + g1) / 2, with g0 as the sum read it.
  EXPECT_EQ(shard_->PartValue(0, 0), (std::vector<float>{-1, -1, -1}));
  EXPECT_EQ(keeper_.use_count(), 1) << "the step is updated: its memory goes back";
}

TEST_F(HeldPushTest, APushNotAllowedToBeHeldIsCopied) {
  std::vector<float> first = {2, 2, 2};
  ASSERT_TRUE(Push(0, first, nullptr).ok());
  first = {4, 4, 4};
  ASSERT_TRUE(Push(1, {0, 2, 4}, nullptr).ok());
  EXPECT_EQ(shard_->PartValue(0, 0), (std::vector<float>{0, 0, 0}));
}

TEST_F(HeldPushTest, AHeldNaNIsRefusedAndNothingOfItStaysHeld) {
  const std::vector<float> bad = {1, std::numeric_limits<float>::infinity(), 1};
  grpc::Status refused = Push(0, bad, keeper_);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(keeper_.use_count(), 1) << "a refused push left its memory held";
  // The corrected push is copied; the step sums it, not the refused one.
  ASSERT_TRUE(Push(0, {2, 2, 2}, nullptr).ok());
  ASSERT_TRUE(Push(1, {0, 2, 4}, keeper_).ok());
  EXPECT_EQ(shard_->PartValue(0, 0), (std::vector<float>{0, 0, 0}));
}

// Which PushPull may be held: its pull must wait for every pushed part to
// pass the push's step, or the worker could have its answer, and write its
// staging region again, before the step's last push reads it.
TEST(AnswerAwaitsTheUpdateTest, OnlyAPullOfEveryPushedPartAtALaterVersion) {
  v1::PushRequest push = shard_testing::PushOfKeys(0, 0, 5, {1, 2}, 3);
  EXPECT_FALSE(wire::AnswerAwaitsTheUpdate(push)) << "no pull";
  v1::PullRequest* pull = push.mutable_then_pull();
  *pull->mutable_parts() = push.parts();
  pull->set_min_version(6);
  EXPECT_TRUE(wire::AnswerAwaitsTheUpdate(push));
  pull->set_min_version(5);
  EXPECT_FALSE(wire::AnswerAwaitsTheUpdate(push)) << "answered with the step's own values";
  pull->set_min_version(6);
  pull->mutable_parts()->RemoveLast();
  EXPECT_FALSE(wire::AnswerAwaitsTheUpdate(push)) << "key 2 is not pulled";
  pull->add_parts()->set_key(2);
  pull->mutable_parts(1)->set_offset(64);
  EXPECT_FALSE(wire::AnswerAwaitsTheUpdate(push)) << "another part of key 2 is pulled";
}

}  // namespace
}  // namespace kubeps
