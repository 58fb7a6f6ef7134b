// What a node (scheduler, server, worker) learns about itself and its job
// from its environment. The operator and the local runner set the same
// variables, as MXNet's launcher sets DMLC_*; see NodeEnv below.
#ifndef KUBEPS_COMMON_NODE_CONFIG_H_
#define KUBEPS_COMMON_NODE_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace kubeps {

// Names of the environment variables, in one place for the runner, the
// operator and the nodes.
namespace env {
inline constexpr const char* kRole = "KUBEPS_ROLE";                  // scheduler | server | worker
inline constexpr const char* kJobName = "KUBEPS_JOB_NAME";
inline constexpr const char* kJob = "KUBEPS_JOB";                    // the canonical manifest (JSON)
inline constexpr const char* kNodeId = "KUBEPS_NODE_ID";             // stable identity (pod name)
inline constexpr const char* kSchedulerAddr = "KUBEPS_SCHEDULER_ADDR";
inline constexpr const char* kPodIp = "KUBEPS_POD_IP";               // address to listen on and report
inline constexpr const char* kPort = "KUBEPS_PORT";                  // gRPC port, 0 = any free port
inline constexpr const char* kMetricsPort = "KUBEPS_METRICS_PORT";   // 0 = any free port
inline constexpr const char* kNumServers = "KUBEPS_NUM_SERVERS";
inline constexpr const char* kNumWorkers = "KUBEPS_NUM_WORKERS";
inline constexpr const char* kResendTimeoutMs = "KUBEPS_RESEND_TIMEOUT_MS";
inline constexpr const char* kMaxResends = "KUBEPS_MAX_RESENDS";
inline constexpr const char* kTokenFile = "KUBEPS_TOKEN_FILE";
inline constexpr const char* kRunDir = "KUBEPS_RUN_DIR";             // local runner: where ports are published
inline constexpr const char* kBlasThreads = "KUBEPS_BLAS_THREADS";
inline constexpr const char* kCheckpointDir = "KUBEPS_CHECKPOINT_DIR";  // servers: <dir>/<node id>/
}  // namespace env

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
  std::string token;   // read from the token file; empty = no check
  std::string run_dir;
  int blas_threads = 1;
  std::string checkpoint_dir;
};

// Reads the variables above. Command-line overrides (--name=value, same
// names lowercased without the prefix, e.g. --scheduler_addr) win over the
// environment. Errors name the variable and the bad value.
Status LoadNodeConfig(int argc, char** argv, NodeConfig* config);

// Writes "<run_dir>/<node_id>.ports" with the node's gRPC and metrics ports
// so the local runner can find them; no-op without a run dir.
void PublishPorts(const NodeConfig& config, int grpc_port, int metrics_port);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_NODE_CONFIG_H_
