// The operator's manager (operator/kube/manager.h) against the fake API
// server: it watches TrainingJobs, pods and Kueue Workloads, reconciles a job
// when one of them changes, retries a failed reconcile, resyncs, is ready once its caches are,
// and stops cleanly.
#include "operator/kube/manager.h"

#include <future>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/kubeclient/api_path.h"
#include "tests/unit/fakes/fake_kube_client.h"

namespace kubeps::kube {
namespace {

using fake::Eventually;
using fake::FakeKubeClient;
using nlohmann::json;
using namespace std::chrono_literals;

const std::string kJobsPath = CollectionPath(kTrainingJobs, "team-a");
const std::string kPodsPath = CollectionPath(kPods, "team-a");
const std::string kServicesPath = CollectionPath(kServices, "team-a");

json JobManifest(const std::string& name, const std::string& namespace_ = "team-a") {
  return {{"apiVersion", "kubeps.io/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", namespace_}}},
          {"spec",
           {{"dataset", {{"path", "/data"}}},
            {"replicaSpecs", {{"ps", {{"replicas", 1}}}, {"worker", {{"replicas", 1}}}}}}}};
}

class ManagerTest : public ::testing::Test {
 protected:
  ManagerTest() { EXPECT_TRUE(MetricsServer::Start("", -1, {}, &metrics_).ok()); }
  ~ManagerTest() override { Stop(); }

  void Start(ManagerOptions options = {}) {
    manager_ = std::make_unique<Manager>(&fake_, options, metrics_.get());
    manager_->set_leading(true);
    running_ = std::async(std::launch::async, [this] { manager_->Run(stop_); });
  }
  // Stops the manager; false when Run() did not return in time.
  bool Stop() {
    stop_ = true;
    return !running_.valid() || running_.wait_for(60s) == std::future_status::ready;
  }
  // The pods of job `name`, by pod name.
  std::vector<std::string> PodsOf(const std::string& name) {
    std::vector<std::string> names;
    for (const auto& pod : fake_.List(kPodsPath + "?labelSelector=kubeps.io%2Fjob-name%3D" + name))
      names.push_back(pod["metadata"]["name"]);
    return names;
  }
  std::string Phase(const std::string& name) {
    return fake_.Object(kJobsPath + "/" + name).value("status", json::object()).value("phase", "");
  }
  double Value(const std::string& metric, const std::string& label = "") {
    double sum = 0;
    for (const auto& family : metrics_->registry().Collect()) {
      if (family.name != metric) continue;
      for (const auto& m : family.metric) {
        bool matches = label.empty();
        for (const auto& l : m.label) matches = matches || l.value == label;
        if (matches) sum += m.counter.value + m.gauge.value;
      }
    }
    return sum;
  }

  FakeKubeClient fake_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<Manager> manager_;
  std::atomic<bool> stop_{false};
  std::future<void> running_;
};

TEST_F(ManagerTest, ReconcilesAJobAddedAfterItStarted) {
  Start();
  ASSERT_TRUE(fake_.AwaitOpenWatches(3, 30s)) << "one watch each for jobs, pods and Workloads";
  EXPECT_TRUE(manager_->ready());
  fake_.Create(kJobsPath, JobManifest("mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("mnist").size() == 3; }));
  ASSERT_TRUE(Eventually([&] { return !Phase("mnist").empty(); }));
  EXPECT_GE(Value("kubeps_operator_reconciles_total"), 1);
  EXPECT_EQ(Value("kubeps_operator_reconcile_errors_total"), 0);
  EXPECT_TRUE(Stop());
}

TEST_F(ManagerTest, ReconcilesJobsThatExistedBeforeItStarted) {
  ASSERT_FALSE(fake_.Create(kJobsPath, JobManifest("early")).is_null());
  ASSERT_FALSE(
      fake_.Create(CollectionPath(kTrainingJobs, "team-b"), JobManifest("elsewhere", "team-b"))
          .is_null());
  Start();
  ASSERT_TRUE(Eventually([&] { return PodsOf("early").size() == 3; }));
  ASSERT_TRUE(Eventually([&] { return fake_.List(CollectionPath(kPods, "team-b")).size() == 3; }))
      << "every namespace is watched by default";
}

TEST_F(ManagerTest, WatchesOnlyItsNamespaceWhenGivenOne) {
  ManagerOptions options;
  options.namespace_ = "team-a";
  fake_.Create(CollectionPath(kTrainingJobs, "team-b"), JobManifest("elsewhere", "team-b"));
  Start(options);
  fake_.Create(kJobsPath, JobManifest("mine"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("mine").size() == 3; }));
  EXPECT_TRUE(fake_.List(CollectionPath(kPods, "team-b")).empty());
  for (const auto& watch : fake_.RequestsTo("WATCH", "/")) {
    EXPECT_THAT(watch.path, ::testing::HasSubstr("/namespaces/team-a/"));
  }
}

// A pod's change reaches its job: a failed worker is replaced.
TEST_F(ManagerTest, APodChangeReconcilesItsJob) {
  Start();
  fake_.Create(kJobsPath, JobManifest("mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("mnist").size() == 3; }));
  for (const auto& pod : PodsOf("mnist"))
    fake_.SetStatus(kPodsPath + "/" + pod, {{"phase", "Running"}});
  ASSERT_TRUE(Eventually([&] { return Phase("mnist") == "Running"; }));
  const auto failed_at = std::chrono::steady_clock::now();
  fake_.SetStatus(kPodsPath + "/mnist-worker-0",
                  {{"phase", "Failed"},
                   {"containerStatuses",
                    {{{"name", "worker"}, {"state", {{"terminated", {{"exitCode", 1}}}}}}}}});
  ASSERT_TRUE(
      Eventually([&] { return !fake_.Object(kPodsPath + "/mnist-worker-0-r1").is_null(); }));
  // A running job is also looked at every 5 s; the pod's own event is faster.
  EXPECT_LT(std::chrono::steady_clock::now() - failed_at, 4s)
      << "the pod's change did not reach its job; the periodic requeue did";
  EXPECT_TRUE(Eventually([&] { return Value("kubeps_operator_replica_restarts_total") == 1; }));
}

// The job's pods go with it (garbage collection); the manager must not make
// them again for a job that is gone.
TEST_F(ManagerTest, ADeletedJobsPodsAreNotMadeAgain) {
  Start();
  fake_.Create(kJobsPath, JobManifest("gone"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("gone").size() == 3; }));
  fake_.Remove(kJobsPath + "/gone");
  // The jobs' watch is ordered: once a later job's pods exist, the manager's
  // cache has seen the deletion.
  fake_.Create(kJobsPath, JobManifest("after"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("after").size() == 3; }));
  EXPECT_EQ(fake_.CollectGarbage(), 6) << "3 pods, 2 Services, 1 Secret";
  // So is the pods' watch: once the later job's pods run, the deletions
  // before them were handled.
  for (const auto& pod : PodsOf("after")) {
    fake_.SetStatus(kPodsPath + "/" + pod, {{"phase", "Running"}});
  }
  ASSERT_TRUE(Eventually([&] { return Phase("after") == "Running"; }));
  EXPECT_TRUE(PodsOf("gone").empty());
}

// A queued job waits for Kueue without reading its Workload again and
// again: Kueue's admission, a change to the Workload, starts it at once.
// With either version of Kueue's API the cluster serves: v1beta1 (the fake
// answers no discovery), or v1beta2 alone, as Kueue 0.20 serves it.
class ManagerKueueTest : public ManagerTest, public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(KueueVersions, ManagerKueueTest, ::testing::Values("v1beta1", "v1beta2"));

TEST_P(ManagerKueueTest, AWorkloadsChangeReconcilesItsQueuedJob) {
  const std::string version = GetParam();
  if (version == "v1beta2") {
    const json served = {{"groupVersion", "kueue.x-k8s.io/v1beta2"}, {"version", "v1beta2"}};
    fake_.ServeDiscovery(
        "/apis/kueue.x-k8s.io",
        {{"kind", "APIGroup"}, {"versions", {served}}, {"preferredVersion", served}});
    json resources = json::array();
    for (const char* kind : {"workloads", "resourceflavors", "workloadpriorityclasses"})
      resources.push_back({{"name", kind}});
    fake_.ServeDiscovery("/apis/kueue.x-k8s.io/v1beta2",
                         {{"kind", "APIResourceList"}, {"resources", resources}});
  }
  ManagerOptions options;
  options.resync_period = 1h;  // no resync to stand in for a missed change
  Start(options);
  json job = JobManifest("queued");
  job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-queue"}};
  fake_.Create(kJobsPath, job);
  const std::string workloads =
      CollectionPath(Resource{"kueue.x-k8s.io", version, "workloads"}, "team-a");
  ASSERT_TRUE(Eventually([&] { return fake_.List(workloads).size() == 1; }));
  ASSERT_TRUE(Eventually([&] { return Phase("queued") == "Suspended"; }));
  const std::string workload =
      workloads + "/" + fake_.List(workloads)[0]["metadata"]["name"].get<std::string>();
  // Once the passes the job's creation set off are done (its status write
  // comes back as a change: under load, after the phase is seen), no pass
  // reads the workload but for a change.
  size_t reads = fake_.RequestsTo("GET", workload).size();
  for (size_t before = reads + 1; reads != before;) {
    before = reads;
    std::this_thread::sleep_for(1s);
    reads = fake_.RequestsTo("GET", workload).size();
  }
  std::this_thread::sleep_for(5s);
  EXPECT_LE(fake_.RequestsTo("GET", workload).size(), reads + 1) << "looked at every 2 s";

  fake_.Create("/apis/kueue.x-k8s.io/" + version + "/resourceflavors",
               {{"metadata", {{"name", "default"}}}, {"spec", json::object()}});
  json assignments = json::array();
  for (const char* pod_set : {"scheduler", "server", "worker"})
    assignments.push_back({{"name", pod_set}, {"flavors", {{"cpu", "default"}}}});
  const json admitted = {
      {"admission", {{"clusterQueue", "cq"}, {"podSetAssignments", assignments}}},
      {"conditions",
       {{{"type", "QuotaReserved"}, {"status", "True"}, {"reason", "QuotaReserved"}},
        {{"type", "Admitted"}, {"status", "True"}, {"reason", "Admitted"}}}}};
  fake_.SetStatus(workload, admitted);
  EXPECT_TRUE(Eventually([&] { return PodsOf("queued").size() == 3; }));
}

TEST_F(ManagerTest, AFailedReconcileIsRetried) {
  fake_.FailNext("POST", kServicesPath, 2, 500);
  Start();
  fake_.Create(kJobsPath, JobManifest("mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("mnist").size() == 3; }));
  EXPECT_EQ(Value("kubeps_operator_reconcile_errors_total"), 2);
}

TEST_F(ManagerTest, ResyncLooksAtEveryJobAgainAndCountsThemByPhase) {
  ManagerOptions options;
  options.resync_period = 200ms;
  fake_.Create(kJobsPath, JobManifest("mnist"));
  Start(options);
  ASSERT_TRUE(Eventually([&] { return Phase("mnist") == "Created"; }));
  const double before = Value("kubeps_operator_reconciles_total");
  ASSERT_TRUE(Eventually([&] { return Value("kubeps_operator_reconciles_total") >= before + 3; }));
  EXPECT_TRUE(Eventually([&] { return Value("kubeps_operator_jobs", "Created") == 1; }));
}

TEST_F(ManagerTest, ALeaderIsReadyOnlyOnceItsCachesAreSynced) {
  const std::string every_job = CollectionPath(kTrainingJobs, "");
  fake_.FailNext("GET", every_job, 3, 503);  // the list is retried after 0.2, 0.4, 0.8 s
  Start();
  ASSERT_TRUE(Eventually([&] { return fake_.RequestsTo("GET", every_job).size() >= 2; }));
  EXPECT_FALSE(manager_->ready());
  ASSERT_TRUE(Eventually([&] { return manager_->ready(); }));
  Manager standby(&fake_, {}, metrics_.get());
  EXPECT_TRUE(standby.ready()) << "a standby waiting for the lease is ready";
}

TEST_F(ManagerTest, StopsWhileAJobIsRunning) {
  Start();
  fake_.Create(kJobsPath, JobManifest("mnist"));
  ASSERT_TRUE(Eventually([&] { return PodsOf("mnist").size() == 3; }));
  ASSERT_TRUE(Stop());
  EXPECT_EQ(fake_.open_watches(), 0);
}

}  // namespace
}  // namespace kubeps::kube
