// PushData::View (ps-server/push_data.h): the step's last push is summed
// from where its floats lie when they lie whole in one piece (a push through
// shared memory), and from a copy where they do not (gRPC's slices cut
// floats apart; compressed pushes decode); either way each float is checked
// for NaN and Inf.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "common/gradient_codec.h"
#include "ps-server/push_data.h"
#include "tests/unit/ps-server/test_shard.h"

namespace kubeps {
namespace {

using shard_testing::OnePiece;

TEST(PushDataViewTest, FloatsWholeInOnePieceAreReadWhereTheyLie) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  PushData data(OnePiece(values));
  float scratch[4] = {};
  bool finite = false;
  EXPECT_EQ(data.View(4, scratch, &finite), values.data());
  EXPECT_TRUE(finite);
  EXPECT_EQ(data.View(2, scratch, &finite), values.data() + 4) << "the next floats, not the first";
  EXPECT_TRUE(finite);
  EXPECT_EQ(scratch[0], 0) << "nothing was copied";
}

TEST(PushDataViewTest, NaNAndInfAreFoundWhereTheyLie) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const std::vector<float> values = {1, 2, bad, 4};
    PushData data(OnePiece(values));
    float scratch[2];
    bool finite = false;
    data.View(2, scratch, &finite);
    EXPECT_TRUE(finite) << "the first two are finite";
    data.View(2, scratch, &finite);
    EXPECT_FALSE(finite) << bad;
  }
}

TEST(PushDataViewTest, FloatsCutBetweenPiecesAreCopiedAndChecked) {
  const std::vector<float> values = {1.5f, -2.5f, 3.5f, std::numeric_limits<float>::quiet_NaN()};
  // Five bytes a piece: every float but the first straddles two.
  const std::string bytes = shard_testing::Bytes(values);
  PushData data(shard_testing::CutInto(bytes, 5));
  float scratch[3] = {};
  bool finite = false;
  const float* got = data.View(3, scratch, &finite);
  EXPECT_EQ(got, scratch);
  EXPECT_TRUE(finite);
  EXPECT_EQ(std::vector<float>(got, got + 3),
            std::vector<float>(values.begin(), values.begin() + 3));
  data.View(1, scratch, &finite);
  EXPECT_FALSE(finite);
}

TEST(PushDataViewTest, ACompressedPushIsDecodedIntoTheScratch) {
  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 65504.0f};
  std::string bytes(EncodedBytes(GradientEncoding::kFloat16, values.size()), '\0');
  EncodeGradient(GradientEncoding::kFloat16, values.data(), values.size(), 0, nullptr,
                 bytes.data());
  PushData data({bytes}, GradientEncoding::kFloat16);
  float scratch[4] = {};
  bool finite = false;
  const float* got = data.View(4, scratch, &finite);
  EXPECT_EQ(got, scratch);
  EXPECT_TRUE(finite);
  EXPECT_EQ(std::vector<float>(got, got + 4), values);
}

}  // namespace
}  // namespace kubeps
