#include "common/copy_bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kubeps {
namespace {

// Every byte of [at, at + bytes) of `to` becomes `from`'s, and nothing
// around it changes: checked for each size up to a few blocks (the loop's
// blocks and the tail), at every offset of the first cache line on both
// sides, and for one copy of megabytes.
void ExpectExactCopy(size_t bytes, size_t to_offset, size_t from_offset) {
  constexpr size_t kGuard = 64;
  std::vector<uint8_t> from(from_offset + bytes);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint8_t> to(to_offset + bytes + kGuard, 0xEE);
  CopyBytes(to.data() + to_offset, from.data() + from_offset, bytes);
  for (size_t i = 0; i < to_offset; ++i) ASSERT_EQ(to[i], 0xEE) << "before the copy, byte " << i;
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(to[to_offset + i], from[from_offset + i])
        << "byte " << i << " of " << bytes << ", offsets " << to_offset << "/" << from_offset;
  }
  for (size_t i = 0; i < kGuard; ++i) ASSERT_EQ(to[to_offset + bytes + i], 0xEE) << "after, " << i;
}

TEST(CopyBytesTest, EverySizeAroundTheBlocksAtEveryAlignment) {
  for (size_t bytes = 0; bytes <= 1100; ++bytes) ExpectExactCopy(bytes, bytes % 64, 0);
  for (size_t to_offset = 0; to_offset < 64; ++to_offset) {
    for (size_t from_offset = 0; from_offset < 64; from_offset += 3) {
      ExpectExactCopy(777, to_offset, from_offset);
    }
  }
}

TEST(CopyBytesTest, MegabytesOfFloats) {
  ExpectExactCopy((3 << 20) + 37, 4, 0);
  std::vector<float> from(1605632), to(from.size());
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<float>(i) * 0.5f - 3.0f;
  CopyBytes(to.data(), from.data(), from.size() * sizeof(float));
  EXPECT_EQ(to, from);
}

}  // namespace
}  // namespace kubeps
