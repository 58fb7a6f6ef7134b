// kubeps-agent: one worker of a TrainingJob (KUBEPS_ROLE=worker), or the
// same model trained in this one process with no parameter servers
// (KUBEPS_ROLE=local, what `kubeps train-local` runs).
//
// A worker registers with the scheduler, gets its rank, loads its data,
// trains against the parameter servers and, as rank 0, reports the test
// accuracy. KUBEPS_DUMP_PARAMS=FILE makes rank 0 write the final parameters
// (raw float32, key order) for exactness tests; KUBEPS_MAX_STEPS=N stops
// after N steps (smoke runs and tests); KUBEPS_TRACE_STEP=N prints the
// timeline of step N (common/step_trace.h).
//
// With --connect, the worker trains the built-in model as a pod's own
// program does: through the pod's `kubeps-agent --serve` (KVWorker::Connect)
// instead of a KV client of its own. It is the user-code path with the
// built-in trainer on top, so the two can be measured against each other
// (bench/sidecar_cost.py); --model and --dataset name what the job, which
// brings this command as its program, does not.
//
// With --serve, a worker trains nothing itself: it registers and serves the
// pod's own training process (PyTorch, C++) over a Unix socket in
// --socket-dir (docs/sidecar-protocol.md); once that process has said finish
// it waits for SIGTERM, as a native sidecar does.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "api/compute_threads.h"
#include "api/models.h"
#include "api/pod_env_codec.h"
#include "api/training_progress.h"
#include "common/batch_work.h"
#include "common/blas_threads.h"
#include "common/command_line.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mutex_checks.h"
#include "common/tensor_memory.h"
#include "common/termination_message.h"
#include "common/usable_cores.h"
#include "worker-agent/kv/kv_worker.h"
#include "worker-agent/kv/segment_file.h"
#include "worker-agent/parameter_store.h"
#include "worker-agent/sidecar/sidecar_server.h"
#include "worker-agent/trainer/cuda/gpu_backend.h"
#include "worker-agent/trainer/evaluate.h"
#include "worker-agent/trainer/fashion_mnist.h"
#include "worker-agent/trainer/model.h"
#include "worker-agent/training_loop.h"

namespace kubeps {
namespace {

// The job's model on the chosen backend: the CPU, one GPU, or G GPUs whose
// gradients NCCL sums before the one push of this pod.
Status MakeModel(const api::TrainingJob& job, std::unique_ptr<trainer::Model>* model) {
  std::string error;
  *model = trainer::MakeModelForBackend(job.spec.model, job.spec.backend, job.spec.gpus_per_worker,
                                        &error);
  if (!*model) return Status::Error("spec.backend/spec.gpusPerWorker: " + error);
  (*model)->Initialize(job.spec.seed);
  return Status::Ok();
}

// `map_values`: the built-in trainer of a sync job reads big tensors where
// the servers on this host keep them (KVOptions::map_values;
// KUBEPS_MAP_VALUES=0 turns it off).
Status ConnectToJob(const api::NodeConfig& config, const api::TrainingJob& job,
                    MetricsServer* metrics, bool map_values, std::unique_ptr<KVWorker>* kv) {
  KVOptions options;
  options.scheduler_address = config.scheduler_address;
  options.node_id = config.node_id;
  options.token_file = config.token_file;
  options.tls_dir = config.tls_dir;
  options.metrics_address = JoinHostPort(config.pod_ip, metrics->port());
  options.resend = ResendPolicy{config.resend_timeout_ms, config.max_resends};
  // A long poll that is lost costs its wait plus the timeout: keep the wait
  // no longer than the timeout.
  options.pull_wait_ms = std::min(options.pull_wait_ms, config.resend_timeout_ms);
  options.placement.big_array_bound = static_cast<uint64_t>(job.spec.big_array_bound);
  options.compression = job.spec.compression;
  options.elastic = job.spec.elastic.enabled();
  options.async = job.spec.mode != api::SyncMode::kSync;
  options.compression_threshold = static_cast<float>(job.spec.compression_threshold);
  options.checkpoint_interval = static_cast<uint64_t>(job.spec.checkpoint_interval_steps);
  // KUBEPS_SHARED_MEMORY=0: every tensor over TCP, even to a server on this host.
  const char* shared_memory = std::getenv("KUBEPS_SHARED_MEMORY");
  options.shared_memory = !(shared_memory && std::string(shared_memory) == "0");
  options.own_host = config.pod_ip;
  const char* map = std::getenv("KUBEPS_MAP_VALUES");
  options.map_values =
      map_values && job.spec.mode == api::SyncMode::kSync && !(map && std::string(map) == "0");
  options.metrics = metrics;
  return KVWorker::Start(options, kv);
}

void WriteParams(const std::string& path, trainer::Model& model) {
  std::ofstream out(path, std::ios::binary);
  for (auto& p : model.parameters()) {
    out.write(reinterpret_cast<const char*>(p.value.data()), p.value.size() * sizeof(float));
  }
}

// Prints the model's test accuracy after training, and returns it.
double ReportAccuracy(trainer::Model& model, const trainer::Dataset& test,
                      const LoopResult& result) {
  double loss = 0;
  const double accuracy = trainer::Evaluate(model, test, 500, &loss);
  char line[200];
  std::snprintf(line, sizeof line,
                "test accuracy %.4f (test loss %.4f) after %llu steps in %.1f s (%.2f steps/sec)",
                accuracy, loss, static_cast<unsigned long long>(result.steps), result.seconds,
                result.steps_per_second);
  std::string summary = line;
  // A worker's (the one-process run waits for nothing): how communication-bound it was.
  if (result.waited_seconds > 0 && result.seconds > 0) {
    std::snprintf(line, sizeof line, ", %.1f%% of it waiting for the exchange",
                  100 * result.waited_seconds / result.seconds);
    summary += line;
  }
  PrintLine(summary);
  return accuracy;
}

// A worker's last words after training to the end: its final figures,
// which outlive its process and its metrics, for the job's status (left
// only where someone reads them: WriteTerminationMessage).
void LeaveTrainingSummary(const LoopResult& result, std::optional<double> test_accuracy) {
  api::TrainingSummary summary;
  summary.step = static_cast<int64_t>(result.steps);
  summary.total_steps = static_cast<int64_t>(result.total_steps);
  if (result.steps_per_second > 0) summary.steps_per_second = result.steps_per_second;
  summary.loss = result.final_loss;
  summary.test_accuracy = test_accuracy;
  WriteTerminationMessage(api::kReasonTrainingFinished, api::FormatTrainingSummary(summary));
}

// Every fatal error ends here: logged, and said in one line with its
// reason as the process's last words (the pod's termination message), which
// the job's condition then carries.
int Fail(const char* reason, const Status& status) {
  KLOG_ERROR << status.message();
  WriteTerminationMessage(reason, status.message());
  return 1;
}

Status LoadConfigAndJob(api::NodeConfig* config, api::TrainingJob* job) {
  if (Status s = api::FinishNodeConfig(config); !s.ok()) return s;
  if (config->role != "local" && config->role != "worker") {
    return Status::Error("kubeps-agent: KUBEPS_ROLE must be worker or local, got \"" +
                         config->role + "\"");
  }
  SetLogTag(config->role == "local" ? "local" : config->node_id);
  return api::DecodeJob(config->job_json, job);
}

// *reason: why it failed, for the termination message.
Status LoadModelAndData(const api::TrainingJob& job, std::unique_ptr<trainer::Model>* model,
                        trainer::FashionMnist* data, const char** reason) {
  *reason = kReasonInvalidConfig;
  if (Status s = MakeModel(job, model); !s.ok()) return s;
  const std::string& path = job.spec.dataset_path;
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    *reason = kReasonDatasetNotFound;
    return Status::Error(
        "spec.dataset.path: " + path +
        (std::filesystem::exists(path, error) ? " is not a folder" : " does not exist") +
        " where this worker runs (on Kubernetes: is the volume holding it "
        "mounted at that path in the worker's pod?)");
  }
  if (Status s = trainer::LoadFashionMnist(path, data); !s.ok()) {
    *reason = kReasonDatasetUnreadable;
    return Status::Error("spec.dataset.path " + path + ": " + s.message());
  }
  return Status::Ok();
}

// How a worker reaches the job: a KV client of its own, or the pod's agent.
enum class KVPath { kInProcess, kThroughSidecar };

// Where this process's parameters live and what share of the work it does.
struct Session {
  std::unique_ptr<KVWorker> kv;  // null in local mode
  std::unique_ptr<ParameterStore> store;
  LoopConfig loop;
};

// A worker's exchange as its environment says (parameter_store.h):
// KUBEPS_OVERLAP=0 sends every tensor after the step (kubeps run sets it
// where the servers compute on the workers' cores: local_runner.cc), and
// KUBEPS_BUCKET_BYTES is the least a request of the backward pass holds.
bool ExchangeAfterTheStep() {
  const char* overlap = std::getenv(api::env::kOverlap);
  return overlap != nullptr && std::string(overlap) == "0";
}

Status ExchangeFromEnvironment(ExchangeOptions* exchange) {
  exchange->overlap = !ExchangeAfterTheStep();
  const char* bucket = std::getenv(api::env::kBucketBytes);
  if (bucket == nullptr) return Status::Ok();
  const std::string_view text(bucket);
  auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), exchange->bucket_bytes);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    return Status::Error(std::string(api::env::kBucketBytes) + "=\"" + bucket +
                         "\": not a number of bytes");
  }
  return Status::Ok();
}

// A worker joins the job (scheduler, rank, shards); the local baseline
// keeps its parameters itself, with the servers' optimizer code and the
// whole global batch.
Status JoinJob(const api::NodeConfig& config, const api::TrainingJob& job, KVPath path,
               MetricsServer* metrics, Session* session) {
  LoopConfig& loop = session->loop;
  loop.epochs = job.spec.epochs;
  loop.seed = job.spec.seed;
  loop.progress_interval_ms = job.spec.progress_interval_ms;
  loop.fail_on_non_finite_loss = job.spec.non_finite != "SkipStep";
  if (const char* max_steps = std::getenv("KUBEPS_MAX_STEPS"))
    loop.max_steps = std::strtoull(max_steps, nullptr, 10);
  if (const char* trace_step = std::getenv("KUBEPS_TRACE_STEP"))
    loop.trace_step = std::strtoull(trace_step, nullptr, 10);
  if (config.role == "local") {
    std::string error;
    auto optimizer = MakeOptimizer(api::ToOptimizerConfig(job.spec.optimizer), &error);
    if (!optimizer) return Status::Error("spec.optimizer: " + error);
    session->store = std::make_unique<LocalStore>(std::move(optimizer));
    loop.local_batch = job.spec.batch_size * job.spec.worker.replicas;
    return Status::Ok();
  }
  if (path == KVPath::kThroughSidecar) {
    SidecarOptions options;
    options.socket_dir = config.socket_dir;
    if (Status s = KVWorker::Connect(options, &session->kv); !s.ok()) return s;
  } else {
    api::PublishPorts(config, 0, metrics->port());
    if (Status s = ConnectToJob(config, job, metrics, true, &session->kv); !s.ok()) return s;
  }
  SetLogTag("worker " + std::to_string(session->kv->rank()));
  ExchangeOptions exchange;
  if (Status s = ExchangeFromEnvironment(&exchange); !s.ok()) return s;
  exchange.hold_non_finite = loop.fail_on_non_finite_loss;
  session->store = std::make_unique<RemoteStore>(session->kv.get(),
                                                 job.spec.mode == api::SyncMode::kSync, exchange);
  loop.rank = session->kv->rank();
  loop.num_workers = session->kv->size();
  loop.local_batch = job.spec.batch_size;
  return Status::Ok();
}

// A worker through the sidecar exports nothing itself: its agent, which
// holds the worker's identity and its port, exports the worker's metrics.
Status StartMetrics(const api::NodeConfig& config, KVPath path,
                    std::unique_ptr<MetricsServer>* metrics) {
  const bool exports = config.role != "local" && path == KVPath::kInProcess;
  const int port = exports ? config.metrics_port : -1;
  return MetricsServer::Start(
      config.pod_ip, port, {{"job", config.job_name}, {"role", "worker"}, {"node", config.node_id}},
      metrics);
}

// Best effort: when the last worker's answer is lost, the scheduler may
// already have ended the job and gone before our resend. The job's outcome
// is this process's exit code, not this call.
void TellSchedulerDone(KVWorker* kv) {
  if (!kv) return;
  if (Status s = kv->Finish(); !s.ok()) {
    KLOG_INFO << "could not tell the scheduler this worker finished (the job may be over already): "
              << s.message();
  }
}

// The built-in model's BLAS and OpenMP threads. (A sidecar computes
// nothing: the user's program has threads of its own.)
void ComputeOnTheCoresGiven(const api::NodeConfig& config) {
  const ComputeThreads given = ThreadsToComputeOn(config, UsableCores());
  SetBlasThreads(given.threads);
  KLOG_INFO << "computing on " << Describe(given);
}

// A worker of a sync job whose exchange runs after its step (KUBEPS_OVERLAP=0:
// `kubeps run` where the servers compute on the workers' cores) runs the
// exchange as batch work (common/batch_work.h): its threads (the KV
// client's, gRPC's, the heartbeats, the metrics) start under it, so that a
// request or an answer waking up waits for the core its worker leaves
// instead of cutting into another worker's pass, which the step waits for.
// Where the exchange overlaps the backward pass, it must not wait for its
// own worker's compute, and stays ordinary work; so does a sidecar, whose
// program overlaps through it. An async job's step waits for no other
// worker: its workers' exchanges stay ordinary work too, so that none falls
// behind the others.
void ExchangeAsBatchWork(const api::NodeConfig& config, const api::TrainingJob& job) {
  if (config.role == "local" || job.spec.mode != api::SyncMode::kSync || !ExchangeAfterTheStep())
    return;
  if (Status s = RunAsBatchWork(); !s.ok()) KLOG_INFO << s.message() << "; running as before";
}

// The threads that compute the model leave batch work, once those of the
// exchange have started under it: this one, which runs the training loop,
// and OpenMP's, whose team the model's first parallel loop may already have
// started.
void ComputeAsOrdinaryWork() {
  Status ordinary = RunAsOrdinaryWork();
#pragma omp parallel
  {
    if (Status s = RunAsOrdinaryWork(); !s.ok()) {
#pragma omp critical
      ordinary = s;
    }
  }
  if (!ordinary.ok()) KLOG_INFO << ordinary.message();
}

int TrainBuiltInModel(const api::NodeConfig& config, const api::TrainingJob& job, KVPath path) {
  ExchangeAsBatchWork(config, job);
  ComputeOnTheCoresGiven(config);
  std::unique_ptr<trainer::Model> model;
  trainer::FashionMnist data;
  const char* reason = nullptr;
  if (Status s = LoadModelAndData(job, &model, &data, &reason); !s.ok()) return Fail(reason, s);
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = StartMetrics(config, path, &metrics); !s.ok()) return Fail(kReasonListenFailed, s);

  Session session;
  if (Status s = JoinJob(config, job, path, metrics.get(), &session); !s.ok())
    return Fail(kReasonJoinFailed, s);
  if (Status s = session.store->Init(*model); !s.ok())
    return Fail(IsModelMismatchRefusal(s) ? kReasonModelMismatch
                                          : EndReason(s.reason(), kReasonTrainingFailed),
                s);
  ComputeAsOrdinaryWork();
  LoopResult result;
  if (Status s =
          RunTrainingLoop(session.loop, data.train, *model, *session.store, *metrics, &result);
      !s.ok()) {
    return Fail(result.failure_reason.empty() ? EndReason(s.reason(), kReasonTrainingFailed)
                                              : result.failure_reason.c_str(),
                s);
  }
  std::optional<double> test_accuracy;
  if (session.loop.rank == 0 && !result.left) {
    test_accuracy = ReportAccuracy(*model, data.test, result);
    if (const char* path = std::getenv("KUBEPS_DUMP_PARAMS")) WriteParams(path, *model);
  }
  if (result.left) {
    WriteTerminationMessage(
        kReasonScaledAway,
        "left the job at step " + std::to_string(result.steps) + ": it was scaled away");
  } else {
    LeaveTrainingSummary(result, test_accuracy);
  }
  TellSchedulerDone(session.kv.get());
  return 0;
}

// SIGTERM and SIGINT stop the sidecar. A signal handler may not take
// locks, so it only writes to a pipe; a thread reads it, stops the server
// (cutting a session still open) and wakes WaitForStopSignal.
int g_stop_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_stop_signal = 0;
std::mutex g_stop_mutex;
std::condition_variable g_stopped;

void OnStopSignal(int signal) {
  g_stop_signal = signal;
  [[maybe_unused]] ssize_t written = ::write(g_stop_pipe[1], "x", 1);
}

void StopOnSignal(sidecar::SidecarServer* server) {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) return;  // then signals act as by default
  std::thread([server] {
    char c;
    while (::read(g_stop_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    server->Shutdown();
    std::lock_guard<std::mutex> lock(g_stop_mutex);
    g_stopped.notify_all();
  }).detach();
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
}

void WaitForStopSignal() {
  std::unique_lock<std::mutex> lock(g_stop_mutex);
  g_stopped.wait(lock, [] { return g_stop_signal != 0; });
}

const char* SignalName(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }

sidecar::SidecarOptions ServingOptions(const api::NodeConfig& config, const api::TrainingJob& job,
                                       MetricsServer* metrics) {
  sidecar::SidecarOptions options;
  options.socket_dir = config.socket_dir;
  options.job_name = config.job_name;
  options.replica = config.node_id;
  options.sync = job.spec.mode == api::SyncMode::kSync;
  options.optimizer = job.spec.optimizer.name;
  options.non_finite = job.spec.non_finite;
  options.elastic = job.spec.elastic.enabled();
  options.batch_size = static_cast<uint64_t>(job.spec.batch_size);
  options.checkpoint_interval = static_cast<uint64_t>(job.spec.checkpoint_interval_steps);
  options.metrics = metrics;
  options.progress_interval_ms = job.spec.progress_interval_ms;
  return options;
}

// What --connect trains: the job brings this command as its program, so it
// names no model; the flags do (or the job's spec, where it names one).
struct BuiltInProgram {
  bool connect = false;
  std::string model;
  std::string dataset;
};

Status NameTheBuiltInModel(const BuiltInProgram& program, const api::NodeConfig& config,
                           api::TrainingJob* job) {
  if (config.role != "worker") {
    return Status::InvalidArgument("kubeps-agent --connect: KUBEPS_ROLE must be worker, got \"" +
                                   config.role + "\"");
  }
  if (!program.model.empty()) job->spec.model = program.model;
  if (!program.dataset.empty()) job->spec.dataset_path = program.dataset;
  if (job->spec.model.empty() || job->spec.dataset_path.empty()) {
    return Status::InvalidArgument(
        "kubeps-agent --connect: --model and --dataset are required when the job names no "
        "spec.model and spec.dataset");
  }
  if (job->spec.optimizer.name == "none") {
    return Status::InvalidArgument(
        "kubeps-agent --connect: the built-in model \"" + job->spec.model +
        "\" runs no optimizer of its own, so it needs the servers' (spec.optimizer.name is "
        "none: use sgd, momentum or adam)");
  }
  return Status::Ok();
}

std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const api::ModelInfo& model : api::kModels) names.push_back(model.name);
  return names;
}

// The worker as a sidecar: it joins the job as the built-in trainer does,
// with the same KV options and metrics, then serves the pod's training
// process until it says finish.
int ServeTrainingProcess(const api::NodeConfig& config, const api::TrainingJob& job) {
  if (config.role != "worker") {
    return Fail(kReasonInvalidConfig,
                Status::InvalidArgument("kubeps-agent --serve: KUBEPS_ROLE must be worker, got \"" +
                                        config.role + "\""));
  }
  // First, so that a client does not read the nonce of an agent that died.
  if (Status s = sidecar::PrepareSocketDirectory(config.socket_dir); !s.ok())
    return Fail(kReasonInvalidConfig, s);
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = StartMetrics(config, KVPath::kInProcess, &metrics); !s.ok())
    return Fail(kReasonListenFailed, s);
  api::PublishPorts(config, 0, metrics->port());
  std::unique_ptr<KVWorker> kv;
  if (Status s = ConnectToJob(config, job, metrics.get(), false, &kv); !s.ok())
    return Fail(kReasonJoinFailed, s);
  SetLogTag("worker " + std::to_string(kv->rank()));
  std::unique_ptr<sidecar::SidecarServer> server;
  sidecar::SidecarOptions serving = ServingOptions(config, job, metrics.get());
  // The program's regions in the KV client's own segment, where it has one:
  // the agent then copies nothing between the program and the servers.
  serving.kv_segment = [kv = kv.get()](const std::vector<uint64_t>& numels) {
    return PrepareSegment(kv, numels);
  };
  if (Status s = sidecar::SidecarServer::Start(serving, kv.get(), &server); !s.ok()) {
    return Fail(kReasonListenFailed, s);
  }
  PrintLine("serving this pod's training process on " + server->socket_path());
  StopOnSignal(server.get());
  if (Status s = server->Serve(); !s.ok()) return Fail(kReasonTrainingFailed, s);
  const std::string steps = std::to_string(server->steps()) + " steps";
  // The program's exit code says only that it failed; the agent's last
  // words say why, when a rerun would fail the same way.
  if (auto [reason, message] = server->JobFailure(); !reason.empty()) {
    WriteTerminationMessage(reason, message);
  } else if (std::optional<uint64_t> left = server->ScaledAwayAt()) {
    // As the built-in trainer says it: the operator deletes the pod, and a
    // worker wanted again later gets a new one, not a restart.
    const std::string message =
        "left the job at step " + std::to_string(*left) + ": it was scaled away";
    PrintLine(message);
    WriteTerminationMessage(kReasonScaledAway, message);
  }
  if (const int signal = g_stop_signal) {
    PrintLine(std::string(SignalName(signal)) + ": stopped serving after " + steps);
    // A session's requests may still wait on peers that are going away
    // too: exit without waiting for them (the files are removed already).
    std::_Exit(0);
  }
  // A native sidecar that exits is started again by the kubelet while the
  // pod's main container still runs (it may evaluate after finish), and a
  // new agent would register the worker again: stay until the kubelet (or
  // kubeps run) ends the pod's sidecars, as it does once the program ended.
  PrintLine("the training process finished after " + steps + "; waiting to be stopped");
  WaitForStopSignal();
  PrintLine(std::string(SignalName(g_stop_signal)) +
            ": stopped after the training process finished");
  return 0;
}

}  // namespace
}  // namespace kubeps

int main(int argc, char** argv) {
  using namespace kubeps;
  KeepFreedTensorMemory();
  SkipMutexDeadlockDetection();
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"kubeps-agent: a worker of a TrainingJob, or its model in one process (role local)"};
  api::NodeConfig config;
  api::AddNodeFlags(&app, &config);
  bool serve = false;
  app.add_flag("--serve", serve,
               "serve the pod's own training process over a Unix socket in --socket-dir "
               "(docs/sidecar-protocol.md) instead of training the built-in model");
  BuiltInProgram program;
  auto* connect = app.add_flag("--connect", program.connect,
                               "train the built-in model as the pod's own program, through the "
                               "pod's kubeps-agent --serve in --socket-dir, not a KV client of "
                               "its own");
  app.add_option("--model", program.model, "with --connect: the built-in model")
      ->needs(connect)
      ->check(CLI::IsMember(ModelNames()));
  app.add_option("--dataset", program.dataset,
                 "with --connect: the folder of the four Fashion-MNIST IDX .gz files")
      ->needs(connect);
  connect->excludes(app.get_option("--serve"));
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
  api::TrainingJob job;
  if (Status s = LoadConfigAndJob(&config, &job); !s.ok()) return Fail(kReasonInvalidConfig, s);
  if (serve) return ServeTrainingProcess(config, job);
  if (!program.connect) return TrainBuiltInModel(config, job, KVPath::kInProcess);
  if (Status s = NameTheBuiltInModel(program, config, &job); !s.ok())
    return Fail(kReasonInvalidConfig, s);
  return TrainBuiltInModel(config, job, KVPath::kThroughSidecar);
}
