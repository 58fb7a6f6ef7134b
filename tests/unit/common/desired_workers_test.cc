#include "common/desired_workers.h"

#include <gtest/gtest.h>

namespace kubeps {
namespace {

TEST(DesiredWorkersTest, ANumberOrANumberFromAStep) {
  DesiredWorkers d;
  EXPECT_EQ(ParseDesiredWorkers("4\n", &d), "");
  EXPECT_EQ(d.workers, 4);
  EXPECT_FALSE(d.at_step.has_value());
  EXPECT_EQ(ParseDesiredWorkers("3 from step 200", &d), "");
  EXPECT_EQ(d.workers, 3);
  EXPECT_EQ(d.at_step, std::optional<uint64_t>(200));
  EXPECT_EQ(FormatDesiredWorkers(d), "3 from step 200");
  EXPECT_EQ(FormatDesiredWorkers({2, std::nullopt}), "2");
}

TEST(DesiredWorkersTest, AnythingElseIsRefusedSayingWhatIsWanted) {
  DesiredWorkers d{7, std::nullopt};
  EXPECT_EQ(ParseDesiredWorkers("zero", &d),
            "want the number of workers the job should have, a whole number from 1");
  EXPECT_EQ(ParseDesiredWorkers("0", &d),
            "want the number of workers the job should have, a whole number from 1");
  EXPECT_EQ(ParseDesiredWorkers("3 at 200", &d), "want \"N\" or \"N from step S\"");
  EXPECT_EQ(ParseDesiredWorkers("3 from step 2 now", &d),
            "want \"N\" or \"N from step S\", with nothing after");
  EXPECT_EQ(d.workers, 7) << "left alone";
}

}  // namespace
}  // namespace kubeps
