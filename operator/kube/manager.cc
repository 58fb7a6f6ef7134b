#include "operator/kube/manager.h"

#include <map>
#include <thread>

#include "api/training_job_status.h"
#include "common/logging.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {
namespace {

// Every job's reconcile key is "namespace/name"; a pod or a Workload maps to
// its job's by the job-name label the operator gives both.
std::string JobKeyOf(const nlohmann::json& owned) {
  const auto& meta = owned["metadata"];
  const auto labels = meta.value("labels", nlohmann::json::object());
  return meta.value("namespace", "") + "/" + labels.value(kJobNameLabel, "");
}

}  // namespace

Manager::Manager(KubeClient* client, ManagerOptions options, MetricsServer* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      reconciler_(client, options_.objects, metrics),
      jobs_(client, CollectionPath(kTrainingJobs, options_.namespace_), "",
            [this](const nlohmann::json& job) { queue_.Add(ObjectKey(job)); }),
      pods_(client, CollectionPath(kPods, options_.namespace_), kJobNameLabel,
            [this](const nlohmann::json& pod) { queue_.Add(JobKeyOf(pod)); }),
      workloads_(client, CollectionPath(reconciler_.kueue_api().Workloads(), options_.namespace_),
                 kJobNameLabel,
                 [this](const nlohmann::json& workload) { queue_.Add(JobKeyOf(workload)); }),
      reconciles_(
          metrics->Counter("kubeps_operator_reconciles_total", "Reconciles of TrainingJobs")),
      errors_(metrics->Counter("kubeps_operator_reconcile_errors_total",
                               "Reconciles that failed and will be retried")),
      depth_(
          metrics->Gauge("kubeps_operator_queue_depth", "TrainingJobs waiting to be reconciled")) {
  // Kueue may be installed later, or never, and serves v1beta2 from 0.15.
  workloads_.MayBeMissing([this] {
    KueueApi& kueue = reconciler_.kueue_api();
    kueue.Discover();
    return CollectionPath(kueue.Workloads(), options_.namespace_);
  });
  reconciler_.WatchWorkloadsWith([this] { return workloads_.synced(); });
}

void Manager::Run(const std::atomic<bool>& stop) {
  std::thread job_watch([&] { jobs_.Run(stop); });
  std::thread pod_watch([&] { pods_.Run(stop); });
  std::thread workload_watch([&] { workloads_.Run(stop); });
  std::thread resync([&] { Resync(stop); });
  while (!stop && !ready()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  KLOG_INFO << "caches synced; reconciling";
  std::thread worker([&] { Work(); });
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  queue_.ShutDown();
  worker.join();
  resync.join();
  job_watch.join();
  pod_watch.join();
  workload_watch.join();
}

void Manager::Work() {
  while (auto key = queue_.Get()) {
    depth_.Set(static_cast<double>(queue_.Depth()));
    ReconcileKey(*key);
    queue_.Done(*key);
  }
}

void Manager::ReconcileKey(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string namespace_ = key.substr(0, slash), name = key.substr(slash + 1);
  nlohmann::json job = jobs_.Find(namespace_, name);
  // A job deleted, or deleted and applied again (a new uid): forget what was
  // kept in memory about the old one. Its pods go with it (ownerReferences).
  const std::string uid = job.is_null() ? "" : job["metadata"].value("uid", "");
  if (auto known = uid_of_key_.find(key); known != uid_of_key_.end() && known->second != uid) {
    reconciler_.Forget(known->second);
    uid_of_key_.erase(known);
  }
  if (job.is_null()) return;
  uid_of_key_[key] = uid;
  auto pods = pods_.Select([&](const nlohmann::json& pod) { return JobKeyOf(pod) == key; });
  reconciles_.Increment();
  ReconcileResult result;
  if (Status s = reconciler_.Reconcile(job, pods, &result); !s.ok()) {
    errors_.Increment();
    KLOG_ERROR << "reconcile " << key << ": " << s.message() << "; retrying";
    queue_.AddRateLimited(key);
    return;
  }
  queue_.Forget(key);
  if (result.requeue_after.count() > 0) queue_.AddAfter(key, result.requeue_after);
}

// Every resync period: every job once more (a missed event cannot stall a
// job); every half second: the jobs-by-phase gauge.
void Manager::Resync(const std::atomic<bool>& stop) {
  constexpr std::chrono::milliseconds kTick(500);
  auto next_resync = std::chrono::steady_clock::now() + options_.resync_period;
  while (!stop) {
    std::this_thread::sleep_for(kTick);
    const bool resync_all = std::chrono::steady_clock::now() >= next_resync;
    if (resync_all) next_resync += options_.resync_period;
    std::map<std::string, int> phases;
    for (api::JobPhase phase : api::kJobPhases) phases[api::ToString(phase)] = 0;
    for (const auto& job : jobs_.Select([](const nlohmann::json&) { return true; })) {
      ++phases[job.value("status", nlohmann::json::object()).value("phase", "Created")];
      if (resync_all) queue_.Add(ObjectKey(job));
    }
    for (const auto& [phase, count] : phases) {
      metrics_->Gauge("kubeps_operator_jobs", "TrainingJobs by phase", {{"phase", phase}})
          .Set(count);
    }
    depth_.Set(static_cast<double>(queue_.Depth()));
  }
}

}  // namespace kubeps::kube
