// The list+watch cache (operator/kubeclient/informer.h) against the fake API
// server: it lists, watches from the list's resourceVersion, keeps its cache
// current, resumes a dropped watch where it stopped and lists again when the
// server answers 410 Gone.
#include "operator/kubeclient/informer.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube {
namespace {

using fake::Eventually;
using fake::FakeKubeClient;
using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

const std::string kPods = "/api/v1/namespaces/ns/pods";
constexpr auto kTimeout = std::chrono::seconds(30);

json Pod(const std::string& name, json labels = {{"app", "x"}}) {
  return {
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}, {"labels", labels}}}};
}

class InformerTest : public ::testing::Test {
 protected:
  ~InformerTest() override { Stop(); }

  void Start(const std::string& collection = kPods, const std::string& selector = "") {
    informer_ = std::make_unique<Informer>(&fake_, collection, selector,
                                           [this](const json& object) { OnChange(object); });
    thread_ = std::thread([this] { informer_->Run(stop_); });
    ASSERT_TRUE(Eventually([&] { return informer_->synced(); }));
    ASSERT_TRUE(fake_.AwaitOpenWatches(1, kTimeout));
  }
  void Stop() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = false;
      released_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  // Records the handler's calls by object name; blocks while Hold() holds.
  void OnChange(const json& object) {
    std::unique_lock<std::mutex> lock(mutex_);
    seen_.push_back(object["metadata"].value("name", ""));
    ++handled_;
    released_.wait(lock, [&] { return !held_; });
  }
  std::vector<std::string> Seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }
  bool Saw(const std::string& name, int times = 1) {
    auto seen = Seen();
    return std::count(seen.begin(), seen.end(), name) >= times;
  }
  std::vector<std::string> Cached() {
    std::vector<std::string> names;
    for (const auto& object : informer_->Select([](const json&) { return true; }))
      names.push_back(object["metadata"]["name"]);
    return names;
  }
  // From now on the handler blocks (and with it the watch) until Release().
  void Hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = false;
    released_.notify_all();
  }
  int Handled() {
    std::lock_guard<std::mutex> lock(mutex_);
    return handled_;
  }
  std::vector<std::string> WatchVersions() {
    std::vector<std::string> versions;
    for (const auto& r : fake_.RequestsTo("WATCH", "/api/v1"))
      versions.push_back(r.resource_version);
    return versions;
  }
  std::string VersionOf(const std::string& path) {
    return fake_.Object(path)["metadata"]["resourceVersion"];
  }

  FakeKubeClient fake_;
  std::unique_ptr<Informer> informer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable released_;
  bool held_ = false;
  int handled_ = 0;
  std::vector<std::string> seen_;
};

TEST_F(InformerTest, ListsThenWatchesFromTheListsVersion) {
  fake_.Create(kPods, Pod("a"));
  fake_.Create(kPods, Pod("b"));
  const std::string listed_at = fake_.resource_version();
  Start();
  EXPECT_THAT(Cached(), UnorderedElementsAre("a", "b"));
  EXPECT_THAT(Seen(), UnorderedElementsAre("a", "b"));
  EXPECT_THAT(WatchVersions(), ElementsAre(listed_at));
  EXPECT_EQ(informer_->lists(), 1);
  EXPECT_EQ(informer_->Find("ns", "a")["metadata"]["name"], "a");
  EXPECT_TRUE(informer_->Find("ns", "zzz").is_null());
}

TEST_F(InformerTest, WatchEventsUpdateTheCacheAndCallTheHandler) {
  fake_.Create(kPods, Pod("a"));
  Start();
  fake_.Create(kPods, Pod("b"));
  ASSERT_TRUE(Eventually([&] { return !informer_->Find("ns", "b").is_null(); }));
  fake_.Modify(kPods + "/a", {{"metadata", {{"labels", {{"new", "label"}}}}}});
  ASSERT_TRUE(
      Eventually([&] { return informer_->Find("ns", "a")["metadata"]["labels"].contains("new"); }));
  EXPECT_EQ(informer_->Find("ns", "a")["metadata"]["resourceVersion"], VersionOf(kPods + "/a"));
  fake_.Remove(kPods + "/b");
  ASSERT_TRUE(Eventually([&] { return informer_->Find("ns", "b").is_null(); }));
  // Add (list), add (watch), update, delete: each one reaches the handler.
  EXPECT_THAT(Seen(), ElementsAre("a", "b", "a", "b"));
  EXPECT_EQ(informer_->lists(), 1);
}

TEST_F(InformerTest, SelectorAndEveryNamespace) {
  fake_.Create(kPods, Pod("mine"));
  fake_.Create("/api/v1/namespaces/other/pods", Pod("theirs"));
  fake_.Create(kPods, Pod("unlabelled", json::object()));
  Start("/api/v1/pods", "app");
  EXPECT_THAT(Cached(), UnorderedElementsAre("mine", "theirs"));
  fake_.Create(kPods, Pod("later-unlabelled", json::object()));
  fake_.Create("/api/v1/namespaces/third/pods", Pod("later"));
  ASSERT_TRUE(Eventually([&] { return !informer_->Find("third", "later").is_null(); }));
  EXPECT_TRUE(informer_->Find("ns", "later-unlabelled").is_null());
  EXPECT_THAT(fake_.RequestsTo("GET", "/api/v1/pods")[0].path, ::testing::HasSubstr("app"));
}

// A stream the server ends (its timeoutSeconds) is watched again from the
// last version seen, without a new list.
TEST_F(InformerTest, DroppedWatchResumesFromTheLastVersionSeen) {
  Start();
  fake_.Create(kPods, Pod("a"));
  ASSERT_TRUE(Eventually([&] { return Saw("a"); }));
  const std::string last_seen = VersionOf(kPods + "/a");
  fake_.EndWatches();
  ASSERT_TRUE(Eventually([&] { return WatchVersions().size() == 2; }));
  EXPECT_EQ(WatchVersions()[1], last_seen);
  fake_.Create(kPods, Pod("b"));
  ASSERT_TRUE(Eventually([&] { return Saw("b"); }));
  EXPECT_EQ(informer_->lists(), 1);
}

// Bookmarks move the version on past changes to objects the informer does
// not watch, so a resumed watch starts from a version the server still has
// instead of listing everything again.
TEST_F(InformerTest, BookmarksMoveTheResumeVersionOn) {
  Start();
  fake_.Create("/api/v1/namespaces/other/pods", Pod("unwatched"));
  const std::string bookmarked = fake_.resource_version();
  const int delivered = fake_.delivered_events();
  fake_.SendBookmark();
  ASSERT_TRUE(Eventually([&] { return fake_.delivered_events() > delivered; }));
  fake_.CompactHistory();
  fake_.EndWatches();
  ASSERT_TRUE(Eventually([&] { return WatchVersions().size() == 2; }));
  EXPECT_EQ(WatchVersions()[1], bookmarked);
  ASSERT_TRUE(fake_.AwaitOpenWatches(1, kTimeout));
  EXPECT_EQ(informer_->lists(), 1);
}

// 410 Gone: the version the informer would resume from was compacted away
// while it was busy, so it lists again, tells the handler about what changed
// meanwhile (deletions included) and watches from the new list's version.
// Both ways the server can say it: an ERROR event in a 200 stream (the watch
// cache) and an HTTP 410 before the stream starts.
class InformerGoneTest : public InformerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(InformerGoneTest, ListsAgainAndResumes) {
  fake_.set_gone_before_streaming(GetParam());
  fake_.Create(kPods, Pod("deleted-meanwhile"));
  Start();
  Hold();
  fake_.Create(kPods, Pod("seen"));
  ASSERT_TRUE(Eventually([&] { return Saw("seen"); }));  // the watch is stuck in the handler
  fake_.Create(kPods, Pod("created-meanwhile"));
  fake_.Remove(kPods + "/deleted-meanwhile");
  fake_.CompactHistory();
  fake_.EndWatches();
  Release();
  ASSERT_TRUE(Eventually([&] { return informer_->lists() == 2; }));
  ASSERT_TRUE(Eventually([&] { return WatchVersions().size() == 3; }));
  const auto versions = WatchVersions();
  EXPECT_EQ(versions[1], VersionOf(kPods + "/seen")) << "resumed from the last version seen";
  EXPECT_EQ(versions[2], fake_.resource_version()) << "watched from the new list";
  EXPECT_THAT(Cached(), UnorderedElementsAre("seen", "created-meanwhile"));
  EXPECT_TRUE(Saw("created-meanwhile"));
  EXPECT_TRUE(Saw("deleted-meanwhile", 2)) << "the deletion missed while not watching";
  fake_.Create(kPods, Pod("after"));
  ASSERT_TRUE(Eventually([&] { return Saw("after"); }));
}

INSTANTIATE_TEST_SUITE_P(InStreamAndHttp, InformerGoneTest, ::testing::Bool());

TEST_F(InformerTest, ABrokenWatchListsAgain) {
  Start();
  fake_.FailNext("WATCH", kPods, 1, 0);  // the reconnect hits a reset connection
  fake_.EndWatches();
  ASSERT_TRUE(Eventually([&] { return informer_->lists() == 2; }));
  ASSERT_TRUE(fake_.AwaitOpenWatches(1, kTimeout));
  fake_.Create(kPods, Pod("a"));
  ASSERT_TRUE(Eventually([&] { return Saw("a"); }));
}

// A reflector backs off between a failed watch and the next LIST; without it
// an API server that answers 429 or 500 to every watch gets tens of LISTs a
// second from every informer.
TEST_F(InformerTest, AFailingWatchIsRetriedWithGrowingPausesNotAtOnce) {
  Start();
  fake_.FailNext("WATCH", kPods, 1000, 500);
  fake_.EndWatches();
  const int lists_before = informer_->lists();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  // Pauses of 0.8-1.6 s, then 1.6-3.2 s: at most 3 LISTs in 2.5 s.
  EXPECT_LE(informer_->lists() - lists_before, 3);
  EXPECT_GE(informer_->lists() - lists_before, 1) << "it does keep trying";
  // The server recovers: the informer watches again and misses nothing.
  fake_.ClearFailures();
  fake_.Create(kPods, Pod("after"));
  ASSERT_TRUE(Eventually([&] { return Saw("after"); }));
}

// 429: the server turned the watch away unread, and our resourceVersion is
// still good: watch again after a pause, without a LIST that would only add
// to the load of a server that is shedding it.
TEST_F(InformerTest, AThrottledWatchIsRetriedAfterAPauseWithoutListingAgain) {
  Start();
  const int lists_before = informer_->lists();
  const size_t watches_before = fake_.RequestsTo("WATCH", kPods).size();
  fake_.FailNext("WATCH", kPods, 2, 429);
  const auto start = std::chrono::steady_clock::now();
  fake_.EndWatches();
  fake_.Create(kPods, Pod("after"));
  ASSERT_TRUE(Eventually([&] { return Saw("after"); }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(800 + 1600));
  EXPECT_EQ(informer_->lists(), lists_before);
  EXPECT_EQ(fake_.RequestsTo("WATCH", kPods).size(), watches_before + 3);
}

TEST_F(InformerTest, AFailingListIsRetriedAndNotSyncedUntilItWorks) {
  fake_.Create(kPods, Pod("a"));
  fake_.FailNext("GET", kPods, 2, 500);
  Start();
  EXPECT_EQ(fake_.RequestsTo("GET", kPods).size(), 3u);
  EXPECT_EQ(informer_->lists(), 1);
  EXPECT_THAT(Cached(), ElementsAre("a"));
}

TEST_F(InformerTest, NotSyncedBeforeTheFirstList) {
  fake_.FailNext("GET", kPods, 1000, 503);
  informer_ = std::make_unique<Informer>(&fake_, kPods, "", [](const json&) {});
  thread_ = std::thread([this] { informer_->Run(stop_); });
  ASSERT_TRUE(Eventually([&] { return fake_.RequestsTo("GET", kPods).size() >= 2; }));
  EXPECT_FALSE(informer_->synced());
  EXPECT_THAT(Cached(), IsEmpty());
  Stop();  // stops while retrying
}

TEST_F(InformerTest, AKindNotServedIsLookedForAgainSlowlyNotSynced) {
  // A CRD not installed (Kueue's Workloads on a cluster without Kueue): the
  // list is answered 404 again and again; an error and a retry within
  // seconds, each time, would only load the API server and fill the log.
  fake_.FailNext("GET", kPods, 1000, 404);
  informer_ = std::make_unique<Informer>(&fake_, kPods, "", [](const json&) {});
  informer_->MayBeMissing();
  thread_ = std::thread([this] { informer_->Run(stop_); });
  ASSERT_TRUE(Eventually([&] { return fake_.RequestsTo("GET", kPods).size() >= 1; }));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(fake_.RequestsTo("GET", kPods).size(), 1u) << "looked for again in 30 s, not at once";
  EXPECT_FALSE(informer_->synced());
  Stop();  // stops while waiting
}

}  // namespace
}  // namespace kubeps::kube
