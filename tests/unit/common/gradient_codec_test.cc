// The gradient encodings of spec.compression (common/gradient_codec.h):
// fp16 rounds as the hardware does, bf16 keeps float32's range, and 2-bit
// loses nothing over the steps: what was not sent stays in the residual.
#include "common/gradient_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace kubeps {
namespace {

uint16_t Bits16(_Float16 h) {
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

TEST(GradientCodecTest, EveryHalfSurvivesTheRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(GradientCodecTest, FloatToHalfRoundsAsTheCompilersFloat16Does) {
  std::mt19937 rng(3);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e-8f,
                               3e-8f,
                               5.96e-8f,
                               6.1e-5f,
                               1.0f / 3,
                               std::numeric_limits<float>::infinity()};
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = any_bits(rng);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (!std::isnan(f)) values.push_back(f);
  }
  for (int e = -26; e < 17; ++e) values.push_back(std::ldexp(1.0f + 1.0f / 2048, e));  // ties
  for (float f : values) ASSERT_EQ(FloatToHalf(f), Bits16(static_cast<_Float16>(f))) << f;
}

TEST(GradientCodecTest, BFloat16KeepsTheRangeAndRoundsToNearestEven) {
  EXPECT_TRUE(std::isfinite(BFloat16ToFloat(FloatToBFloat16(1e38f))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-8 goes up.
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (float f : {0.1f, -2.5f, 123456.0f, 1e-20f}) {
    EXPECT_NEAR(BFloat16ToFloat(FloatToBFloat16(f)), f, std::fabs(f) / 256) << f;
  }
}

TEST(GradientCodecTest, SixteenBitEncodingsHalveTheBytesAndDecodeToTheRoundedValues) {
  const std::vector<float> g = {0.5f, -1.25f, 3e-3f, 100.0f, -7e-6f};
  for (GradientEncoding e : {GradientEncoding::kFloat16, GradientEncoding::kBFloat16}) {
    ASSERT_EQ(EncodedBytes(e, g.size()), 10u);
    std::vector<char> wire(10);
    EncodeGradient(e, g.data(), g.size(), 0, nullptr, wire.data());
    std::vector<float> out(g.size());
    DecodeGradient(e, wire.data(), g.size(), 0, out.data());
    for (size_t i = 0; i < g.size(); ++i) {
      const float expected = e == GradientEncoding::kFloat16
                                 ? HalfToFloat(FloatToHalf(g[i]))
                                 : BFloat16ToFloat(FloatToBFloat16(g[i]));
      EXPECT_EQ(out[i], expected) << GradientEncodingName(e) << " " << g[i];
    }
  }
}

TEST(GradientCodecTest, TwoBitSendsThresholdsAndKeepsTheRestForLaterSteps) {
  const float t = 0.5f;
  ASSERT_EQ(EncodedBytes(GradientEncoding::kTwoBit, 16), 4u);
  ASSERT_EQ(EncodedBytes(GradientEncoding::kTwoBit, 17), 8u);
  const size_t n = 37;  // not a whole number of 16-value words
  std::mt19937 rng(5);
  std::normal_distribution<float> gradient(0.0f, 0.3f);
  std::vector<float> residual(n, 0.0f), sent_total(n, 0.0f), pushed_total(n, 0.0f);
  std::vector<char> wire(EncodedBytes(GradientEncoding::kTwoBit, n));
  std::vector<float> decoded(n);
  for (int step = 0; step < 50; ++step) {
    std::vector<float> g(n);
    for (float& x : g) x = gradient(rng);
    EncodeGradient(GradientEncoding::kTwoBit, g.data(), n, t, residual.data(), wire.data());
    DecodeGradient(GradientEncoding::kTwoBit, wire.data(), n, t, decoded.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(decoded[i] == 0.0f || decoded[i] == t || decoded[i] == -t) << decoded[i];
      ASSERT_LT(std::fabs(residual[i]), t + 1.5f) << "error feedback keeps the residual bounded";
      sent_total[i] += decoded[i];
      pushed_total[i] += g[i];
    }
  }
  // Nothing is lost: what was sent plus what is left is what was pushed.
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(sent_total[i] + residual[i], pushed_total[i], 1e-4);
}

TEST(GradientCodecTest, NonFiniteValuesStayNonFiniteAndLeaveTheResidualAlone) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> g = {0.7f, std::nanf(""), inf, -inf, -0.7f};
  for (GradientEncoding e :
       {GradientEncoding::kFloat16, GradientEncoding::kBFloat16, GradientEncoding::kTwoBit}) {
    std::vector<float> residual = {0.0f, 0.25f, 0.25f, 0.25f, 0.0f}, out(g.size());
    std::vector<char> wire(EncodedBytes(e, g.size()));
    EncodeGradient(e, g.data(), g.size(), 0.5f, residual.data(), wire.data());
    DecodeGradient(e, wire.data(), g.size(), 0.5f, out.data());
    const char* name = GradientEncodingName(e);
    EXPECT_TRUE(std::isfinite(out[0])) << name;
    EXPECT_TRUE(std::isnan(out[1])) << name;
    EXPECT_FALSE(std::isfinite(out[2])) << name;
    EXPECT_FALSE(std::isfinite(out[3])) << name;
    if (e == GradientEncoding::kTwoBit) {
      EXPECT_EQ(out[0], 0.5f);
      EXPECT_EQ(out[4], -0.5f);
      EXPECT_EQ(residual, (std::vector<float>{0.7f - 0.5f, 0.25f, 0.25f, 0.25f, -0.7f + 0.5f}));
    }
  }
  // bf16 keeps float32's range up to its top; fp16 overflows past 65504.
  EXPECT_TRUE(std::isfinite(BFloat16ToFloat(FloatToBFloat16(3e38f))));
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(70000.0f))));
}

TEST(GradientCodecTest, NamesAreThoseOfTheManifest) {
  for (const char* name : {"none", "fp16", "bf16", "2bit"}) {
    auto e = ParseGradientEncoding(name);
    ASSERT_TRUE(e.has_value()) << name;
    EXPECT_STREQ(GradientEncodingName(*e), name);
  }
  EXPECT_FALSE(ParseGradientEncoding("int8").has_value());
}

}  // namespace
}  // namespace kubeps
