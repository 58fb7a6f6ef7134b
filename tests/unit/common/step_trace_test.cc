// StepTrace (common/step_trace.h): events in order of their start, in ms
// from Open; nothing recorded while it is closed.
#include "common/step_trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StepTraceTest, ATableOfWhatHappenedWhileOpenInOrderOfStart) {
  StepTrace& trace = StepTrace::Get();
  trace.Record("before", StepTrace::Clock::now(), StepTrace::Clock::now());
  EXPECT_FALSE(trace.open());
  trace.Open("timeline of a test");
  const auto t0 = StepTrace::Clock::now();
  trace.Record("second", t0 + std::chrono::milliseconds(5), t0 + std::chrono::milliseconds(9));
  trace.Record("first", t0 + std::chrono::milliseconds(1), t0 + std::chrono::milliseconds(20));
  trace.Mark("a moment");
  const std::string table = trace.Close();
  EXPECT_FALSE(trace.open());
  trace.Mark("after");
  EXPECT_EQ(trace.Close(), "");
  EXPECT_THAT(table, HasSubstr("timeline of a test\n"));
  EXPECT_THAT(table, Not(HasSubstr("before")));
  const size_t first = table.find("first"), second = table.find("second");
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  EXPECT_LT(first, second);
  EXPECT_THAT(table, HasSubstr("a moment"));
}

}  // namespace
}  // namespace kubeps
