#include "operator/local/local_runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "api/pod_env_codec.h"
#include "common/logging.h"
#include "operator/controller/job_controller.h"
#include "operator/controller/replica_env.h"
#include "operator/local/local_cluster.h"

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

// A per-job secret: only the job's own processes can talk to its
// scheduler and shards.
std::string WriteToken(const std::string& run_dir) {
  std::random_device device;
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", device() & 0xff);
  std::string path = run_dir + "/token";
  std::ofstream out(path);
  out << hex << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

void Report(const api::TrainingJob& job, const JobStatus& status) {
  KLOG_INFO << "job " << job.name << " " << controller::ToString(status.phase) << ": "
            << status.message;
}

}  // namespace

int RunLocally(const api::TrainingJob& job, const LocalRunOptions& options) {
  const std::string run_dir = MakeRunDir(options.run_dir, job.name);
  if (run_dir.empty()) {
    KLOG_ERROR << "cannot create a run folder under $TMPDIR";
    return 1;
  }
  const std::string token_file = WriteToken(run_dir);
  const int cores =
      options.cores > 0 ? options.cores : std::max(1u, std::thread::hardware_concurrency());
  // Workers do the math; servers and the scheduler mostly wait. Share the
  // cores among workers so BLAS threads never outnumber them.
  const int worker_threads = std::max(1, cores / job.spec.worker.replicas);

  LocalCluster cluster(options.bin_dir, run_dir);
  JobController controller(
      job, &cluster, [&](const ReplicaName& name, const std::string& scheduler) {
        ReplicaLaunch launch{name,
                             controller::ReplicaBinary(name),
                             {},
                             controller::ReplicaEnv(job, name, scheduler)};
        const int threads = name.role == ReplicaRole::kWorker ? worker_threads : 1;
        launch.env[api::env::kPodIp] = "127.0.0.1";
        launch.env[api::env::kPort] = "0";
        launch.env[api::env::kMetricsPort] = "0";
        launch.env[api::env::kRunDir] = run_dir;
        launch.env[api::env::kTokenFile] = token_file;
        if (job.spec.checkpoint_path.empty())
          launch.env[api::env::kCheckpointDir] = run_dir + "/checkpoints";
        launch.env[api::env::kBlasThreads] = std::to_string(threads);
        launch.env["OMP_NUM_THREADS"] = std::to_string(threads);
        // Idle OpenMP threads must sleep, not spin: they share the cores with
        // the job's other processes and with gRPC's threads (measured: spinning
        // makes a 1-server 1-worker MLP job 4x slower).
        launch.env["OMP_WAIT_POLICY"] = "PASSIVE";
        return launch;
      });

  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
  KLOG_INFO << "running job " << job.name << ": 1 scheduler, " << job.spec.ps.replicas
            << " servers, " << job.spec.worker.replicas << " workers ("
            << api::ToString(job.spec.mode) << ", model " << job.spec.model << "); run folder "
            << run_dir;
  const auto start = std::chrono::steady_clock::now();
  std::string last_message;
  JobStatus status;
  for (;;) {
    if (g_interrupted) {
      KLOG_INFO << "interrupted: stopping every replica of job " << job.name;
      controller.DeleteAll();
      return 130;
    }
    status = controller.Reconcile(NowMs());
    if (status.message != last_message) {
      Report(job, status);
      last_message = status.message;
    }
    if (status.finished()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  controller.DeleteAll();  // whatever cleanPodPolicy keeps, no local process outlives the run
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1f", seconds);
  if (status.phase == JobPhase::kSucceeded) {
    KLOG_INFO << "job " << job.name << " succeeded in " << elapsed << " s";
    return 0;
  }
  KLOG_ERROR << "job " << job.name << " failed after " << elapsed << " s (" << status.reason
             << "): " << status.message;
  return 1;
}

}  // namespace kubeps::local
