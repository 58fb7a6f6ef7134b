// kubeps-operator: runs TrainingJobs on Kubernetes.
//
//   kubeps-operator [--kubeconfig=FILE] [--namespace=NS] [--leader-elect]
//                   [--leader-election-namespace=NS] [--metrics-port=8080]
//                   [--server-image=IMAGE] [--agent-image=IMAGE] [--identity=NAME]
//
// It watches TrainingJobs and the pods they own, queues a job whenever one
// of them changes, and reconciles it (kube/job_reconciler.h) with the same
// job logic `kubeps run` uses. With --leader-elect only the replica holding
// the Lease acts. SIGTERM stops it cleanly and hands the Lease over.
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>
#include <thread>

#include "common/logging.h"
#include "common/metrics.h"
#include "operator/kube/informer.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kube_client.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/pod_builder.h"
#include "operator/kube/work_queue.h"

namespace kubeps::kube {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Flags {
  std::string kubeconfig;
  std::string namespace_;  // "" = every namespace
  bool leader_elect = false;
  std::string leader_election_namespace;
  int metrics_port = 8080;
  std::string identity;
  ImageSet images;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name, std::string* out) {
      std::string prefix = std::string("--") + name + "=";
      if (arg.rfind(prefix, 0) != 0) return false;
      *out = arg.substr(prefix.size());
      return true;
    };
    std::string port;
    if (arg == "--leader-elect") flags->leader_elect = true;
    else if (value("kubeconfig", &flags->kubeconfig) || value("namespace", &flags->namespace_) ||
             value("leader-election-namespace", &flags->leader_election_namespace) ||
             value("identity", &flags->identity) || value("server-image", &flags->images.server) ||
             value("agent-image", &flags->images.agent)) {
    } else if (value("metrics-port", &port)) {
      flags->metrics_port = std::atoi(port.c_str());
    } else {
      PrintError("kubeps-operator: unknown argument " + arg);
      return false;
    }
  }
  if (flags->identity.empty()) {
    char host[256] = "kubeps-operator";
    ::gethostname(host, sizeof host);
    flags->identity = std::string(host) + "-" + std::to_string(::getpid());
  }
  if (flags->leader_election_namespace.empty()) {
    const char* pod_namespace = std::getenv("POD_NAMESPACE");
    flags->leader_election_namespace = pod_namespace ? pod_namespace : "kubeps-system";
  }
  return true;
}

std::string Collection(const std::string& prefix, const std::string& namespace_, const std::string& plural) {
  return namespace_.empty() ? prefix + "/" + plural : prefix + "/namespaces/" + namespace_ + "/" + plural;
}

// Every job's reconcile key is "namespace/name"; a pod maps to its job's.
std::string JobKeyOfPod(const nlohmann::json& pod) {
  const auto& meta = pod["metadata"];
  const auto labels = meta.value("labels", nlohmann::json::object());
  return meta.value("namespace", "") + "/" + labels.value(kJobNameLabel, "");
}

class Operator {
 public:
  Operator(KubeClient* client, const Flags& flags, MetricsServer* metrics)
      : flags_(flags),
        metrics_(metrics),
        reconciler_(client, flags.images, metrics),
        jobs_(client, Collection("/apis/kubeps.io/v1alpha1", flags.namespace_, "trainingjobs"), "",
              [this](const nlohmann::json& job) { queue_.Add(ObjectKey(job)); }),
        pods_(client, Collection("/api/v1", flags.namespace_, "pods"), kJobNameLabel,
              [this](const nlohmann::json& pod) { queue_.Add(JobKeyOfPod(pod)); }),
        reconciles_(metrics->Counter("kubeps_operator_reconciles_total", "Reconciles of TrainingJobs")),
        errors_(metrics->Counter("kubeps_operator_reconcile_errors_total", "Reconciles that failed and will be retried")),
        depth_(metrics->Gauge("kubeps_operator_queue_depth", "TrainingJobs waiting to be reconciled")) {}

  // A standby (waiting for the Lease) is healthy and ready; the leader is
  // ready once its caches are synced.
  bool ready() const { return !leading_ || (jobs_.synced() && pods_.synced()); }
  void set_leading(bool leading) { leading_ = leading; }

  // Watches and reconciles until g_stop (or until `lost` says leadership is gone).
  void Run(const std::atomic<bool>& stop) {
    std::thread job_watch([&] { jobs_.Run(stop); });
    std::thread pod_watch([&] { pods_.Run(stop); });
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
  }

 private:
  void Work() {
    while (auto key = queue_.Get()) {
      depth_.Set(static_cast<double>(queue_.Depth()));
      ReconcileKey(*key);
      queue_.Done(*key);
    }
  }

  void ReconcileKey(const std::string& key) {
    const size_t slash = key.find('/');
    const std::string namespace_ = key.substr(0, slash), name = key.substr(slash + 1);
    nlohmann::json job = jobs_.Find(namespace_, name);
    if (job.is_null()) return;  // deleted: its pods go with it (ownerReferences)
    auto pods = pods_.Select([&](const nlohmann::json& pod) { return JobKeyOfPod(pod) == key; });
    reconciles_.Increment();
    ReconcileResult result;
    Status s = reconciler_.Reconcile(job, pods, &result);
    if (!s.ok()) {
      errors_.Increment();
      KLOG_ERROR << "reconcile " << key << ": " << s.message() << "; retrying";
      queue_.AddRateLimited(key);
      return;
    }
    queue_.Forget(key);
    if (result.requeue_after.count() > 0) queue_.AddAfter(key, result.requeue_after);
  }

  // Every 30 s: every job once more (a missed event cannot stall a job),
  // and the jobs-by-phase gauge.
  void Resync(const std::atomic<bool>& stop) {
    int ticks = 0;
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const bool resync_all = ++ticks % 60 == 0;
      std::map<std::string, int> phases = {{"Created", 0}, {"Running", 0}, {"Restarting", 0},
                                           {"Succeeded", 0}, {"Failed", 0}, {"Suspended", 0}};
      auto all = jobs_.Select([](const nlohmann::json&) { return true; });
      for (const auto& job : all) {
        ++phases[job.value("status", nlohmann::json::object()).value("phase", "Created")];
        if (resync_all) queue_.Add(ObjectKey(job));
      }
      for (const auto& [phase, count] : phases) {
        metrics_->Gauge("kubeps_operator_jobs", "TrainingJobs by phase", {{"phase", phase}}).Set(count);
      }
      depth_.Set(static_cast<double>(queue_.Depth()));
    }
  }

  const Flags& flags_;
  MetricsServer* metrics_;
  std::atomic<bool> leading_{false};
  WorkQueue queue_;
  JobReconciler reconciler_;
  Informer jobs_, pods_;
  prometheus::Counter& reconciles_;
  prometheus::Counter& errors_;
  prometheus::Gauge& depth_;
};

}  // namespace
}  // namespace kubeps::kube

int main(int argc, char** argv) {
  using namespace kubeps;
  using namespace kubeps::kube;
  SetLogTag("operator");
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  KubeConfig config;
  if (Status s = LoadConfig(flags.kubeconfig, &config); !s.ok()) {
    KLOG_ERROR << s.message();
    return 2;
  }
  std::unique_ptr<KubeClient> client;
  if (Status s = KubeClient::Create(config, &client); !s.ok()) {
    KLOG_ERROR << s.message();
    return 2;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = MetricsServer::Start("0.0.0.0", flags.metrics_port, {{"component", "operator"}}, &metrics);
      !s.ok()) {
    KLOG_ERROR << s.message();
    return 1;
  }
  KLOG_INFO << "kubeps-operator " << flags.identity << " talking to " << config.server << "; metrics, /healthz and /readyz on :"
            << metrics->port();

  Operator op(client.get(), flags, metrics.get());
  metrics->endpoint()->set_ready_check([&op] { return op.ready(); });

  if (!flags.leader_elect) {
    op.set_leading(true);
    op.Run(g_stop);
    return 0;
  }
  LeaderElector elector(client.get(), LeaseConfig{flags.leader_election_namespace, "kubeps-operator",
                                                  flags.identity});
  if (!elector.AwaitLeadership(g_stop)) return 0;
  op.set_leading(true);
  std::atomic<bool> stop_leading{false};
  std::thread leading([&] {
    bool kept = elector.KeepLeading(g_stop);
    if (!kept) KLOG_ERROR << "lost the lease; stopping so that only the new leader acts";
    stop_leading = true;
  });
  op.Run(stop_leading);
  leading.join();
  if (g_stop) elector.Release();
  return g_stop ? 0 : 1;
}
