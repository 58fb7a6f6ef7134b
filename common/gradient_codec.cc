#include "common/gradient_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kubeps {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Two-bit codes, 16 to a 32-bit word, the first value in the lowest bits.
// kNonFinite marks a NaN or infinite gradient: it decodes to NaN, so the
// servers' check refuses (or skips) the push as they would a float32 one,
// and the residual is left as it was.
constexpr uint32_t kZero = 0, kPlus = 1, kMinus = 2, kNonFinite = 3;
constexpr size_t kCodesPerWord = 16;

}  // namespace

std::optional<GradientEncoding> ParseGradientEncoding(const std::string& name) {
  if (name == "none") return GradientEncoding::kFloat32;
  if (name == "fp16") return GradientEncoding::kFloat16;
  if (name == "bf16") return GradientEncoding::kBFloat16;
  if (name == "2bit") return GradientEncoding::kTwoBit;
  return std::nullopt;
}

const char* GradientEncodingName(GradientEncoding encoding) {
  switch (encoding) {
    case GradientEncoding::kFloat32:
      return "none";
    case GradientEncoding::kFloat16:
      return "fp16";
    case GradientEncoding::kBFloat16:
      return "bf16";
    case GradientEncoding::kTwoBit:
      return "2bit";
  }
  return "unknown";
}

size_t EncodedBytes(GradientEncoding encoding, size_t n) {
  switch (encoding) {
    case GradientEncoding::kFloat32:
      return n * 4;
    case GradientEncoding::kFloat16:
    case GradientEncoding::kBFloat16:
      return n * 2;
    case GradientEncoding::kTwoBit:
      return (n + kCodesPerWord - 1) / kCodesPerWord * 4;
  }
  return 0;
}

uint16_t FloatToHalf(float value) {
  const uint32_t f = Bits(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  uint32_t half, rest, halfway;
  if (abs >= 0x38800000u) {
    // Normal in fp16: rebias the exponent (127 -> 15), 23 mantissa bits -> 10.
    const uint32_t rebiased = abs - ((127u - 15u) << 23);
    half = rebiased >> 13;
    rest = rebiased & 0x1fffu;
    halfway = 0x1000u;
  } else {
    // An fp16 subnormal, m * 2^-24: under half of 2^-24 it is zero.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 to 24
    half = mantissa >> shift;
    rest = mantissa & ((1u << shift) - 1);
    halfway = 1u << (shift - 1);
  }
  // Round to nearest even; a carry moves into the exponent, as it should.
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return FromBits(sign | 0x7f800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return FromBits(sign | ((exponent + 127u - 15u) << 23) | (mantissa << 13));
  if (mantissa == 0) return FromBits(sign);
  // Subnormal, mantissa * 2^-24: shifted until its leading 1 is the implicit bit.
  uint32_t float_exponent = 127u - 14u;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return FromBits(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t f = Bits(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

float BFloat16ToFloat(uint16_t bf16) { return FromBits(static_cast<uint32_t>(bf16) << 16); }

void EncodeGradient(GradientEncoding encoding, const float* in, size_t n, float threshold,
                    float* residual, char* out) {
  switch (encoding) {
    case GradientEncoding::kFloat32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case GradientEncoding::kFloat16:
    case GradientEncoding::kBFloat16: {
      const bool half = encoding == GradientEncoding::kFloat16;
      for (size_t i = 0; i < n; ++i) {
        const uint16_t v = half ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
      return;
    }
    case GradientEncoding::kTwoBit: {
      for (size_t word = 0; word * kCodesPerWord < n; ++word) {
        uint32_t codes = 0;
        const size_t end = std::min(n, (word + 1) * kCodesPerWord);
        for (size_t i = word * kCodesPerWord; i < end; ++i) {
          if (!std::isfinite(in[i])) {
            codes |= kNonFinite << (2 * (i % kCodesPerWord));
            continue;
          }
          const float v = in[i] + residual[i];
          uint32_t code = kZero;
          float sent = 0.0f;
          if (v >= threshold) {
            code = kPlus;
            sent = threshold;
          } else if (v <= -threshold) {
            code = kMinus;
            sent = -threshold;
          }
          residual[i] = v - sent;
          codes |= code << (2 * (i % kCodesPerWord));
        }
        std::memcpy(out + 4 * word, &codes, 4);
      }
      return;
    }
  }
}

void DecodeGradient(GradientEncoding encoding, const char* in, size_t n, float threshold,
                    float* out) {
  switch (encoding) {
    case GradientEncoding::kFloat32:
      std::memcpy(out, in, n * sizeof(float));
      return;
    case GradientEncoding::kFloat16:
    case GradientEncoding::kBFloat16: {
      const bool half = encoding == GradientEncoding::kFloat16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, in + 2 * i, 2);
        out[i] = half ? HalfToFloat(v) : BFloat16ToFloat(v);
      }
      return;
    }
    case GradientEncoding::kTwoBit: {
      const float values[4] = {0.0f, threshold, -threshold, std::nanf("")};
      for (size_t i = 0; i < n; ++i) {
        uint32_t codes;
        std::memcpy(&codes, in + 4 * (i / kCodesPerWord), 4);
        out[i] = values[(codes >> (2 * (i % kCodesPerWord))) & 3u];
      }
      return;
    }
  }
}

}  // namespace kubeps
