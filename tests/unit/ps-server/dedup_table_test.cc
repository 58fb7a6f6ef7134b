// Exactly-once bookkeeping (ps-server/dedup_table.h): a request is applied
// once, resends are duplicates, acked_below keeps the table bounded, a new
// incarnation starts afresh, and a duplicate of a request still being
// applied waits for it.
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ps-server/dedup_table.h"

namespace kubeps {
namespace {

using Verdict = DedupTable::Verdict;
using namespace std::chrono_literals;

v1::RequestId Id(const std::string& node, uint64_t incarnation, uint64_t seq,
                 uint64_t acked_below = 0) {
  v1::RequestId id;
  id.set_node_id(node);
  id.set_incarnation(incarnation);
  id.set_seq(seq);
  id.set_acked_below(acked_below);
  return id;
}

TEST(DedupTableTest, RequestAppliedOnceThenDuplicate) {
  DedupTable table;
  const auto id = Id("worker-0", 7, 0);
  ASSERT_EQ(table.Begin(id), Verdict::kApply);
  table.Done(id);
  EXPECT_EQ(table.Begin(id), Verdict::kDuplicate);
  EXPECT_EQ(table.Begin(id), Verdict::kDuplicate);
  EXPECT_EQ(table.TrackedRequests(), 1u);

  // The next sequence number, and the same number from another sender, are new.
  const auto next = Id("worker-0", 7, 1);
  EXPECT_EQ(table.Begin(next), Verdict::kApply);
  table.Done(next);
  const auto other = Id("worker-1", 7, 0);
  EXPECT_EQ(table.Begin(other), Verdict::kApply);
  table.Done(other);
  EXPECT_EQ(table.TrackedRequests(), 3u);
}

TEST(DedupTableTest, OutOfOrderSequenceNumbersAreEachAppliedOnce) {
  DedupTable table;
  for (uint64_t seq : {5u, 2u, 9u, 0u}) {
    auto id = Id("w", 1, seq);
    ASSERT_EQ(table.Begin(id), Verdict::kApply) << seq;
    table.Done(id);
  }
  for (uint64_t seq : {0u, 2u, 5u, 9u})
    EXPECT_EQ(table.Begin(Id("w", 1, seq)), Verdict::kDuplicate) << seq;
  auto gap = Id("w", 1, 3);
  EXPECT_EQ(table.Begin(gap), Verdict::kApply);
  table.Done(gap);
}

TEST(DedupTableTest, AckedBelowForgetsOldEntriesAndKeepsTableBounded) {
  DedupTable table;
  // A sender that acknowledges everything answered so far: seq i carries
  // acked_below = i (all earlier requests were answered).
  for (uint64_t seq = 0; seq < 10000; ++seq) {
    auto id = Id("worker-0", 1, seq, seq);
    ASSERT_EQ(table.Begin(id), Verdict::kApply) << seq;
    table.Done(id);
    ASSERT_LE(table.TrackedRequests(), 1u) << "after seq " << seq;
  }
  // A sender with a window of 8 unanswered requests.
  for (uint64_t seq = 0; seq < 10000; ++seq) {
    auto id = Id("worker-1", 1, seq, seq >= 8 ? seq - 8 : 0);
    ASSERT_EQ(table.Begin(id), Verdict::kApply) << seq;
    table.Done(id);
  }
  EXPECT_LE(table.TrackedRequests(), 1u + 9u);

  // Anything below the floor is a stale duplicate, although forgotten.
  EXPECT_EQ(table.Begin(Id("worker-0", 1, 17, 0)), Verdict::kDuplicate);
  EXPECT_EQ(table.Begin(Id("worker-1", 1, 100, 0)), Verdict::kDuplicate);
  // The most recent requests are still remembered as applied.
  EXPECT_EQ(table.Begin(Id("worker-0", 1, 9999, 9999)), Verdict::kDuplicate);
  EXPECT_EQ(table.Begin(Id("worker-1", 1, 9999, 9991)), Verdict::kDuplicate);
}

TEST(DedupTableTest, WithoutAcknowledgementsTheTableGrows) {
  // The counterpart of the bound above: TrackedRequests really counts.
  DedupTable table;
  for (uint64_t seq = 0; seq < 100; ++seq) {
    auto id = Id("worker-0", 1, seq, 0);
    ASSERT_EQ(table.Begin(id), Verdict::kApply);
    table.Done(id);
  }
  EXPECT_EQ(table.TrackedRequests(), 100u);
  // A later request that acknowledges 90 of them drops those.
  auto id = Id("worker-0", 1, 100, 90);
  ASSERT_EQ(table.Begin(id), Verdict::kApply);
  table.Done(id);
  EXPECT_EQ(table.TrackedRequests(), 11u);  // 90..100
}

TEST(DedupTableTest, ACurrentIncarnationResetsAndAReplacedOneIsRefused) {
  DedupTable table;
  for (uint64_t seq = 0; seq < 5; ++seq) {
    auto id = Id("worker-0", 100, seq, 0);
    ASSERT_EQ(table.Begin(id), Verdict::kApply);
    table.Done(id);
  }
  table.SetCurrentIncarnations({{"worker-0", 100}});
  EXPECT_EQ(table.Begin(Id("worker-0", 100, 3)), Verdict::kDuplicate);

  // The restarted process registered with the scheduler; the shard has not
  // heard yet: its requests wait.
  auto restarted = Id("worker-0", 200, 0);
  EXPECT_EQ(table.Begin(restarted), Verdict::kNotYetKnown);
  // Once the scheduler names it current, it numbers from 0 again: new.
  table.SetCurrentIncarnations({{"worker-0", 200}});
  EXPECT_EQ(table.Begin(restarted), Verdict::kApply);
  table.Done(restarted);
  EXPECT_EQ(table.Begin(restarted), Verdict::kDuplicate);
  EXPECT_EQ(table.TrackedRequests(), 1u) << "the old incarnation's entries must be dropped";

  // A late resend from the previous life is never applied, even with a
  // sequence number the new life has not used, and says so.
  EXPECT_EQ(table.Begin(Id("worker-0", 100, 3)), Verdict::kStale);
  EXPECT_EQ(table.Begin(Id("worker-0", 100, 50)), Verdict::kStale);
  // ... and does not disturb the new life.
  auto next = Id("worker-0", 200, 1);
  EXPECT_EQ(table.Begin(next), Verdict::kApply);
  table.Done(next);
}

// The scheduler named a new life before that life's first request reached
// this shard: a late request of the replaced one, still the sender's record
// here, is refused all the same. Before, it was applied: an async step
// pushed late by a worker thought dead, and again by its replacement,
// which resumed at that step, was applied twice.
TEST(DedupTableTest, AReplacedLifeIsRefusedBeforeItsSuccessorIsHeardFrom) {
  DedupTable table;
  table.SetCurrentIncarnations({{"worker-0", 100}});
  const auto first = Id("worker-0", 100, 0);
  ASSERT_EQ(table.Begin(first), Verdict::kApply);
  table.Done(first);
  table.SetCurrentIncarnations({{"worker-0", 200}});
  EXPECT_EQ(table.Begin(Id("worker-0", 100, 1)), Verdict::kStale);
  EXPECT_EQ(table.Begin(first), Verdict::kStale) << "replaced: not answered as applied either";

  // Nor is a replaced life's first request to this shard applied.
  DedupTable fresh;
  fresh.SetCurrentIncarnations({{"worker-0", 100}});
  fresh.SetCurrentIncarnations({{"worker-0", 200}});
  EXPECT_EQ(fresh.Begin(Id("worker-0", 100, 0)), Verdict::kStale);
  EXPECT_EQ(fresh.Begin(Id("worker-0", 200, 0)), Verdict::kApply);
}

// Before, the larger number won: a worker restarted with its clock behind
// (rescheduled to another node, an NTP step) had every push dropped as a
// "late duplicate" of its dead predecessor.
TEST(DedupTableTest, ASmallerIncarnationIsCurrentWhenTheSchedulerSaysSo) {
  DedupTable table;
  const auto old_life = Id("worker-1", 1'700'000'000'000'000'000ull, 0);
  table.SetCurrentIncarnations({{"worker-1", old_life.incarnation()}});
  ASSERT_EQ(table.Begin(old_life), Verdict::kApply);
  table.Done(old_life);
  table.SetCurrentIncarnations({{"worker-1", 1'699'999'000'000'000'000ull}});
  const auto new_life = Id("worker-1", 1'699'999'000'000'000'000ull, 0);
  EXPECT_EQ(table.Begin(new_life), Verdict::kApply);
  table.Done(new_life);
  EXPECT_EQ(table.Begin(old_life), Verdict::kStale);
}

TEST(DedupTableTest, DuplicateOfInFlightRequestWaitsForDone) {
  DedupTable table;
  const auto id = Id("worker-0", 1, 4);
  ASSERT_EQ(table.Begin(id), Verdict::kApply);  // the original, being applied

  std::atomic<bool> returned{false};
  auto duplicate = std::async(std::launch::async, [&] {
    Verdict v = table.Begin(id);
    returned = true;
    return v;
  });
  // Another request of the same sender is not held up by it.
  auto other = Id("worker-0", 1, 5);
  EXPECT_EQ(table.Begin(other), Verdict::kApply);
  table.Done(other);

  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(returned.load()) << "the duplicate was answered before the original was applied";
  table.Done(id);
  ASSERT_EQ(duplicate.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(duplicate.get(), Verdict::kDuplicate);
}

TEST(DedupTableTest, ADuplicateWaitingWhenACheckpointIsRestoredIsJudgedByTheRestoredRecords) {
  DedupTable table;
  const auto id = Id("worker-0", 1, 4);
  ASSERT_EQ(table.Begin(id), Verdict::kApply);  // the original, being applied
  auto duplicate = std::async(std::launch::async, [&] { return table.Begin(id); });
  std::this_thread::sleep_for(50ms);
  // The shard rolls back to a checkpoint taken before the original: the
  // records it waited on are replaced, and the original is not among them.
  v1::ShardCheckpoint checkpoint;
  auto* sender = checkpoint.add_senders();
  sender->set_node_id("worker-0");
  sender->set_incarnation(1);
  sender->set_floor(2);
  table.Restore(checkpoint);
  ASSERT_EQ(duplicate.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(duplicate.get(), Verdict::kApply);
  table.Done(id);
  EXPECT_EQ(table.Begin(id), Verdict::kDuplicate);
}

TEST(DedupTableTest, ManyConcurrentResendsApplyExactlyOnce) {
  DedupTable table;
  std::atomic<int> applied{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (uint64_t seq = 0; seq < 200; ++seq) {
        auto id = Id("worker-0", 1, seq, seq >= 4 ? seq - 4 : 0);
        if (table.Begin(id) == Verdict::kApply) {
          ++applied;
          table.Done(id);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(applied.load(), 200);
}

// A request of a previous incarnation can still be in flight when the
// restarted process's first requests arrive (the shard is applying it). Its
// Done() must not touch the new incarnation's bookkeeping.
TEST(DedupTableTest, OldIncarnationDoneDoesNotReleaseNewIncarnationsInFlightRequest) {
  DedupTable table;
  const auto old_life = Id("worker-0", 1, 3);
  ASSERT_EQ(table.Begin(old_life), Verdict::kApply);  // still being applied
  const auto new_life = Id("worker-0", 2, 3);
  table.SetCurrentIncarnations({{"worker-0", 2}});    // it registered
  ASSERT_EQ(table.Begin(new_life), Verdict::kApply);  // new life, same seq
  table.Done(old_life);                               // the old request finishes

  // A resend of the new life's request arrives while it is in flight: it
  // must wait for the original and then be a duplicate, never kApply.
  auto resend = std::async(std::launch::async, [&] { return table.Begin(new_life); });
  bool answered_early = resend.wait_for(50ms) == std::future_status::ready;
  table.Done(new_life);
  ASSERT_EQ(resend.wait_for(5s), std::future_status::ready);
  Verdict verdict = resend.get();
  if (verdict == Verdict::kApply) table.Done(new_life);
  EXPECT_FALSE(answered_early) << "the resend did not wait for the in-flight original";
  EXPECT_EQ(verdict, Verdict::kDuplicate)
      << "BUG: Done() of an older incarnation erased the new incarnation's in-flight seq, "
         "so the resend was applied a second time";
}

// A resend of the old life waits for its original when the restarted
// process's first request resets the sender's record in place. Woken, it
// must be judged as the old life's (refused), never against the new life's
// record, where its seq is unknown: that would apply it a second time and
// leave its seq in flight for good, so the new life's own request of that
// seq would wait forever.
TEST(DedupTableTest, AResendOfTheOldLifeWaitingWhenTheNewLifeArrivesIsRefused) {
  DedupTable table;
  table.SetCurrentIncarnations({{"worker-0", 1}});
  const auto old_life = Id("worker-0", 1, 7);
  ASSERT_EQ(table.Begin(old_life), Verdict::kApply);  // the original, being applied
  auto resend = std::async(std::launch::async, [&] { return table.Begin(old_life); });
  ASSERT_NE(resend.wait_for(50ms), std::future_status::ready) << "it waits for the original";

  table.SetCurrentIncarnations({{"worker-0", 2}});  // the process restarted
  const auto first = Id("worker-0", 2, 0);
  ASSERT_EQ(table.Begin(first), Verdict::kApply);
  table.Done(first);
  ASSERT_EQ(resend.wait_for(5s), std::future_status::ready);
  const Verdict verdict = resend.get();
  EXPECT_EQ(verdict, Verdict::kStale) << "the old life's resend was judged as the new life's";
  if (verdict == Verdict::kApply) table.Done(old_life);
  table.Done(old_life);  // the original ends

  const auto same_seq = Id("worker-0", 2, 7);
  auto new_request = std::async(std::launch::async, [&] { return table.Begin(same_seq); });
  ASSERT_EQ(new_request.wait_for(5s), std::future_status::ready)
      << "the new life's request of the same seq waits for one that will never end";
  EXPECT_EQ(new_request.get(), Verdict::kApply);
}

}  // namespace
}  // namespace kubeps
