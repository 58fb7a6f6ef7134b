// The pod-environment codec: how a replica learns who it is and which job it
// belongs to, as MXNet's launcher tells its nodes through DMLC_*. The job
// logic encodes (EncodePodEnv: the local runner and the operator call the
// same function, so a node cannot tell them apart); every node decodes
// (AddNodeFlags + FinishNodeConfig, DecodeJob). A flag (--scheduler-addr=x)
// wins over its variable (KUBEPS_SCHEDULER_ADDR); `--help` lists both with the
// default. Stateless functions: safe from any thread.
#ifndef KUBEPS_API_POD_ENV_CODEC_H_
#define KUBEPS_API_POD_ENV_CODEC_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/training_job.h"
#include "common/job_token.h"
#include "common/optimizer.h"
#include "common/status.h"
#include "common/termination_message.h"
#include "common/transport_security.h"

namespace CLI {
class App;
}

namespace kubeps::api {

// The variables' names, in one place for the runner, the operator and the nodes.
namespace env {
inline constexpr const char* kRole = "KUBEPS_ROLE";  // scheduler | server | worker | local
inline constexpr const char* kJobName = "KUBEPS_JOB_NAME";
inline constexpr const char* kJob = "KUBEPS_JOB";         // the canonical manifest (JSON)
inline constexpr const char* kNodeId = "KUBEPS_NODE_ID";  // stable identity (pod name)
inline constexpr const char* kSchedulerAddr = "KUBEPS_SCHEDULER_ADDR";
inline constexpr const char* kPodIp = "KUBEPS_POD_IP";  // address to listen on and report
inline constexpr const char* kPort = "KUBEPS_PORT";     // gRPC port, 0 = any free port
inline constexpr const char* kMetricsPort = "KUBEPS_METRICS_PORT";  // 0 = any free port
inline constexpr const char* kNumServers = "KUBEPS_NUM_SERVERS";
inline constexpr const char* kNumWorkers = "KUBEPS_NUM_WORKERS";
inline constexpr const char* kResendTimeoutMs = "KUBEPS_RESEND_TIMEOUT_MS";
inline constexpr const char* kMaxResends = "KUBEPS_MAX_RESENDS";
inline constexpr const char* kTokenFile = "KUBEPS_TOKEN_FILE";
// Mutual TLS: the directory of ca.crt, tls.crt and tls.key (a TLS Secret).
inline constexpr const char* kTlsDir = "KUBEPS_TLS_DIR";
inline constexpr const char* kRunDir = "KUBEPS_RUN_DIR";  // local runner: where ports are published
inline constexpr const char* kBlasThreads = "KUBEPS_BLAS_THREADS";
// The cores a worker's or a server's container requested, rounded up: the
// downward API's requests.cpu, 0 where it requested none. Set by the operator.
inline constexpr const char* kCpuRequest = "KUBEPS_CPU_REQUEST";
// A built-in model's worker in sync mode: "0" pushes every gradient after the
// backward pass, anything else (or unset) each layer's during it, small ones
// together (docs/overlap.md).
inline constexpr const char* kOverlap = "KUBEPS_OVERLAP";
// With overlap: the least a request of the backward pass holds, in bytes
// (default 1 MiB; 0: every layer on its own).
inline constexpr const char* kBucketBytes = "KUBEPS_BUCKET_BYTES";
inline constexpr const char* kCheckpointDir = "KUBEPS_CHECKPOINT_DIR";  // servers: <dir>/<node id>/
// This run of the job: on Kubernetes the TrainingJob's UID, a new one for
// every `kubeps run`. With spec.checkpoint.resume false a server deletes the
// checkpoints another run left, and keeps its own run's when it restarts.
inline constexpr const char* kRunId = "KUBEPS_RUN_ID";
// Servers: how long another job's process may hold a starting server's
// checkpoint folder before the server fails (a pod of a deleted job that
// shares the path may still be stopping): the server pods' grace period and
// 10 s on Kubernetes; a few seconds for `kubeps run`, which stops its
// processes within half a second.
inline constexpr const char* kHolderGraceSeconds = "KUBEPS_HOLDER_GRACE_SECONDS";
// The Kubernetes node a pod runs on (the downward API's spec.nodeName): a
// server's checkpoint folder record names it, for whoever finds the folder
// held by a process on a node cut off from the cluster. Unset locally.
inline constexpr const char* kNodeName = "KUBEPS_NODE_NAME";
// Workers serving a training process (kubeps-agent --serve): the directory
// both containers mount (docs/sidecar-protocol.md).
// A file where a replica writes why it ended, one line "Reason: message"
// (common/termination_message.h); unset on Kubernetes, where it is
// /dev/termination-log.
inline constexpr const char* kTerminationLog = kTerminationLogVariable;
inline constexpr const char* kSocketDir = "KUBEPS_SOCKET_DIR";
// An elastic job's scheduler: the file that holds how many workers the job
// should have (kubeps scale writes it in the run folder; on Kubernetes it is
// the scheduler pod's annotation kubeps.io/desired-workers, through a
// downwardAPI volume, which the kubelet refreshes).
inline constexpr const char* kDesiredWorkersFile = "KUBEPS_DESIRED_WORKERS_FILE";
}  // namespace env

// What a node (scheduler, server, worker) knows about itself, decoded.
struct NodeConfig {
  std::string role;
  std::string job_name;
  std::string job_json;
  std::string node_id;
  std::string scheduler_address;
  std::string pod_ip = "127.0.0.1";
  int port = 0;
  int metrics_port = 0;
  int num_servers = 0;
  int num_workers = 0;
  int resend_timeout_ms = 1000;
  int max_resends = 10;
  std::string token_file;
  std::shared_ptr<JobToken> token;  // from token_file by FinishNodeConfig; None() = no check
  std::string tls_dir;
  // From tls_dir by FinishNodeConfig; Insecure() = plain TCP.
  std::shared_ptr<const TransportSecurity> security;
  std::string run_dir;
  int blas_threads = 0;  // 0: as many as the cores the process may use (common/usable_cores.h)
  int cpu_request = -1;  // -1: not given (a local run)
  std::string checkpoint_dir;
  std::string run_id;
  int holder_grace_seconds = 40;
  std::string node_name;
  std::string socket_dir;
  std::string desired_workers_file;
};

// The variables that say who a replica is and where its scheduler is: the
// caller adds what only it knows (pod IP, ports, token file, run folder).
std::map<std::string, std::string> EncodePodEnv(const TrainingJob& job, const std::string& role,
                                                const std::string& node_id,
                                                const std::string& scheduler_address);

// Declares one flag per variable above on `app`, each reading its variable
// when the flag is absent, with range checks; parsing fills `config`.
void AddNodeFlags(CLI::App* app, NodeConfig* config);
// After parsing: reads the token file and names an anonymous node.
Status FinishNodeConfig(NodeConfig* config);

// The job a node belongs to, from KUBEPS_JOB, by the one parser.
Status DecodeJob(const std::string& job_json, TrainingJob* job);
OptimizerConfig ToOptimizerConfig(const OptimizerSpec& optimizer);

// Writes "<run_dir>/<node_id>.ports" with the node's gRPC and metrics ports,
// atomically, so the local runner can find them; no-op without a run dir.
void PublishPorts(const NodeConfig& config, int grpc_port, int metrics_port);

// "<run_dir>/computing-workers": the ranks that compute an elastic job's
// newest step, as its scheduler publishes them for the local runner, which
// stops a worker scaled away only once it is not one of them (it computes
// until the change step, which may be minutes away). Written atomically;
// no-op without a run dir. Read: nullopt where there is no such list (yet).
inline constexpr const char* kComputingWorkersName = "computing-workers";
void PublishComputingWorkers(const std::string& run_dir, const std::vector<int>& ranks);
std::optional<std::vector<int>> ReadComputingWorkers(const std::string& run_dir);

}  // namespace kubeps::api

#endif  // KUBEPS_API_POD_ENV_CODEC_H_
