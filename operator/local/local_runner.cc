#include "operator/local/local_runner.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <system_error>
#include <thread>

#include "api/pod_env_codec.h"
#include "common/desired_workers.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/usable_cores.h"
#include "operator/controller/job_controller.h"
#include "operator/controller/replica_env.h"
#include "operator/controller/replica_tls.h"
#include "operator/local/local_cluster.h"
#include "operator/local/local_scale.h"

namespace kubeps::local {
namespace {

using controller::JobController;
using controller::JobPhase;
using controller::JobStatus;
using controller::ReplicaLaunch;
using controller::ReplicaName;
using controller::ReplicaRole;

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

// After Ctrl-C the replicas get this long, together, to exit before they
// are killed: the user wants the terminal back within a second. Each exits
// at once on SIGTERM, a server or the scheduler in a few milliseconds.
constexpr int kInterruptGraceMs = 500;
// How often the job is reconciled, and so how soon Ctrl-C is acted on.
constexpr std::chrono::milliseconds kReconcileInterval(100);

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string MakeRunDir(const std::string& requested, const std::string& job_name) {
  if (!requested.empty()) {
    ::mkdir(requested.c_str(), 0700);
    return requested;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp ? tmp : "/tmp") + "/kubeps-" + job_name + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  return ::mkdtemp(buffer.data()) ? std::string(buffer.data()) : "";
}

std::string RandomHex(int bytes) {
  std::random_device device;
  std::string hex(2 * bytes, '0');
  for (int i = 0; i < bytes; ++i) std::snprintf(&hex[2 * i], 3, "%02x", device() & 0xff);
  return hex;
}

// A per-job secret: only the job's own processes can talk to its
// scheduler and shards.
// Created 0600 in one step, so that it is never readable by others, not even
// for a moment (the servers refuse a token file that is).
std::string WriteToken(const std::string& run_dir) {
  const std::string hex = RandomHex(16) + "\n";
  std::string path = run_dir + "/token";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ::fchmod(fd, 0600) != 0 ||
      ::write(fd, hex.data(), hex.size()) != static_cast<ssize_t>(hex.size())) {
    if (fd >= 0) ::close(fd);
    return "";
  }
  ::close(fd);
  return path;
}

// With spec.security.tls: a CA for this run and a certificate per replica,
// each in <run_dir>/tls/<replica>/ as a TLS Secret would hold them. The
// replicas' folders by name; empty without TLS.
Status WriteTlsFiles(const api::TrainingJob& job, const std::string& run_dir,
                     std::map<ReplicaName, std::string>* dirs) {
  if (!job.spec.TlsEnabled(/*by_default=*/false)) return Status::Ok();
  CertificateAndKey ca;
  if (Status s = controller::CreateCaFor(job, &ca); !s.ok()) return s;
  const std::string root = run_dir + "/tls";
  if (::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::Error("cannot create " + root);
  for (const ReplicaName& name : controller::AllReplicas(job)) {
    CertificateAndKey replica;
    if (Status s = controller::IssueFor(ca, job, name, {"localhost"}, &replica); !s.ok()) return s;
    const std::string dir = root + "/" + name.ToString();
    if (Status s = controller::WriteTlsDirectory(dir, ca.certificate_pem, replica); !s.ok())
      return s;
    (*dirs)[name] = dir;
  }
  return Status::Ok();
}

// Threads for a process that computes on `threads` cores. Idle OpenMP
// threads must sleep, not spin: they share the cores with the job's other
// processes and with gRPC's threads (measured: spinning makes a 1-server
// 1-worker MLP job 4x slower). A job's own program may set its own.
std::map<std::string, std::string> ThreadHints(int threads) {
  return {{api::env::kBlasThreads, std::to_string(threads)},
          {"OMP_NUM_THREADS", std::to_string(threads)},
          {"OMP_WAIT_POLICY", "PASSIVE"}};
}

// Whether a built-in model's workers should push each layer's gradients
// during the backward pass. That hides the exchange where the servers find
// CPU the backward pass leaves: cores of their own, as on a cluster, or the
// gaps of a backward pass on several threads (its serial parts and
// barriers). A worker on one BLAS thread keeps its core busy throughout, so
// where the workers' single threads fill every core, an exchange moved into
// the backward pass only takes CPU from it, and its extra requests cost
// more (bench/scaling.py, the CNN's 2 x 2 job: on 2 cores 5% faster with
// the exchange after the pass; on 16, with 8 threads per worker, 4-11%
// faster overlapped on two machines and 2% slower on a third).
bool OverlapPays(int cores, int workers, int worker_threads, int servers) {
  return worker_threads > 1 || cores - workers >= servers;
}

// A sync job's servers update while its workers wait for them, so each may
// split a big part's update over its share of the cores; the scheduler and
// a worker whose agent only serves the job's program keep one thread.
int ServerUpdateThreads(const ReplicaName& name, int cores, const api::TrainingJob& job) {
  if (name.role != ReplicaRole::kServer) return 1;
  return std::max(1, cores / std::max(1, job.spec.ps.replicas));
}

// The environment of a worker's process that computes on its share of the
// cores (a built-in model's agent, or the job's own program): its threads,
// and where a built-in trainer's exchange goes (the agent's, or kubeps-agent
// --connect's as the program; other programs ignore it). A KUBEPS_OVERLAP
// of the runner's own environment reaches the process as it is.
std::map<std::string, std::string> ComputeHints(int cores, int workers, int servers) {
  const int threads = std::max(1, cores / workers);
  std::map<std::string, std::string> hints = ThreadHints(threads);
  if (std::getenv(api::env::kOverlap) == nullptr &&
      !OverlapPays(cores, workers, threads, servers)) {
    hints[api::env::kOverlap] = "0";
  }
  return hints;
}

// The job's program as the first log line names it.
std::string Program(const api::TrainingJob& job) {
  if (!job.spec.brings_own_program()) return "model " + job.spec.model;
  const api::UserContainer& container = *job.spec.user_container;
  std::string command;
  for (const auto* part : {&container.command, &container.args}) {
    for (const std::string& word : *part) command += (command.empty() ? "" : " ") + word;
  }
  return "container " + container.name + ": " + command;
}

// The folder the program runs in: workingDir, relative to the manifest's
// folder (`given`, or the runner's when empty).
std::string ProgramDir(const api::TrainingJob& job, const std::string& given) {
  if (!job.spec.brings_own_program()) return "";
  std::error_code error;
  const std::filesystem::path base =
      given.empty() ? std::filesystem::current_path(error) : std::filesystem::path(given);
  const std::string& working_dir = job.spec.user_container->working_dir;
  if (working_dir.empty()) return base.string();
  return (base / working_dir).lexically_normal().string();  // an absolute workingDir stays
}

// What a pod on Kubernetes would have that a local process has not.
void ExplainLocalDifferences(const api::TrainingJob& job, const std::string& program_dir) {
  const api::UserContainer& container = *job.spec.user_container;
  KLOG_INFO << "each worker runs container " << container.name << "'s command in " << program_dir
            << " beside its kubeps-agent (the image " << container.image << " is not used here)";
  for (const api::EnvVar& var : container.env) {
    if (!var.value_from.is_null()) {
      KLOG_INFO << "env " << var.name << " of container " << container.name
                << " comes from valueFrom, which only Kubernetes resolves: not set here";
    }
  }
  const nlohmann::json& pod_template = job.spec.worker.template_override;
  const nlohmann::json& own = pod_template["spec"]["containers"][container.index];
  if (own.contains("volumeMounts") && !own["volumeMounts"].empty()) {
    KLOG_INFO << "the volumeMounts of container " << container.name
              << " are not mounted here: the program sees this machine's files";
  }
}

// 127.0.0.0/8 or ::1, written as a number (no name: it must be the address
// the replicas report, whatever a resolver says).
bool IsLoopbackAddress(const std::string& host) {
  in_addr v4;
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

void Report(const api::TrainingJob& job, const JobStatus& status) {
  KLOG_INFO << "job " << job.name << " " << controller::ToString(status.phase) << ": "
            << status.message;
}

}  // namespace

int RunLocally(const api::TrainingJob& job, const LocalRunOptions& options) {
  // As a pod's status.podIP: without brackets.
  const std::string host = Unbracketed(options.host);
  if (!IsLoopbackAddress(host)) {
    KLOG_ERROR << "--host " << options.host
               << ": a local run listens on a loopback address only (127.0.0.1, ::1): its "
                  "replicas would otherwise be reachable from the network";
    return 1;
  }
  // First: a Ctrl-C from here on stops the job and exits 130.
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  const std::string run_dir = MakeRunDir(options.run_dir, job.name);
  if (run_dir.empty()) {
    KLOG_ERROR << "cannot create a run folder under $TMPDIR";
    return 1;
  }
  // Every run its own: with spec.checkpoint.resume false, the checkpoints
  // an earlier run left in the same folder are deleted.
  const std::string run_id = RandomHex(16);
  const std::string token_file = WriteToken(run_dir);
  if (token_file.empty()) {
    KLOG_ERROR << "cannot write the job's token into " << run_dir;
    return 1;
  }
  if (Status s = WriteRunFiles(run_dir, job); !s.ok()) {
    KLOG_ERROR << s.message();
    return 1;
  }
  std::map<ReplicaName, std::string> tls_dirs;
  if (Status s = WriteTlsFiles(job, run_dir, &tls_dirs); !s.ok()) {
    KLOG_ERROR << "the job's TLS certificates: " << s.message();
    return 1;
  }
  const int cores = options.cores > 0 ? options.cores : UsableCores();
  // Workers do the math; servers and the scheduler mostly wait. Share the
  // cores among workers so BLAS threads never outnumber them (among as many
  // as the job has when a worker starts: an elastic job's may change).
  int workers = job.spec.worker.replicas;
  const std::string desired_file = run_dir + "/" + kDesiredWorkersName;
  const std::string program_dir = ProgramDir(job, options.program_dir);

  LocalCluster cluster(options.bin_dir, run_dir, /*grace_ms=*/5000, host);
  JobController controller(
      job, &cluster, [&](const ReplicaName& name, const std::string& scheduler) {
        ReplicaLaunch launch{name, controller::ReplicaBinary(name),
                             controller::ReplicaArgs(job, name),
                             controller::ReplicaEnv(job, name, scheduler), std::nullopt};
        // Where a worker runs the job's own program, the program does the
        // math and its agent mostly waits.
        const bool computes = name.role == ReplicaRole::kWorker && !job.spec.brings_own_program();
        const auto compute_hints = ComputeHints(cores, workers, job.spec.ps.replicas);
        launch.env[api::env::kRunDir] = run_dir;
        launch.env[api::env::kRunId] = run_id;
        // Another `kubeps run` stopped (Ctrl-C) has its processes gone
        // within half a second.
        if (name.role == ReplicaRole::kServer) launch.env[api::env::kHolderGraceSeconds] = "2";
        launch.user_process =
            controller::UserProcessOf(job, name, compute_hints,
                                      // kubeps' own variables: who the worker is (the socket folder
                                      // is the cluster's), and the run folder every process of the
                                      // job carries.
                                      launch.env);
        if (launch.user_process) launch.user_process->working_dir = program_dir;
        launch.env[api::env::kPodIp] = host;
        launch.env[api::env::kPort] = "0";
        launch.env[api::env::kMetricsPort] = "0";
        launch.env[api::env::kTokenFile] = token_file;
        if (auto tls = tls_dirs.find(name); tls != tls_dirs.end())
          launch.env[api::env::kTlsDir] = tls->second;
        if (job.spec.checkpoint_path.empty())
          launch.env[api::env::kCheckpointDir] = run_dir + "/checkpoints";
        if (job.spec.elastic.enabled()) launch.env[api::env::kDesiredWorkersFile] = desired_file;
        for (const auto& [key, value] :
             computes ? compute_hints : ThreadHints(ServerUpdateThreads(name, cores, job))) {
          launch.env[key] = value;
        }
        return launch;
      });

  KLOG_INFO << "running job " << job.name << ": 1 scheduler, " << job.spec.ps.replicas
            << " servers, " << job.spec.worker.replicas << " workers ("
            << api::ToString(job.spec.mode) << ", " << Program(job) << "); run folder " << run_dir;
  if (job.spec.brings_own_program()) ExplainLocalDifferences(job, program_dir);
  const auto start = std::chrono::steady_clock::now();
  std::string last_message;
  JobStatus status;
  DesiredWorkersFile desired(job.spec.elastic.enabled() ? desired_file : "");
  for (;;) {
    if (std::optional<DesiredWorkers> wanted = desired.Changed()) {
      KLOG_INFO << "job " << job.name << " scaled to " << FormatDesiredWorkers(*wanted)
                << " workers (it had " << workers << ")";
      workers = wanted->workers;
      controller.SetDesiredWorkers(workers);
    }
    if (job.spec.elastic.enabled()) {
      if (auto computing = api::ReadComputingWorkers(run_dir))
        controller.SetComputingWorkers(*computing);
    }
    if (g_interrupted) {
      KLOG_INFO << "interrupted: stopping every replica of job " << job.name;
      controller.DeleteAll(kInterruptGraceMs);
      return 130;
    }
    status = controller.Reconcile(NowMs());
    if (status.message != last_message) {
      Report(job, status);
      last_message = status.message;
    }
    if (status.finished()) break;
    std::this_thread::sleep_for(kReconcileInterval);
  }
  controller.DeleteAll();  // whatever cleanPodPolicy keeps, no local process outlives the run
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1f", seconds);
  if (status.phase == JobPhase::kSucceeded) {
    KLOG_INFO << "job " << job.name << " succeeded in " << elapsed << " s";
    // A folder of our own making holds nothing the user asked for (logs,
    // ports, and checkpoints a new run would never find): without this,
    // every run leaves one behind under $TMPDIR.
    if (options.run_dir.empty() && !options.keep_run_dir) {
      std::error_code error;
      std::filesystem::remove_all(run_dir, error);
      if (error)
        KLOG_ERROR << "cannot remove the run folder " << run_dir << ": " << error.message();
    }
    return 0;
  }
  KLOG_ERROR << "job " << job.name << " failed after " << elapsed << " s (" << status.reason
             << "): " << status.message << "; the replicas' logs are in the run folder " << run_dir;
  return 1;
}

}  // namespace kubeps::local
