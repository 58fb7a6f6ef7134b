// kubeps-server: the job's scheduler (--role=scheduler) or one of its
// parameter-server shards (--role=server). Configuration comes from the
// KUBEPS_* environment or flags (api/pod_env_codec.h), set by the operator or by
// `kubeps run`.
#include <csignal>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "api/compute_threads.h"
#include "api/pod_env_codec.h"
#include "api/training_progress.h"
#include "common/batch_work.h"
#include "common/command_line.h"
#include "common/desired_workers.h"
#include "common/fault_injector.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/mutex_checks.h"
#include "common/resend.h"
#include "common/scheduler_client.h"
#include "common/stop_token.h"
#include "common/tensor_memory.h"
#include "common/termination_message.h"
#include "common/usable_cores.h"
#include "ps-server/ps_service.h"
#include "ps-server/scheduler_service.h"

namespace kubeps {
namespace {

// Stopped by SIGTERM or SIGINT; ends the process's waits and calls at once.
StopToken g_stop;

// Every fatal error ends here: logged, and said in one line with its
// reason as the process's last words (the pod's termination message), which
// the job's condition then carries.
int Fail(const std::string& reason, const Status& status, int exit_code) {
  KLOG_ERROR << status.message();
  WriteTerminationMessage(reason, status.message());
  return exit_code;
}
constexpr std::chrono::seconds kSchedulerLostAfter(60);
constexpr std::chrono::milliseconds kHeartbeatInterval(250);
// How often the scheduler looks at whether it was stopped while it waits.
constexpr std::chrono::milliseconds kStopCheckInterval(50);
// Calls still in flight when a process stops get this long before they are
// cancelled: it was told to stop, and its grace period may be short.
constexpr std::chrono::milliseconds kStopShutdownGrace(100);
// Calls in flight at the end of the job get this long: nobody waits on
// them any more (the workers are gone), and `kubeps run` waits for the exit.
constexpr std::chrono::milliseconds kEndShutdownGrace(250);
// Once every worker finished, the scheduler answers heartbeats this long
// (twelve beats) for the servers to say they heard the job is over: one
// whose answer was lost asks again. A server that does not say so in that
// time is dead or hung, and the job logic stops it.
constexpr std::chrono::seconds kServersHearTheEndWithin(3);
// A server says it heard the job is over within this long, or writes its
// final checkpoint without having said so.
constexpr std::chrono::milliseconds kSayTheEndWasHeardWithin(1000);

// SIGTERM (eviction, a drain, `kill`) or SIGINT before the job is over: stop
// now and say so, with the exit code a process killed by that signal has
// (128 + its number). A server or scheduler that stops before the workers
// finish is a failure, restarted by the run policy and recovered as after a
// crash; an exit 0 would read as "the job is over" and never be replaced.
int StoppedBySignal(const std::string& role) {
  const int signal = StopSignal();
  KLOG_INFO << role << " stopped by " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
            << " before the job was over; exits " << 128 + signal
            << " (if the job goes on, its run policy restarts it, and it recovers as after a "
               "crash)";
  return 128 + signal;
}

// Serves `service` on the pod's address and publishes the bound ports.
Status StartGrpc(const api::NodeConfig& config, grpc::Service* service, MetricsServer* metrics,
                 std::unique_ptr<grpc::Server>* server, int* bound_port) {
  grpc::ServerBuilder builder;
  const std::string listen_address = JoinHostPort(config.pod_ip, config.port);
  builder.AddListeningPort(listen_address, config.security->ServerCredentials(), bound_port);
  ConfigureServer(&builder);
  builder.RegisterService(service);
  *server = builder.BuildAndStart();
  if (!*server || *bound_port == 0) {
    return Status::Error("cannot listen on " + listen_address);
  }
  api::PublishPorts(config, *bound_port, metrics->port());
  return Status::Ok();
}

int RunScheduler(const api::NodeConfig& config, const api::TrainingJob& job, MetricsServer* metrics,
                 FaultInjector* faults) {
  SchedulerOptions options;
  options.faults = faults;
  options.sync = job.spec.mode == api::SyncMode::kSync;
  options.workers_keep_parameters = job.spec.optimizer.name == "none";
  options.checkpoint_dir = config.checkpoint_dir;
  options.num_servers = config.num_servers;
  options.num_workers = config.num_workers;
  options.batch_size = job.spec.batch_size;
  options.token = config.token;
  if (const api::ElasticPolicy& elastic = job.spec.elastic; elastic.enabled()) {
    options.elastic.elastic = true;
    options.elastic.initial_workers = config.num_workers;
    options.elastic.min_workers = elastic.min_replicas;
    options.elastic.max_workers = elastic.max_replicas;
    options.elastic.global_batch = static_cast<uint64_t>(job.spec.batch_size) * config.num_workers;
    options.elastic.replace_timeout_ms = static_cast<int>(elastic.replace_timeout_seconds * 1000);
  }
  DesiredWorkersFile desired(config.desired_workers_file);
  SchedulerService service(options, metrics);
  // Before any node is served: a scheduler restarted after a scale learns
  // the number at once, not after its first plans.
  auto follow_desired = [&] {
    if (std::optional<DesiredWorkers> wanted = desired.Changed()) {
      if (std::string refused =
              service.scheduler().SetDesiredWorkers(wanted->workers, wanted->at_step);
          !refused.empty())
        KLOG_ERROR << config.desired_workers_file << ": " << refused;
    }
  };
  // For the local runner (a file of the run folder) and the operator (a
  // gauge), which stop a worker scaled away only once it no longer computes.
  std::vector<int> published;
  auto publish_computing = [&] {
    if (!options.elastic.elastic) return;
    std::vector<int> computing = service.scheduler().ComputingWorkers();
    if (computing == published) return;
    api::PublishComputingWorkers(config.run_dir, computing);
    auto gauge = [&](int rank) -> prometheus::Gauge& {
      return metrics->Gauge(api::kComputingWorkerMetric,
                            "1 for a worker rank that computes the job's newest step, else 0",
                            {{"rank", std::to_string(rank)}});
    };
    for (int rank : published) gauge(rank).Set(0);
    for (int rank : computing) gauge(rank).Set(1);
    published = std::move(computing);
  };
  follow_desired();
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  if (Status s = StartGrpc(config, &service, metrics, &server, &port); !s.ok())
    return Fail(kReasonListenFailed, s, 1);
  // Ends the scheduler's waiting long polls first: Shutdown waits for every
  // handler to return.
  auto shut_down = [&](std::chrono::milliseconds grace) {
    service.scheduler().Stop();
    server->Shutdown(std::chrono::system_clock::now() + grace);
  };
  KLOG_INFO << "scheduler listening on " << JoinHostPort(config.pod_ip, port)
            << ", metrics on :" << metrics->port() << ", expecting " << config.num_servers
            << " servers and " << config.num_workers << " workers";
  while (!g_stop.stop_requested() &&
         !service.scheduler().WaitAllWorkersFinished(kStopCheckInterval)) {
    follow_desired();
    publish_computing();
    if (!service.scheduler().Failure().empty()) {
      // Give every node a few heartbeats to learn why the job stops.
      g_stop.SleepFor(std::chrono::seconds(2));
      shut_down(kEndShutdownGrace);
      return Fail(JobStopReason(service.scheduler().FailureReason(), kReasonJobStopped),
                  Status::Error(service.scheduler().Failure()), 1);
    }
  }
  if (g_stop.stop_requested() &&
      !service.scheduler().WaitAllWorkersFinished(std::chrono::milliseconds(0))) {
    shut_down(kStopShutdownGrace);
    return StoppedBySignal("scheduler");
  }
  // Keep answering heartbeats until every server has learnt the job is
  // over, so they exit on their own (bounded: a dead server never asks; and
  // a stop ends the wait, the job being over).
  const auto told_by = std::chrono::steady_clock::now() + kServersHearTheEndWithin;
  while (!g_stop.stop_requested() && std::chrono::steady_clock::now() < told_by &&
         !service.scheduler().WaitServersToldToStop(kStopCheckInterval)) {
  }
  shut_down(g_stop.stop_requested() ? kStopShutdownGrace : kEndShutdownGrace);
  if (service.scheduler().WaitServersToldToStop(std::chrono::milliseconds(0))) {
    KLOG_INFO << "every worker finished; scheduler exits";
    WriteTerminationMessage(kReasonJobOver, "every worker finished and every server heard so");
  } else {
    KLOG_INFO << "every worker finished; scheduler exits before every server heard so";
    WriteTerminationMessage(kReasonJobOverUnheard,
                            "every worker finished, but not every server heard so");
  }
  return 0;
}

ShardReport Report(const Shard& shard) {
  return ShardReport{shard.CheckpointSteps(), shard.AsyncWorkerSteps(), shard.GlobalBatch(),
                     shard.StateBatchSize(), shard.LoadedCheckpointWorkers()};
}

// Beats, saying it heard the job is over, until the scheduler answers (a
// beat is not resent) or a bound passes: the job is over either way.
void SayTheEndWasHeard(SchedulerClient& scheduler, Shard& shard) {
  scheduler.SayJobOverHeard();
  const auto until = std::chrono::steady_clock::now() + kSayTheEndWasHeardWithin;
  HeartbeatAnswer answer;
  const ShardReport report = Report(shard);
  while (!scheduler.Heartbeat(shard.generation(), &answer, &report).ok() &&
         std::chrono::steady_clock::now() < until && g_stop.SleepFor(kStopCheckInterval)) {
  }
}

// Registers the shard with the scheduler, then heartbeats until the
// scheduler says the job is over, restoring a checkpoint whenever the
// scheduler opens a new recovery generation. A failure's reason() is why,
// for the termination message.
Status RegisterAndHeartbeat(const api::NodeConfig& config, const std::string& address,
                            MetricsServer* metrics, Shard* shard, int64_t checkpoint_step) {
  SchedulerClientOptions options;
  options.scheduler_address = config.scheduler_address;
  options.node_id = config.node_id;
  options.role = NodeRole::kServer;
  options.token = config.token;
  options.security = config.security;
  options.address = address;
  options.metrics_address = JoinHostPort(config.pod_ip, metrics->port());
  options.checkpoint_step = checkpoint_step;
  options.shard_at_start = Report(*shard);
  options.awaits_recovery = [shard] { return shard->awaiting_recovery(); };
  options.resend = ResendPolicy{config.resend_timeout_ms, config.max_resends};
  options.metrics = metrics;
  options.stop = &g_stop;
  SchedulerClient scheduler(options);
  int rank = -1;
  if (Status s = scheduler.Register(&rank); !s.ok())
    return std::move(s).WithReason(kReasonJoinFailed);
  SetLogTag("server " + std::to_string(rank));
  KLOG_INFO << "registered as server " << rank << " at " << address;

  auto last_answer = std::chrono::steady_clock::now();
  while (g_stop.SleepFor(kHeartbeatInterval)) {
    HeartbeatAnswer answer;
    const ShardReport report = Report(*shard);
    if (Status s = scheduler.Heartbeat(shard->generation(), &answer, &report); !s.ok()) {
      if (g_stop.stop_requested()) break;
      // A missed heartbeat is not fatal; a scheduler gone for long is: the
      // job was deleted or lost, and nobody will ever tell us to stop.
      if (std::chrono::steady_clock::now() - last_answer > kSchedulerLostAfter) {
        return Status::Unavailable("no answer from the scheduler for " +
                                   std::to_string(kSchedulerLostAfter.count()) +
                                   " s: " + s.message())
            .WithReason(kReasonSchedulerUnreachable);
      }
      continue;
    }
    last_answer = std::chrono::steady_clock::now();
    if (!answer.refused.empty()) return Status::Error(answer.refused).WithReason(kReasonJoinFailed);
    if (answer.replaced) {
      return Status::Error(
                 "a newer process of this server registered with the scheduler; this "
                 "one stops without touching its checkpoints")
          .WithReason(kReasonReplaced);
    }
    if (std::string taken = shard->TakenOver(); !taken.empty()) {
      return Status::Error(taken).WithReason(kReasonReplaced);
    }
    if (std::string failure = shard->CheckpointFailure(); !failure.empty()) {
      return Status::Error(failure).WithReason(kReasonCheckpointWriteFailed);
    }
    if (!answer.failure.empty()) {
      return Status::Error(JobStoppedMessage(answer.failure_reason, answer.failure))
          .WithReason(JobStopReason(answer.failure_reason, kReasonJobStopped));
    }
    shard->KeepCheckpoint(answer.common_checkpoint_step);
    shard->SetCurrentIncarnations(answer.worker_incarnations);
    if (answer.generation > shard->generation() && answer.keep_state) {
      shard->EnterGeneration(answer.generation);
      continue;  // report it at once
    }
    if (answer.generation > shard->generation()) {
      if (Status r = shard->RestoreCheckpoint(answer.restore_step, answer.generation); !r.ok()) {
        if (config.checkpoint_dir.empty()) {
          // A shard was lost and nothing holds its parameters: no restart
          // of any server can bring them back, so the job fails at once
          // instead of spending its backoffLimit on restarts that fail alike.
          return Status::Error(
                     "a server restarted and the job must roll back to step " +
                     std::to_string(answer.restore_step) +
                     ", but it keeps no checkpoints (spec.checkpoint.path is empty): set it to a "
                     "folder on a volume that every server pod mounts for shards to be recovered")
              .WithReason(kReasonShardStateLost);
        }
        return Status::Error("recovery to step " + std::to_string(answer.restore_step) +
                             " failed: " + r.message())
            .WithReason(kReasonRecoveryFailed);
      }
      continue;  // report the restore at once
    }
    if (answer.shutdown) {
      KLOG_INFO << "the scheduler says the job is over; writing the final checkpoint";
      SayTheEndWasHeard(scheduler, *shard);
      Status written = shard->WriteFinalCheckpoint();
      if (!written.ok()) return std::move(written).WithReason(kReasonCheckpointWriteFailed);
      return written;
    }
  }
  return Status::Aborted("stopped by a signal");
}

// Why a server could not claim its checkpoint folder (Shard::ClaimCheckpoints).
std::string FolderClaimReason(const Status& s) {
  if (!s.reason().empty()) return s.reason();  // a folder halfway through a reshard
  switch (s.code()) {
    case Status::Code::kAlreadyExists:  // another run's server holds it
      return kReasonCheckpointFolderInUse;
    case Status::Code::kFailedPrecondition:  // a successor took it over meanwhile
      return kReasonReplaced;
    case Status::Code::kUnavailable:  // locking failed in a way that may pass
      return kReasonCheckpointReadFailed;
    default:  // a folder this server cannot write
      return kReasonCheckpointWriteFailed;
  }
}

int RunServer(const api::NodeConfig& config, const api::TrainingJob& job, MetricsServer* metrics,
              FaultInjector* faults) {
  ShardOptions options;
  options.sync = job.spec.mode == api::SyncMode::kSync;
  // An elastic job's pushes may come from any of its maxReplicas ranks.
  options.num_workers =
      job.spec.elastic.enabled() ? job.spec.elastic.max_replicas : job.spec.worker.replicas;
  options.num_servers = config.num_servers;
  options.batch_size = job.spec.batch_size;
  options.non_finite =
      job.spec.non_finite == "SkipStep" ? NonFinitePolicy::kSkipStep : NonFinitePolicy::kFail;
  options.optimizer = api::ToOptimizerConfig(job.spec.optimizer);
  std::string error;
  auto optimizer = MakeOptimizer(options.optimizer, &error);
  if (!optimizer) return Fail(kReasonInvalidConfig, Status::Error("spec.optimizer: " + error), 2);
  if (!config.checkpoint_dir.empty()) {
    options.checkpoint_dir = config.checkpoint_dir + "/" + config.node_id;
    options.checkpoint_interval = static_cast<uint64_t>(job.spec.checkpoint_interval_steps);
  }
  const ComputeThreads given = ThreadsToComputeOn(config, UsableCores());
  options.update_threads = given.threads;
  options.shared_values_owner = config.node_id;
  KLOG_INFO << "updating big parts on " << Describe(given);
  Shard shard(options, std::move(optimizer), metrics);
  const FolderHolder me = FolderHolder::ThisProcess(config.run_id, job.namespace_ + "/" + job.name,
                                                    config.node_id, config.node_name);
  prometheus::Gauge& folder_wait = metrics->Gauge(
      "kubeps_server_checkpoint_folder_wait_seconds",
      "How long this server has waited for another process to let go of its checkpoint folder "
      "(0 once it holds it)");
  FolderLockWait waiting;
  waiting.other_run_grace = std::chrono::seconds(config.holder_grace_seconds);
  waiting.on_wait = [&folder_wait](std::chrono::milliseconds waited) {
    folder_wait.Set(waited.count() / 1000.0);
  };
  Status claimed = shard.ClaimCheckpoints(me, job.spec.checkpoint_resume, &g_stop, waiting);
  folder_wait.Set(0);
  if (!claimed.ok()) {
    if (claimed.IsAborted()) return StoppedBySignal("server");
    return Fail(FolderClaimReason(claimed), claimed, 1);
  }
  int64_t checkpoint_step = -1;
  if (Status s = shard.LoadLatestCheckpoint(&checkpoint_step); !s.ok()) {
    const bool other_job = s.code() == Status::Code::kFailedPrecondition;
    return Fail(other_job ? kReasonCheckpointMismatch : kReasonCheckpointReadFailed, s, 1);
  }
  ParameterServerService service(&shard, config.token, faults);
  int port = 0;
  std::unique_ptr<grpc::Server> server;
  if (Status s = StartGrpc(config, &service, metrics, &server, &port); !s.ok())
    return Fail(kReasonListenFailed, s, 1);
  Status s = RegisterAndHeartbeat(config, JoinHostPort(config.pod_ip, port), metrics, &shard,
                                  checkpoint_step);
  shard.Stop();  // ends waiting pulls now, so that Shutdown need not wait for them
  server->Shutdown(std::chrono::system_clock::now() +
                   (g_stop.stop_requested() ? kStopShutdownGrace : kEndShutdownGrace));
  if (s.IsAborted() && g_stop.stop_requested()) return StoppedBySignal("server");
  if (!s.ok()) {
    if (!shard.TakenOver().empty()) return Fail(kReasonReplaced, s, 1);
    return Fail(shard.CheckpointFailure().empty() ? s.reason() : kReasonCheckpointWriteFailed, s,
                1);
  }
  WriteTerminationMessage(kReasonJobOver, "the scheduler said every worker finished");
  // Said once the calls have ended: the process is gone right after.
  KLOG_INFO << "the job is over; server exits";
  return 0;
}

}  // namespace
}  // namespace kubeps

int main(int argc, char** argv) {
  using namespace kubeps;
  const Status batch_work = RunAsBatchWork();  // first: the threads started later inherit it
  KeepFreedTensorMemory();
  SkipMutexDeadlockDetection();
  StopOnSignals(&g_stop);

  CLI::App app{"kubeps-server: the scheduler or a parameter-server shard of a TrainingJob"};
  api::NodeConfig config;
  api::AddNodeFlags(&app, &config);
  if (auto exit_code = ParseCommandLine(app, argc, argv)) return *exit_code;
  if (Status s = api::FinishNodeConfig(&config); !s.ok()) return Fail(kReasonInvalidConfig, s, 2);
  if (config.role != "scheduler" && config.role != "server") {
    return Fail(
        kReasonInvalidConfig,
        Status::Error("kubeps-server: --role (or KUBEPS_ROLE) must be scheduler or server, got \"" +
                      config.role + "\""),
        2);
  }
  SetLogTag(config.role);
  if (!batch_work.ok()) KLOG_INFO << batch_work.message() << "; running as before";
  std::unique_ptr<MetricsServer> metrics;
  if (Status s = MetricsServer::Start(
          config.pod_ip, config.metrics_port,
          {{"job", config.job_name}, {"role", config.role}, {"node", config.node_id}}, &metrics);
      !s.ok()) {
    return Fail(kReasonListenFailed, s, 1);
  }
  std::unique_ptr<FaultInjector> faults;
  if (Status s = FaultInjector::FromEnvironment(metrics.get(), &faults); !s.ok())
    return Fail(kReasonInvalidConfig, s, 2);
  api::TrainingJob job;
  if (Status s = api::DecodeJob(config.job_json, &job); !s.ok())
    return Fail(kReasonInvalidConfig, s, 2);

  return config.role == "scheduler" ? RunScheduler(config, job, metrics.get(), faults.get())
                                    : RunServer(config, job, metrics.get(), faults.get());
}
