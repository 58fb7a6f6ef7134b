// Lease-based leader election (operator/kubeclient/leader_election.h)
// against the fake API server: a free Lease is taken, a held one is renewed,
// another holder's Lease is taken only once it expired, two candidates never
// both win (the loser's write is a 409), and a leader that cannot renew
// stops leading before anyone else may take over.
#include "operator/kubeclient/leader_election.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/time_format.h"
#include "operator/kubeclient/api_path.h"
#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube {
namespace {

using fake::Eventually;
using fake::FakeKubeClient;
using nlohmann::json;
using std::chrono::system_clock;
using namespace std::chrono_literals;

const std::string kLeaseCollection = CollectionPath(kLeases, "kubeps-system");
const std::string kLease = kLeaseCollection + "/kubeps-operator";

LeaseConfig Config(const std::string& identity) {
  LeaseConfig config;
  config.identity = identity;
  config.lease_duration_s = 15;
  config.renew_interval_ms = 100;
  config.renew_deadline_ms = 1000;
  return config;
}

// A Lease held by `holder`, last renewed `age` ago.
json HeldLease(const std::string& holder, system_clock::duration age, int duration_s = 15) {
  const std::string renewed = MicroTime(system_clock::now() - age);
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", {{"name", "kubeps-operator"}}},
          {"spec",
           {{"holderIdentity", holder},
            {"leaseDurationSeconds", duration_s},
            {"acquireTime", renewed},
            {"renewTime", renewed},
            {"leaseTransitions", 3}}}};
}

json Spec(FakeKubeClient& fake) { return fake.Object(kLease)["spec"]; }

// A steady clock the test moves by hand.
struct ManualClock {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  LeaderElector::Clock Get() {
    return [this] { return now; };
  }
};

// Passes requests on to the fake; a test can cut this candidate off the
// network, or run something just before its next PUT reaches the server.
class InterposedClient : public KubeClient {
 public:
  explicit InterposedClient(FakeKubeClient* fake) : fake_(fake) {}
  std::atomic<bool> partitioned{false};
  std::function<void()> before_next_put;

  Status Get(const std::string& path, Response* response) override {
    if (partitioned) return Status::Error("partitioned");
    return fake_->Get(path, response);
  }
  Status Post(const std::string& path, const json& body, Response* response) override {
    if (partitioned) return Status::Error("partitioned");
    return fake_->Post(path, body, response);
  }
  Status Put(const std::string& path, const json& body, Response* response) override {
    if (partitioned) return Status::Error("partitioned");
    if (auto hook = std::exchange(before_next_put, nullptr)) hook();
    return fake_->Put(path, body, response);
  }
  Status Patch(const std::string& path, const json& body, Response* response) override {
    return fake_->Patch(path, body, response);
  }
  Status Delete(const std::string& path, Response* response) override {
    return fake_->Delete(path, response);
  }
  Status Watch(const std::string& path, const std::string& resource_version,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>& stop, Response* response) override {
    return fake_->Watch(path, resource_version, on_event, stop, response);
  }

 private:
  FakeKubeClient* fake_;
};

TEST(LeaderElectionTest, TakesAFreeLease) {
  FakeKubeClient fake;
  LeaderElector elector(&fake, Config("me"));
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  json spec = Spec(fake);
  EXPECT_EQ(spec["holderIdentity"], "me");
  EXPECT_EQ(spec["leaseDurationSeconds"], 15);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  EXPECT_EQ(spec["acquireTime"], spec["renewTime"]);
  EXPECT_LT(system_clock::now() - ParseTime(spec["renewTime"]), 60s);
}

TEST(LeaderElectionTest, RenewsItsOwnLeaseWithoutATransition) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("me", 5s));
  const json before = Spec(fake);
  LeaderElector elector(&fake, Config("me"));
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  const json after = Spec(fake);
  EXPECT_GT(ParseTime(after["renewTime"]), ParseTime(before["renewTime"]));
  EXPECT_EQ(after["acquireTime"], before["acquireTime"]);
  EXPECT_EQ(after["leaseTransitions"], 3);
  EXPECT_EQ(after["holderIdentity"], "me");
}

TEST(LeaderElectionTest, LeavesAnotherHoldersLeaseAloneUntilItExpires) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", 10s));
  ManualClock clock;
  LeaderElector elector(&fake, Config("me"), clock.Get());
  EXPECT_FALSE(elector.TryAcquireOrRenew());
  EXPECT_EQ(Spec(fake)["holderIdentity"], "other");
  EXPECT_TRUE(fake.RequestsTo("PUT", kLease).empty()) << "a valid lease is not even written";
  clock.now += 14s;
  EXPECT_FALSE(elector.TryAcquireOrRenew());

  // Unchanged for 16 s by our clock; the lease said 15 s.
  clock.now += 2s;
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  json spec = Spec(fake);
  EXPECT_EQ(spec["holderIdentity"], "me");
  EXPECT_EQ(spec["leaseTransitions"], 4);
  EXPECT_EQ(spec["acquireTime"], spec["renewTime"]);
}

TEST(LeaderElectionTest, HonoursTheHoldersLeaseDuration) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", 20s, /*duration_s=*/60));
  ManualClock clock;
  LeaderElector elector(&fake, Config("me"), clock.Get());  // our own duration is 15 s
  EXPECT_FALSE(elector.TryAcquireOrRenew());
  clock.now += 20s;
  EXPECT_FALSE(elector.TryAcquireOrRenew());
  clock.now += 40s;
  EXPECT_TRUE(elector.TryAcquireOrRenew());
}

// The holder's clock is an hour behind the standby's: its renewTime looks
// long expired, yet it renews every few seconds. Comparing clocks would make
// a second leader at once.
TEST(LeaderElectionTest, AHolderWhoseClockIsBehindKeepsTheLeaseWhileItRenews) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", 1h));
  ManualClock clock;
  LeaderElector standby(&fake, Config("standby"), clock.Get());
  for (int renewal = 1; renewal <= 6; ++renewal) {
    EXPECT_FALSE(standby.TryAcquireOrRenew()) << "renewal " << renewal;
    clock.now += 10s;
    fake.Modify(kLease, {{"spec", {{"renewTime", MicroTime(system_clock::now() - 1h)}}}});
  }
  EXPECT_FALSE(standby.TryAcquireOrRenew());
  EXPECT_EQ(Spec(fake)["holderIdentity"], "other");
  // It stops renewing: 15 s later by the standby's clock, the lease is free.
  clock.now += 15s;
  EXPECT_TRUE(standby.TryAcquireOrRenew());
}

// The holder's clock is an hour ahead and it died: its renewTime looks valid
// for an hour, but the standby takes over one lease duration after it last
// saw a renewal.
TEST(LeaderElectionTest, ADeadHolderWhoseClockWasAheadIsReplacedAfterOneLeaseDuration) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", -1h));
  ManualClock clock;
  LeaderElector standby(&fake, Config("standby"), clock.Get());
  EXPECT_FALSE(standby.TryAcquireOrRenew());
  clock.now += 15s;
  EXPECT_TRUE(standby.TryAcquireOrRenew());
  EXPECT_EQ(Spec(fake)["holderIdentity"], "standby");
}

TEST(LeaderElectionTest, ReleaseHandsTheLeaseOverAtOnce) {
  FakeKubeClient fake;
  LeaderElector me(&fake, Config("me")), other(&fake, Config("other"));
  ASSERT_TRUE(me.TryAcquireOrRenew());
  EXPECT_FALSE(other.TryAcquireOrRenew());
  other.Release();  // not the holder: changes nothing
  EXPECT_EQ(Spec(fake)["holderIdentity"], "me");
  me.Release();
  EXPECT_EQ(Spec(fake)["holderIdentity"], "");
  EXPECT_TRUE(other.TryAcquireOrRenew());
  EXPECT_EQ(Spec(fake)["holderIdentity"], "other");
}

// Both candidates read the expired lease; `fast` writes first; `slow`'s
// write carries the version it read, so the server answers 409 and slow
// does not believe it leads.
TEST(LeaderElectionTest, OfTwoCandidatesRacingForALeaseOnlyOneWins) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("old", 30s));
  InterposedClient slow_client(&fake);
  ManualClock clock;
  LeaderElector slow(&slow_client, Config("slow"), clock.Get()),
      fast(&fake, Config("fast"), clock.Get());
  // Both have watched the lease go unrenewed for longer than its duration.
  EXPECT_FALSE(slow.TryAcquireOrRenew());
  EXPECT_FALSE(fast.TryAcquireOrRenew());
  clock.now += 16s;
  bool fast_won = false;
  slow_client.before_next_put = [&] { fast_won = fast.TryAcquireOrRenew(); };
  EXPECT_FALSE(slow.TryAcquireOrRenew());
  EXPECT_TRUE(fast_won);
  EXPECT_EQ(Spec(fake)["holderIdentity"], "fast");
  EXPECT_EQ(Spec(fake)["leaseTransitions"], 4);
}

TEST(LeaderElectionTest, AFailedWriteIsNotLeadership) {
  FakeKubeClient fake;
  LeaderElector elector(&fake, Config("me"));
  fake.FailNext("POST", kLeaseCollection, 1, 500);
  EXPECT_FALSE(elector.TryAcquireOrRenew());
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  fake.FailNext("PUT", kLease, 1, 409);
  EXPECT_FALSE(elector.TryAcquireOrRenew());
  fake.FailNext("GET", kLease, 1, 0);
  EXPECT_FALSE(elector.TryAcquireOrRenew());
}

TEST(LeaderElectionTest, AwaitLeadershipWaitsForTheLeaseToExpire) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", 0s, /*duration_s=*/1));
  LeaderElector elector(&fake, Config("me"));
  std::atomic<bool> stop{false};
  const auto start = system_clock::now();
  ASSERT_TRUE(elector.AwaitLeadership(stop));
  EXPECT_GE(system_clock::now() - start, 900ms);
  EXPECT_EQ(Spec(fake)["holderIdentity"], "me");
}

TEST(LeaderElectionTest, AwaitLeadershipGivesUpOnStop) {
  FakeKubeClient fake;
  fake.Create(kLeaseCollection, HeldLease("other", 0s, /*duration_s=*/3600));
  LeaderElector elector(&fake, Config("me"));
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    Eventually([&] { return fake.RequestsTo("GET", kLease).size() >= 2; });
    stop = true;
  });
  EXPECT_FALSE(elector.AwaitLeadership(stop));
  stopper.join();
}

TEST(LeaderElectionTest, KeepLeadingRidesOutOneFailedRenewal) {
  FakeKubeClient fake;
  LeaderElector elector(&fake, Config("me"));
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  fake.FailNext("PUT", kLease, 1, 409);
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    Eventually([&] { return fake.RequestsTo("PUT", kLease).size() >= 4; });
    stop = true;
  });
  EXPECT_TRUE(elector.KeepLeading(stop)) << "stopped on request, still the leader";
  stopper.join();
  EXPECT_EQ(Spec(fake)["holderIdentity"], "me");
}

TEST(LeaderElectionTest, KeepLeadingEndsWhenAnotherHolderTookTheLease) {
  FakeKubeClient fake;
  LeaderElector elector(&fake, Config("me"));
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  fake.Modify(kLease, {{"spec",
                        {{"holderIdentity", "usurper"},
                         {"renewTime", MicroTime(system_clock::now())},
                         {"leaseDurationSeconds", 3600}}}});
  std::atomic<bool> stop{false};
  EXPECT_FALSE(elector.KeepLeading(stop));
  EXPECT_EQ(Spec(fake)["holderIdentity"], "usurper");
}

TEST(LeaderElectionTest, KeepLeadingEndsWhenEveryRenewalConflicts) {
  FakeKubeClient fake;
  LeaderElector elector(&fake, Config("me"));
  ASSERT_TRUE(elector.TryAcquireOrRenew());
  fake.FailNext("PUT", kLease, 1000000, 409);
  std::atomic<bool> stop{false};
  EXPECT_FALSE(elector.KeepLeading(stop));
}

// The leader is cut off from the API server. A standby takes the lease once
// it expired; by then the old leader must have stopped acting, or both
// reconcile the same jobs at once.
TEST(LeaderElectionTest, ACutOffLeaderStopsBeforeAStandbyCanTakeOver) {
  FakeKubeClient fake;
  InterposedClient leader_client(&fake);
  LeaseConfig config = Config("leader");
  config.lease_duration_s = 3;
  LeaderElector leader(&leader_client, config);
  ASSERT_TRUE(leader.TryAcquireOrRenew());

  std::atomic<bool> stop{false}, leader_stopped{false}, standby_leads{false};
  std::atomic<bool> overlap{false};
  std::thread leading([&] {
    EXPECT_FALSE(leader.KeepLeading(stop));
    leader_stopped = true;
  });
  ASSERT_TRUE(Eventually([&] { return fake.RequestsTo("PUT", kLease).size() >= 3; }));
  leader_client.partitioned = true;
  LeaderElector standby(&fake, Config("standby"));
  std::thread standing_by([&] {
    while (!stop && !standby.TryAcquireOrRenew()) std::this_thread::sleep_for(10ms);
    overlap = !leader_stopped;
    standby_leads = true;
  });
  EXPECT_TRUE(Eventually([&] { return standby_leads && leader_stopped; }));
  stop = true;
  standing_by.join();
  leading.join();
  EXPECT_FALSE(overlap) << "the standby took the lease while the old leader still led";
}

}  // namespace
}  // namespace kubeps::kube
