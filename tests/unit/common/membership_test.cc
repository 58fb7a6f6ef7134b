#include "common/membership.h"

#include <gtest/gtest.h>

namespace kubeps {
namespace {

// 2 workers for steps 0-9, rank 0 alone for 10-19, ranks 0, 1, 3 from 20.
v1::Membership TwoThenOneThenThree() {
  v1::Membership schedule;
  schedule.set_epoch(3);
  schedule.set_global_batch(128);
  schedule.set_fixed_below(30);
  auto add = [&](uint64_t from, std::vector<int> ranks) {
    auto* change = schedule.add_changes();
    change->set_from_step(from);
    for (int r : ranks) change->add_ranks(r);
  };
  add(0, {0, 1});
  add(10, {0});
  add(20, {0, 1, 3});
  return schedule;
}

TEST(MembershipTest, AFixedJobCutsEveryStepAsBeforeElasticity) {
  const v1::Membership fixed = FixedMembership(4, 256);
  EXPECT_TRUE(MembershipKnown(fixed, 1u << 30));
  for (int rank = 0; rank < 4; ++rank) {
    const StepMembership m = MembershipOf(fixed, rank, 12345);
    EXPECT_TRUE(m.member);
    EXPECT_EQ(m.count, 4);
    EXPECT_EQ(m.first_example, 64u * rank);
    EXPECT_EQ(m.examples(), 64u);
  }
  EXPECT_FALSE(MembershipOf(fixed, 4, 0).member);
}

TEST(MembershipTest, EachStepHasTheMembersOfTheChangeInForce) {
  const v1::Membership schedule = TwoThenOneThenThree();
  EXPECT_EQ(MembersAt(schedule, 9), (std::vector<int>{0, 1}));
  EXPECT_EQ(MembersAt(schedule, 10), (std::vector<int>{0}));
  EXPECT_EQ(MembersAt(schedule, 29), (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(MembershipKnown(schedule, 29));
  EXPECT_FALSE(MembershipKnown(schedule, 30)) << "past fixed_below the schedule may still change";
}

TEST(MembershipTest, TheGlobalBatchIsCutOverTheStepsMembersWithNoExampleLost) {
  const v1::Membership schedule = TwoThenOneThenThree();
  const StepMembership alone = MembershipOf(schedule, 0, 15);
  EXPECT_EQ(alone.first_example, 0u);
  EXPECT_EQ(alone.end_example, 128u);
  // 128 over three: 42, 43, 43, back to back.
  uint64_t next = 0;
  for (int rank : {0, 1, 3}) {
    const StepMembership m = MembershipOf(schedule, rank, 25);
    ASSERT_TRUE(m.member) << rank;
    EXPECT_EQ(m.first_example, next);
    next = m.end_example;
  }
  EXPECT_EQ(next, 128u);
  EXPECT_EQ(MembershipOf(schedule, 3, 25).position, 2);
  EXPECT_EQ(MembershipOf(schedule, 0, 25).examples(), 42u);
}

TEST(MembershipTest, ANonMemberLearnsWhenItIsTakenInOrThatItIsNot) {
  const v1::Membership schedule = TwoThenOneThenThree();
  const StepMembership away = MembershipOf(schedule, 1, 12);
  EXPECT_FALSE(away.member);
  ASSERT_TRUE(away.next_member_step.has_value());
  EXPECT_EQ(*away.next_member_step, 20u);
  const StepMembership joiner = MembershipOf(schedule, 3, 0);
  EXPECT_EQ(joiner.next_member_step, std::optional<uint64_t>(20));
  EXPECT_FALSE(MembershipOf(schedule, 2, 25).next_member_step.has_value());
}

TEST(MembershipTest, ALaterEpochOrALongerLeaseIsNewer) {
  v1::Membership a = TwoThenOneThenThree(), b = a;
  EXPECT_FALSE(NewerMembership(a, b));
  b.set_fixed_below(40);
  EXPECT_TRUE(NewerMembership(b, a));
  a.set_epoch(4);
  EXPECT_TRUE(NewerMembership(a, b));
  EXPECT_EQ(DescribeMembership(TwoThenOneThenThree()),
            "from step 0: ranks 0,1; from step 10: ranks 0; from step 20: ranks 0,1,3");
}

}  // namespace
}  // namespace kubeps
