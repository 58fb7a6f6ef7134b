// The pods this operator created that its cache does not show yet
// (operator/kube/pod_expectations.h).
#include "operator/kube/pod_expectations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::kube {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Clock = PodExpectations::Clock;

nlohmann::json Pod(const std::string& name, const std::string& uid) {
  return {{"metadata", {{"name", name}, {"uid", uid}}}};
}

std::vector<std::string> Uids(const std::vector<nlohmann::json>& pods) {
  std::vector<std::string> uids;
  for (const auto& pod : pods) uids.push_back(pod["metadata"]["uid"]);
  return uids;
}

TEST(PodExpectationsTest, ACreatedPodIsSeenUntilTheCacheShowsOneOfItsName) {
  PodExpectations expected;
  const Clock::time_point t0 = Clock::now();
  expected.Created(Pod("job-worker-0", "made-here"), t0);
  EXPECT_THAT(Uids(expected.Apply({}, t0)), ElementsAre("made-here"));
  EXPECT_THAT(Uids(expected.Apply({Pod("job-server-0", "s")}, t0)), ElementsAre("s", "made-here"));
  // The cache shows that name (whoever's pod it is): the cache is the truth.
  EXPECT_THAT(Uids(expected.Apply({Pod("job-worker-0", "cached")}, t0)), ElementsAre("cached"));
  EXPECT_EQ(expected.size(), 0u);
  EXPECT_THAT(expected.Apply({}, t0), IsEmpty()) << "gone from the cache since: gone";
}

TEST(PodExpectationsTest, APodTheCacheNeverShowsIsAssumedOnlyForAWhile) {
  PodExpectations expected;
  const Clock::time_point t0 = Clock::now();
  expected.Created(Pod("job-worker-0", "made-here"), t0);
  EXPECT_EQ(expected.Apply({}, t0 + PodExpectations::kPatience).size(), 1u);
  EXPECT_THAT(expected.Apply({}, t0 + PodExpectations::kPatience + std::chrono::seconds(1)),
              IsEmpty());
}

TEST(PodExpectationsTest, APodDeletedHereIsExpectedNoMore) {
  PodExpectations expected;
  const Clock::time_point t0 = Clock::now();
  expected.Created(Pod("job-worker-0", "made-here"), t0);
  expected.Deleted("job-worker-0");
  EXPECT_THAT(expected.Apply({}, t0), IsEmpty());
}

}  // namespace
}  // namespace kubeps::kube
