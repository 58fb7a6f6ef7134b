// kubeps-operator: runs TrainingJobs on Kubernetes (`--help` lists the flags).
//
// It watches TrainingJobs and the pods they own and reconciles each job with
// the same job logic `kubeps run` uses (kube/manager.h). With --leader-elect
// only the replica holding the Lease acts. SIGTERM stops it cleanly and hands
// the Lease over.
#include <unistd.h>

#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include "common/command_line.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "operator/kube/manager.h"
#include "operator/kubeclient/kube_client.h"
#include "operator/kubeclient/leader_election.h"

namespace kubeps::kube {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

struct Flags {
  std::string kubeconfig;
  bool leader_elect = false;
  std::string leader_election_namespace;
  int metrics_port = 8080;
  std::string identity;
  std::string network_policy_metrics_from = "[]";
  std::string tls_issuer = "auto";
  ManagerOptions manager;
};

void DeclareFlags(CLI::App* app, Flags* flags) {
  app->add_option("--kubeconfig", flags->kubeconfig,
                  "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)");
  app->add_option("--namespace", flags->manager.namespace_,
                  "watch only this namespace (default: every namespace)");
  app->add_flag("--leader-elect", flags->leader_elect,
                "act only while holding the coordination.k8s.io Lease")
      ->capture_default_str();
  app->add_option("--leader-election-namespace", flags->leader_election_namespace,
                  "namespace of the Lease (default: $POD_NAMESPACE, else kubeps-system)");
  app->add_option("--metrics-port", flags->metrics_port, "port of /metrics, /healthz and /readyz")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app->add_option("--identity", flags->identity,
                  "this replica's name in the Lease (default: host-pid)");
  app->add_option("--server-image", flags->manager.objects.images.server,
                  "image of the scheduler and server pods")
      ->capture_default_str();
  app->add_option("--agent-image", flags->manager.objects.images.agent, "image of the worker pods")
      ->capture_default_str();
  app->add_flag("--network-policy", flags->manager.objects.network_policy.enabled,
                "give every job a NetworkPolicy that admits only its own pods")
      ->capture_default_str();
  app->add_option("--network-policy-metrics-from", flags->network_policy_metrics_from,
                  "JSON array of NetworkPolicyPeers admitted to the metrics port (Prometheus, "
                  "this operator)")
      ->check([](const std::string& text) {
        nlohmann::json peers;
        Status s = ParseNetworkPolicyPeers(text, &peers);
        return s.ok() ? std::string() : s.message();
      })
      ->capture_default_str();
  app->add_flag("--tls", flags->manager.objects.tls_by_default,
                "mutual TLS for jobs that do not set spec.security.tls")
      ->capture_default_str();
  app->add_option("--tls-issuer", flags->tls_issuer,
                  "who issues a TLS job's certificates: cert-manager, operator (a CA per job of "
                  "the operator's own), or auto (cert-manager where the cluster serves it)")
      ->check(CLI::IsMember({"auto", kOperatorIssuer, kCertManagerIssuer}))
      ->capture_default_str();
}

// What the flags leave to the environment.
void FillDefaults(Flags* flags) {
  if (flags->identity.empty()) {
    char host[256] = "kubeps-operator";
    ::gethostname(host, sizeof host);
    flags->identity = std::string(host) + "-" + std::to_string(::getpid());
  }
  if (flags->leader_election_namespace.empty()) {
    const char* pod_namespace = std::getenv("POD_NAMESPACE");
    flags->leader_election_namespace = pod_namespace ? pod_namespace : "kubeps-system";
  }
  // The flags' checks have parsed them once already: these cannot fail.
  (void)ParseTlsIssuerChoice(flags->tls_issuer, &flags->manager.objects.tls_issuer);
  (void)ParseNetworkPolicyPeers(flags->network_policy_metrics_from,
                                &flags->manager.objects.network_policy.metrics_from);
}

// Every flag with its default, as JSON: the Helm chart's and the plain
// manifests' tests compare their values with these.
void PrintDefaults(const CLI::App& app) {
  nlohmann::json defaults = nlohmann::json::object();
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_name() == "--help" || option->get_name() == "--print-defaults") continue;
    defaults[option->get_name().substr(2)] = option->get_default_str();
  }
  std::cout << defaults.dump(2) << std::endl;
}

Status Connect(const Flags& flags, std::unique_ptr<KubeClient>* client, std::string* server) {
  KubeConfig config;
  if (Status s = LoadConfig(flags.kubeconfig, &config); !s.ok()) return s;
  *server = config.server;
  return KubeClient::Create(config, client);
}

// Without leader election: act at once until SIGTERM. With it: wait for the
// Lease, act while it is kept, stop the moment it is lost.
int RunManager(const Flags& flags, KubeClient* client, Manager* manager) {
  if (!flags.leader_elect) {
    manager->set_leading(true);
    manager->Run(g_stop);
    return 0;
  }
  LeaderElector elector(
      client, LeaseConfig{flags.leader_election_namespace, "kubeps-operator", flags.identity});
  if (!elector.AwaitLeadership(g_stop)) return 0;
  manager->set_leading(true);
  std::atomic<bool> stop_leading{false};
  std::thread leading([&] {
    if (!elector.KeepLeading(g_stop))
      KLOG_ERROR << "lost the lease; stopping so that only the new leader acts";
    stop_leading = true;
  });
  manager->Run(stop_leading);
  leading.join();
  if (g_stop) elector.Release();
  return g_stop ? 0 : 1;
}

}  // namespace
}  // namespace kubeps::kube

int main(int argc, char** argv) {
  using namespace kubeps;
  using namespace kubeps::kube;
  SetLogTag("operator");
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"kubeps-operator: runs TrainingJobs on Kubernetes"};
  Flags flags;
  DeclareFlags(&app, &flags);
  bool print_defaults = false;
  app.add_flag("--print-defaults", print_defaults, "print every flag's default as JSON and exit");
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
  if (print_defaults) {
    PrintDefaults(app);
    return 0;
  }
  FillDefaults(&flags);

  std::unique_ptr<KubeClient> client;
  std::string server;
  if (Status s = Connect(flags, &client, &server); !s.ok()) {
    KLOG_ERROR << s.message();
    return 2;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = MetricsServer::Start("0.0.0.0", flags.metrics_port, {{"component", "operator"}},
                                      &metrics);
      !s.ok()) {
    KLOG_ERROR << s.message();
    return 1;
  }
  KLOG_INFO << "kubeps-operator " << flags.identity << " talking to " << server
            << "; metrics, /healthz and /readyz on :" << metrics->port();

  Manager manager(client.get(), flags.manager, metrics.get());
  // Not ready while the API server refuses our token: every call fails then.
  KubeClient* api = client.get();
  metrics->endpoint()->set_ready_check(
      [&manager, api] { return manager.ready() && !api->credentials_refused(); });
  return RunManager(flags, client.get(), &manager);
}
