// The fake API server's own contract (tests/unit/fakes/fake_kube_client.h):
// the operator's unit tests lean on it behaving as the real one does.
#include "tests/unit/fakes/fake_kube_client.h"

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::kube::fake {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kPods = "/api/v1/namespaces/ns/pods";

json Pod(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", {{"containers", json::array()}}}};
}

std::string Version(const json& object) { return object["metadata"]["resourceVersion"]; }

// Collects a watch's events on a thread of its own.
class Watcher {
 public:
  Watcher(FakeKubeClient* fake, std::string path, std::string from)
      : thread_([this, fake, path, from] {
          Status s = fake->Watch(
              path, from,
              [this](const WatchEvent& event) {
                std::lock_guard<std::mutex> lock(mutex_);
                events_.push_back(event.type + " " + event.object["metadata"].value("name", "") +
                                  event.object.value("reason", ""));
                return true;
              },
              stop_, &response_);
          EXPECT_TRUE(s.ok()) << s.message();
          ended_ = true;
        }) {}
  ~Watcher() {
    stop_ = true;
    thread_.join();
  }
  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_;
  }
  bool ended() const { return ended_; }
  const Response& response() const { return response_; }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
  std::atomic<bool> stop_{false}, ended_{false};
  Response response_;
  std::thread thread_;
};

TEST(FakeKubeClientTest, CreateGetAndAlreadyExists) {
  FakeKubeClient fake;
  json pod = Pod("a");
  pod["status"] = {{"phase", "Running"}};
  Response r;
  ASSERT_TRUE(fake.Post(kPods, pod, &r).ok());
  EXPECT_EQ(r.code, 201);
  EXPECT_EQ(r.body["metadata"]["namespace"], "ns");
  EXPECT_FALSE(r.body["metadata"].value("uid", "").empty());
  EXPECT_FALSE(r.body.contains("status")) << "status is written through /status only";

  ASSERT_TRUE(fake.Post(kPods, Pod("a"), &r).ok());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(r.body["reason"], "AlreadyExists");
  EXPECT_EQ(r.Describe(), "409 Conflict: pods \"a\" already exists");

  ASSERT_TRUE(fake.Get(kPods + "/b", &r).ok());
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(r.body["reason"], "NotFound");
  ASSERT_TRUE(fake.Delete(kPods + "/b", &r).ok());
  EXPECT_EQ(r.code, 404);

  json other = Pod("c");
  other["metadata"]["namespace"] = "elsewhere";
  ASSERT_TRUE(fake.Post(kPods, other, &r).ok());
  EXPECT_EQ(r.code, 400);
}

TEST(FakeKubeClientTest, StaleResourceVersionIsAConflict) {
  FakeKubeClient fake;
  json pod = fake.Create(kPods, Pod("a"));
  json newer = pod;
  newer["metadata"]["labels"]["x"] = "1";
  Response r;
  ASSERT_TRUE(fake.Put(kPods + "/a", newer, &r).ok());
  ASSERT_EQ(r.code, 200);
  EXPECT_NE(Version(r.body), Version(pod));

  pod["metadata"]["labels"]["x"] = "2";  // still at the old version
  ASSERT_TRUE(fake.Put(kPods + "/a", pod, &r).ok());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(r.body["reason"], "Conflict");
  EXPECT_THAT(r.body["message"].get<std::string>(), HasSubstr("the object has been modified"));
  EXPECT_EQ(fake.Object(kPods + "/a")["metadata"]["labels"]["x"], "1");

  ASSERT_TRUE(fake.Put(kPods + "/missing", Pod("missing"), &r).ok());
  EXPECT_EQ(r.code, 404);
}

TEST(FakeKubeClientTest, StatusSubresourceAndMergePatch) {
  FakeKubeClient fake;
  json pod = fake.Create(kPods, Pod("a"));
  json update = pod;
  update["status"] = {{"phase", "Running"}};
  update["metadata"]["labels"]["ignored"] = "yes";
  Response r;
  ASSERT_TRUE(fake.Put(kPods + "/a/status", update, &r).ok());
  ASSERT_EQ(r.code, 200);
  EXPECT_EQ(r.body["status"]["phase"], "Running");
  EXPECT_FALSE(r.body["metadata"]["labels"].contains("ignored"));

  // The object's own PUT keeps the stored status.
  json replaced = r.body;
  replaced.erase("status");
  ASSERT_TRUE(fake.Put(kPods + "/a", replaced, &r).ok());
  EXPECT_EQ(r.body["status"]["phase"], "Running");

  ASSERT_TRUE(fake.Patch(kPods + "/a", {{"metadata", {{"labels", {{"k", "v"}}}}}}, &r).ok());
  EXPECT_EQ(r.body["metadata"]["labels"]["k"], "v");
  ASSERT_TRUE(fake.Patch(kPods + "/a", {{"metadata", {{"resourceVersion", "1"}}}}, &r).ok());
  EXPECT_EQ(r.code, 409) << "a resourceVersion in a patch is a precondition";

  // A write that changes nothing moves no version.
  const std::string before = fake.resource_version();
  ASSERT_TRUE(fake.Put(kPods + "/a", fake.Object(kPods + "/a"), &r).ok());
  EXPECT_EQ(fake.resource_version(), before);
}

TEST(FakeKubeClientTest, ListsCarryTheVersionAndFilterByLabel) {
  FakeKubeClient fake;
  fake.Create(kPods, Pod("a", {{"app", "x"}}));
  fake.Create(kPods, Pod("b"));
  fake.Create("/api/v1/namespaces/other/pods", Pod("c", {{"app", "y"}}));
  Response r;
  ASSERT_TRUE(fake.Get("/api/v1/pods?labelSelector=app", &r).ok());
  EXPECT_EQ(r.body["metadata"]["resourceVersion"], fake.resource_version());
  ASSERT_EQ(r.body["items"].size(), 2u);
  ASSERT_TRUE(fake.Get(kPods + "?labelSelector=app%3Dx", &r).ok());
  ASSERT_EQ(r.body["items"].size(), 1u);
  EXPECT_EQ(r.body["items"][0]["metadata"]["name"], "a");
  ASSERT_TRUE(fake.Get(kPods + "?labelSelector=%21app", &r).ok());
  ASSERT_EQ(r.body["items"].size(), 1u);
  EXPECT_EQ(r.body["items"][0]["metadata"]["name"], "b");
}

TEST(FakeKubeClientTest, WatchStreamsChangesAfterTheGivenVersion) {
  FakeKubeClient fake;
  fake.Create(kPods, Pod("before"));
  const std::string from = fake.resource_version();
  fake.Create(kPods, Pod("a"));
  fake.Create("/api/v1/namespaces/other/pods", Pod("not-watched"));
  Watcher watcher(&fake, kPods, from);
  ASSERT_TRUE(fake.AwaitOpenWatches(1, std::chrono::seconds(30)));
  fake.Modify(kPods + "/a", {{"metadata", {{"labels", {{"k", "v"}}}}}});
  fake.Remove(kPods + "/a");
  ASSERT_TRUE(Eventually([&] { return watcher.events().size() >= 3; }));
  EXPECT_THAT(watcher.events(), ElementsAre("ADDED a", "MODIFIED a", "DELETED a"));
  fake.EndWatches();
  ASSERT_TRUE(Eventually([&] { return watcher.ended(); }));
  EXPECT_EQ(fake.open_watches(), 0);
}

TEST(FakeKubeClientTest, WatchWithoutVersionStartsWithTheCurrentObjects) {
  FakeKubeClient fake;
  fake.Create(kPods, Pod("a"));
  Watcher watcher(&fake, kPods, "");
  ASSERT_TRUE(Eventually([&] { return watcher.events().size() == 1; }));
  EXPECT_THAT(watcher.events(), ElementsAre("ADDED a"));
}

TEST(FakeKubeClientTest, WatchFromACompactedVersionIsGone) {
  FakeKubeClient fake;
  const std::string from = fake.resource_version();
  fake.Create(kPods, Pod("a"));
  fake.CompactHistory();
  {
    Watcher watcher(&fake, kPods, from);
    ASSERT_TRUE(Eventually([&] { return watcher.ended(); }));
    EXPECT_EQ(watcher.response().code, 200) << "the watch cache answers 410 inside the stream";
    EXPECT_THAT(watcher.events(), ElementsAre("ERROR Expired"));
  }
  fake.set_gone_before_streaming(true);
  Watcher watcher(&fake, kPods, from);
  ASSERT_TRUE(Eventually([&] { return watcher.ended(); }));
  EXPECT_EQ(watcher.response().code, 410);
  EXPECT_THAT(watcher.response().Describe(), HasSubstr("too old resource version"));
  // From the current version the watch is fine.
  Watcher current(&fake, kPods, fake.resource_version());
  ASSERT_TRUE(fake.AwaitOpenWatches(1, std::chrono::seconds(30)));
}

TEST(FakeKubeClientTest, AWatchThatFallsBehindTheWindowIsGone) {
  FakeKubeClient fake;
  fake.set_history_limit(2);
  const std::string from = fake.resource_version();
  fake.Create(kPods, Pod("a"));
  fake.Create(kPods, Pod("b"));
  {
    Watcher within(&fake, kPods, from);
    ASSERT_TRUE(Eventually([&] { return within.events().size() == 2; }));
  }
  fake.Create(kPods, Pod("c"));
  Watcher behind(&fake, kPods, from);
  ASSERT_TRUE(Eventually([&] { return behind.ended(); }));
  EXPECT_THAT(behind.events(), ElementsAre("ERROR Expired"));
}

TEST(FakeKubeClientTest, InjectedFailuresAndTheRequestLog) {
  FakeKubeClient fake;
  fake.FailNext("POST", kPods, 2, 503);
  fake.FailNext("", kPods + "/a", 1, 0);
  Response r;
  ASSERT_TRUE(fake.Post(kPods, Pod("a"), &r).ok());
  EXPECT_EQ(r.code, 503);
  ASSERT_TRUE(fake.Post(kPods + "?dryRun=All", Pod("a"), &r).ok());
  EXPECT_EQ(r.code, 503);
  ASSERT_TRUE(fake.Post(kPods, Pod("a"), &r).ok());
  EXPECT_EQ(r.code, 201);
  EXPECT_FALSE(fake.Get(kPods + "/a", &r).ok()) << "code 0: a transport error";
  ASSERT_TRUE(fake.Get(kPods + "/a", &r).ok());
  EXPECT_EQ(r.code, 200);
  EXPECT_EQ(fake.RequestsTo("POST", kPods).size(), 3u);
  EXPECT_EQ(fake.requests().size(), 5u);
  EXPECT_EQ(fake.requests()[0].body["metadata"]["name"], "a");
}

TEST(FakeKubeClientTest, GarbageCollectionFollowsOwnerReferences) {
  FakeKubeClient fake;
  json owner = fake.Create(kPods, Pod("owner"));
  json owned = Pod("owned");
  owned["metadata"]["ownerReferences"] = {{{"uid", owner["metadata"]["uid"]}}};
  fake.Create(kPods, owned);
  fake.Create(kPods, Pod("free"));
  EXPECT_EQ(fake.CollectGarbage(), 0);
  fake.Remove(kPods + "/owner");
  EXPECT_EQ(fake.CollectGarbage(), 1);
  EXPECT_TRUE(fake.Object(kPods + "/owned").is_null());
  EXPECT_FALSE(fake.Object(kPods + "/free").is_null());
}

}  // namespace
}  // namespace kubeps::kube::fake
