// How a worker's gradients travel to the parameter servers (spec.compression):
// as float32 (the default), as 16-bit floats (fp16 or bf16, half the bytes),
// or in MXNet's 2-bit scheme (a sixteenth): each value, plus what earlier
// steps left of it on this worker (its residual), is sent as +threshold,
// -threshold or 0, and the difference stays in the residual for the next
// step (error feedback), so nothing of the gradient is lost, only delayed.
// A NaN or infinite value stays NaN or infinite in every encoding (2-bit has
// a code for it), so the servers' non-finite check works as for float32.
// The servers decode into float32 and accumulate, average and update in
// float32; parameters come back in float32.
//
// Each part (placement.h) is encoded on its own: a part's bytes start where
// the previous part's end. Thread-compatible: pure functions.
#ifndef KUBEPS_COMMON_GRADIENT_CODEC_H_
#define KUBEPS_COMMON_GRADIENT_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kubeps {

enum class GradientEncoding : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kTwoBit = 3 };

// "none", "fp16", "bf16", "2bit": the names spec.compression.type takes.
std::optional<GradientEncoding> ParseGradientEncoding(const std::string& name);
const char* GradientEncodingName(GradientEncoding encoding);

// The bytes `n` values take on the wire.
size_t EncodedBytes(GradientEncoding encoding, size_t n);

// Writes EncodedBytes(encoding, n) bytes for in[0, n) to `out`. Two-bit
// adds `residual` to the values first and leaves in it what was not sent;
// the other encodings do not read it (it may be null).
void EncodeGradient(GradientEncoding encoding, const float* in, size_t n, float threshold,
                    float* residual, char* out);
// The inverse: n float32 values from EncodedBytes(encoding, n) bytes.
void DecodeGradient(GradientEncoding encoding, const char* in, size_t n, float threshold,
                    float* out);

// Round to nearest even, as hardware does; infinities and NaNs stay so
// (a float32 above fp16's largest, 65504, becomes infinite).
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bf16);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_GRADIENT_CODEC_H_
