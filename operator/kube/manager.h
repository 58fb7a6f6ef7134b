// The operator's manager, in controller-runtime's sense: it watches
// TrainingJobs, the pods they own and their Kueue Workloads (three
// informers; the last only while the cluster serves the kind), queues a job
// whenever one of them changes, reconciles it (job_reconciler.h) with the same job
// logic `kubeps run` uses, resyncs every job every 30 s so that a missed
// event cannot stall one, and exports the operator's metrics.
//
//   Manager manager(client, options, metrics);
//   manager.Run(stop);          // until `stop` turns true
//
// Thread-safe: ready() may be called from any thread (the /readyz probe)
// while Run() works; Run() is called once.
#ifndef KUBEPS_OPERATOR_KUBE_MANAGER_H_
#define KUBEPS_OPERATOR_KUBE_MANAGER_H_

#include <atomic>
#include <chrono>
#include <map>
#include <string>

#include "common/metrics.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/informer.h"
#include "operator/kubeclient/kube_client.h"
#include "operator/kubeclient/work_queue.h"

namespace kubeps::kube {

struct ManagerOptions {
  std::string namespace_;  // "" = every namespace
  JobObjectOptions objects;
  std::chrono::milliseconds resync_period{30000};
};

class Manager {
 public:
  Manager(KubeClient* client, ManagerOptions options, MetricsServer* metrics);

  // A standby (waiting for the Lease) is ready; the leader is ready once its
  // caches are synced.
  bool ready() const { return !leading_ || (jobs_.synced() && pods_.synced()); }
  void set_leading(bool leading) { leading_ = leading; }

  // Watches and reconciles until `stop`.
  void Run(const std::atomic<bool>& stop);

 private:
  void Work();
  void ReconcileKey(const std::string& key);
  void Resync(const std::atomic<bool>& stop);

  const ManagerOptions options_;
  MetricsServer* metrics_;
  std::atomic<bool> leading_{false};
  WorkQueue queue_;
  JobReconciler reconciler_;
  std::map<std::string, std::string> uid_of_key_;  // the reconcile worker's own
  Informer jobs_, pods_, workloads_;
  prometheus::Counter& reconciles_;
  prometheus::Counter& errors_;
  prometheus::Gauge& depth_;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_MANAGER_H_
