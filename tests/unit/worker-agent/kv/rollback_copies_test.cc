// RollbackCopies: a C++ program's own state (its parameters and optimizer
// state where the servers' optimizer is none) put back at a rollback's
// resume step, so the redone steps do not apply their updates twice.
#include "worker-agent/kv/rollback_copies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kubeps {
namespace {

using ::testing::ElementsAre;
using Steps = std::pair<uint64_t, uint64_t>;

// A program's state: two regions of different sizes and types.
struct Program {
  std::vector<float> weights = std::vector<float>(1000, 0.0f);
  std::vector<uint64_t> counters = std::vector<uint64_t>(3, 0);

  void Track(RollbackCopies* copies) {
    copies->Track(weights.data(), weights.size() * sizeof(float));
    copies->Track(counters.data(), counters.size() * sizeof(uint64_t));
  }
  // What computing `step` does to the state.
  void Compute(uint64_t step) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i] += 0.001f * (step + 1) * (i % 7);
    counters[step % counters.size()] += step;
  }
};

// The program trains from `from` up to `to` (exclusive).
void Train(Program* program, RollbackCopies* copies, uint64_t from, uint64_t to) {
  for (uint64_t step = from; step < to; ++step) {
    copies->BeforeStep(step);
    program->Compute(step);
  }
}

TEST(RollbackCopiesTest, ARollbackPutsBackTheStateOfItsStepBitForBit) {
  Program program, reference;
  RollbackCopies copies(/*interval=*/10, [] { return -1; }, /*kept=*/3);
  program.Track(&copies);
  Train(&program, &copies, 0, 27);
  for (uint64_t step = 0; step < 20; ++step) reference.Compute(step);
  // Step 20's copy: the state before the program computed step 20.
  ASSERT_TRUE(copies.RollBack(20));
  EXPECT_EQ(program.weights, reference.weights);
  EXPECT_EQ(program.counters, reference.counters);
  // Redone from there, the run ends where one without the rollback ends.
  Train(&program, &copies, 20, 40);
  for (uint64_t step = 20; step < 40; ++step) reference.Compute(step);
  EXPECT_EQ(program.weights, reference.weights);
  EXPECT_EQ(program.counters, reference.counters);
}

TEST(RollbackCopiesTest, CopiesAreTakenAtMultiplesOfTheIntervalAndAtTheFirstStep) {
  Program program;
  // A job resumed at step 37 from checkpoints: its first step is one a
  // rollback may go back to before the next multiple is reached.
  RollbackCopies copies(
      20, [] { return -1; }, 3);
  program.Track(&copies);
  Train(&program, &copies, 37, 81);
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{40, 40}, Steps{60, 60}, Steps{80, 80}));
  RollbackCopies from_start(
      20, [] { return -1; }, 5);
  program.Track(&from_start);
  Train(&program, &from_start, 37, 61);
  EXPECT_THAT(from_start.kept_steps(), ElementsAre(Steps{37, 37}, Steps{40, 40}, Steps{60, 60}));
}

TEST(RollbackCopiesTest, NoCopyOfTheStepLeavesTheStateAsItIs) {
  Program program;
  RollbackCopies copies(
      10, [] { return -1; }, 2);
  program.Track(&copies);
  Train(&program, &copies, 0, 35);
  const Program before = program;
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{20, 20}, Steps{30, 30}));
  EXPECT_FALSE(copies.RollBack(10)) << "step 10's copy was dropped for newer ones";
  EXPECT_EQ(program.weights, before.weights);
  EXPECT_EQ(program.counters, before.counters);
  EXPECT_TRUE(copies.kept_steps().empty()) << "the copies of later steps are another timeline's";
}

// A rollback goes to the newest step every server has checkpointed, or
// later once a newer checkpoint is written, or to the one before where a
// server finds that one damaged: that copy, the newer ones, one older.
TEST(RollbackCopiesTest, TheCopiesKeptAreTheLikeliestRollbacks) {
  Program program;
  int64_t floor = 10;
  RollbackCopies copies(
      10, [&] { return floor; }, 3);
  program.Track(&copies);
  Train(&program, &copies, 0, 51);
  // Servers slow to checkpoint: step 10 is still the newest all hold.
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{10, 10}, Steps{40, 40}, Steps{50, 50}));
  floor = 50;
  Train(&program, &copies, 51, 61);
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{40, 40}, Steps{50, 50}, Steps{60, 60}));
}

// After a rollback the program computes the resume step again: the copy
// put back is kept, not taken anew, and the later copies follow as before.
TEST(RollbackCopiesTest, StepsRedoneAfterARollbackAreCopiedAgain) {
  Program program;
  RollbackCopies copies(
      10, [] { return -1; }, 3);
  program.Track(&copies);
  Train(&program, &copies, 0, 25);
  ASSERT_TRUE(copies.RollBack(10));
  Train(&program, &copies, 10, 31);
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{10, 10}, Steps{20, 20}, Steps{30, 30}));
}

// An elastic worker skips the steps others compute: its state before step
// 25 is its state at every step from 13 on, 20 included.
TEST(RollbackCopiesTest, AStateThatSpansAMultipleIsCopiedForAllItsSteps) {
  Program program;
  RollbackCopies copies(
      10, [] { return -1; }, 3);
  program.Track(&copies);
  Train(&program, &copies, 11, 13);
  copies.BeforeStep(25);
  const Program at_25 = program;
  program.Compute(25);
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{11, 11}, Steps{13, 25}));
  ASSERT_TRUE(copies.RollBack(20));
  EXPECT_EQ(program.weights, at_25.weights);
  EXPECT_THAT(copies.kept_steps(), ElementsAre(Steps{11, 11}, Steps{13, 20}));
}

TEST(RollbackCopiesTest, HowManyAreKeptComesFromTheEnvironment) {
  setenv("KUBEPS_ROLLBACK_COPIES", "0", 1);
  RollbackCopies none(10, [] { return -1; });
  unsetenv("KUBEPS_ROLLBACK_COPIES");
  EXPECT_EQ(none.kept(), 0);
  Program program;
  program.Track(&none);
  Train(&program, &none, 0, 30);
  EXPECT_TRUE(none.kept_steps().empty());
  setenv("KUBEPS_ROLLBACK_COPIES", "many", 1);
  RollbackCopies unreadable(10, [] { return -1; });
  unsetenv("KUBEPS_ROLLBACK_COPIES");
  EXPECT_EQ(unreadable.kept(), RollbackCopies::kDefaultKept);
  EXPECT_EQ(RollbackCopies(10, [] { return -1; }).kept(), RollbackCopies::kDefaultKept);
}

}  // namespace
}  // namespace kubeps
