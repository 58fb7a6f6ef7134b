#include "ps-server/push_data.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/copy_bytes.h"

namespace kubeps {

PushData::PushData(std::vector<std::string_view> pieces, GradientEncoding encoding, float threshold)
    : pieces_(std::move(pieces)), encoding_(encoding), threshold_(threshold) {
  for (std::string_view piece : pieces_) size_ += piece.size();
}

template <typename Sink>
void PushData::Consume(size_t bytes, Sink sink) {
  while (bytes > 0 && piece_ < pieces_.size()) {
    const std::string_view piece = pieces_[piece_];
    if (offset_ == 0 && before_piece_) before_piece_(piece_);
    const size_t take = std::min(bytes, piece.size() - offset_);
    sink(piece.data() + offset_, take);
    bytes -= take;
    offset_ += take;
    if (offset_ == piece.size()) {
      ++piece_;
      offset_ = 0;
    }
  }
}

namespace {

// True if none of v[0, n) has an all-ones exponent (NaN or +-Inf). On the
// bits rather than std::isfinite: it vectorises, and it holds under
// -ffast-math too. Every pushed byte passes here: on a CPU with AVX2 (the
// build targets any x86-64) the loop takes 8 floats at a time, not 4.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
bool AllFinite(const float* v, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

bool PushData::Read(float* out, size_t n) {
  if (encoding_ != GradientEncoding::kFloat32) {
    encoded_.resize(EncodedBytes(encoding_, n));
    char* to = encoded_.data();
    Consume(encoded_.size(), [&](const char* from, size_t bytes) {
      CopyBytes(to, from, bytes);
      to += bytes;
    });
    DecodeGradient(encoding_, encoded_.data(), n, threshold_, out);
    return AllFinite(out, n);
  }
  char* to = reinterpret_cast<char*>(out);
  size_t checked = 0;  // floats of out already checked
  bool finite = true;
  // A piece may be megabytes: it is copied and checked a chunk at a time,
  // each checked while it is still in the first-level cache.
  constexpr size_t kChunk = 16 << 10;
  Consume(n * sizeof(float), [&](const char* from, size_t bytes) {
    for (size_t done = 0; done < bytes;) {
      const size_t take = std::min(kChunk, bytes - done);
      CopyBytes(to, from + done, take);
      to += take;
      done += take;
      // A float cut between two pieces is checked once its last byte is in.
      const size_t complete =
          static_cast<size_t>(to - reinterpret_cast<char*>(out)) / sizeof(float);
      finite &= AllFinite(out + checked, complete - checked);
      checked = complete;
    }
  });
  return finite;
}

const float* PushData::View(size_t n, float* scratch, bool* finite) {
  const size_t bytes = n * sizeof(float);
  if (encoding_ == GradientEncoding::kFloat32 && piece_ < pieces_.size()) {
    const char* at = pieces_[piece_].data() + offset_;
    if (pieces_[piece_].size() - offset_ >= bytes &&
        reinterpret_cast<uintptr_t>(at) % alignof(float) == 0) {
      const float* in_place = reinterpret_cast<const float*>(at);
      Consume(bytes, [](const char*, size_t) {});
      *finite = AllFinite(in_place, n);
      return in_place;
    }
  }
  *finite = Read(scratch, n);
  return scratch;
}

void PushData::Skip(size_t n) {
  Consume(EncodedBytes(encoding_, n), [](const char*, size_t) {});
}

}  // namespace kubeps
