#include "common/time_format.h"

#include <gtest/gtest.h>

#include <chrono>

namespace kubeps {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

// 2026-12-07T10:00:00Z.
const Clock::time_point kTen = Clock::time_point(1796637600s);

TEST(TimeFormatTest, WritesMetaV1TimeToTheSecondAndMicroTimeToTheMicrosecond) {
  EXPECT_EQ(Rfc3339(kTen + 500ms), "2026-12-07T10:00:00Z");
  EXPECT_EQ(MicroTime(kTen + 500ms), "2026-12-07T10:00:00.500000Z");
}

// Any RFC 3339 time another client may write: fractions of a second, an
// offset from UTC.
TEST(TimeFormatTest, ReadsAnyRfc3339Time) {
  EXPECT_EQ(ParseTime("2026-12-07T10:00:00Z"), kTen);
  EXPECT_EQ(ParseTime("2026-12-07T10:00:00.5Z"), kTen + 500ms);
  EXPECT_EQ(ParseTime("2026-12-07T11:00:00+01:00"), kTen);
  EXPECT_EQ(ParseTime(MicroTime(kTen + 250ms)), kTen + 250ms);
}

TEST(TimeFormatTest, TextThatIsNoTimeIsTheEpoch) {
  EXPECT_EQ(ParseTime(""), Clock::time_point());
  EXPECT_EQ(ParseTime("t1"), Clock::time_point());
  EXPECT_EQ(ParseTime("2026-12-07 10:00:00"), Clock::time_point());
}

}  // namespace
}  // namespace kubeps
