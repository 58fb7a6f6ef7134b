#include "worker-agent/kv/kv_worker_impl.h"
#include "worker-agent/kv/segment_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/copy_bytes.h"
#include "common/logging.h"
#include "common/membership.h"
#include "common/termination_message.h"

namespace kubeps {
namespace {

using Clock = std::chrono::steady_clock;

SchedulerClientOptions MembershipOptions(const KVOptions& options, std::shared_ptr<JobToken> token,
                                         std::shared_ptr<const TransportSecurity> security) {
  SchedulerClientOptions m;
  m.scheduler_address = options.scheduler_address;
  m.node_id = options.node_id;
  m.role = NodeRole::kWorker;
  m.token = std::move(token);
  m.security = std::move(security);
  m.metrics_address = options.metrics_address;
  m.resend = options.resend;
  m.long_poll_ms = options.pull_wait_ms;
  m.peer_wait_limit_ms = options.peer_wait_limit_ms;
  m.metrics = options.metrics;
  return m;
}

// The parts' references and their values back to back: the one copy a
// tensor makes on its way out.
void PackParts(const std::vector<const Part*>& batch, const std::vector<const float*>& tensors,
               google::protobuf::RepeatedPtrField<v1::PartRef>* refs, std::string* data) {
  uint64_t elements = 0;
  AddPartRefs(batch, refs, &elements);
  data->resize(elements * sizeof(float));
  char* out = data->data();
  for (const Part* part : batch) {
    CopyBytes(out, tensors[part->key] + part->offset, part->length * sizeof(float));
    out += part->length * sizeof(float);
  }
}

}  // namespace

KVWorkerImpl::KVWorkerImpl(const KVOptions& options, std::shared_ptr<JobToken> token,
                           std::shared_ptr<const TransportSecurity> security)
    : options_(options),
      security_(std::move(security)),
      metrics_(options.metrics ? options.metrics : &NullMetrics()),
      caller_(options.resend, token, metrics_),
      scheduler_(MembershipOptions(options, token, security_)),
      incarnation_(scheduler_.incarnation()) {}

KVWorkerImpl::~KVWorkerImpl() {
  stopping_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
  push_pool_.reset();  // joins the RPC threads before the stubs go away
  pull_pool_.reset();
}

Status KVWorker::Start(const KVOptions& options, std::unique_ptr<KVWorker>* out) {
  std::shared_ptr<JobToken> token = JobToken::Fixed(options.token);
  if (!options.token_file.empty()) {
    if (Status s = JobToken::FromFile(options.token_file, &token); !s.ok()) return s;
  }
  std::shared_ptr<const TransportSecurity> security = TransportSecurity::Insecure();
  if (!options.tls_dir.empty()) {
    if (Status s = TransportSecurity::FromDirectory(options.tls_dir, &security); !s.ok()) return s;
  }
  auto worker = std::make_unique<KVWorkerImpl>(options, std::move(token), std::move(security));
  if (Status s = worker->Start(); !s.ok()) return s;
  *out = std::move(worker);
  return Status::Ok();
}

Status KVWorker::PullAtOneStep(const std::vector<float*>& values, uint64_t min_version,
                               uint64_t* version) {
  Status pulled = WaitWithVersion(Pull(values, min_version), version);
  if (pulled.ok() && *version > min_version) pulled = Wait(Pull(values, *version));
  return pulled;
}

Status KVWorkerImpl::Start() {
  // Checked before the worker takes a rank in the job.
  if (auto encoding = ParseGradientEncoding(options_.compression)) {
    encoding_ = *encoding;
  } else {
    return Status::InvalidArgument("compression \"" + options_.compression +
                                   "\": want none, fp16, bf16 or 2bit");
  }
  if (encoding_ == GradientEncoding::kTwoBit &&
      !(std::isfinite(options_.compression_threshold) && options_.compression_threshold > 0)) {
    return Status::InvalidArgument("compression 2bit needs a threshold above 0, got " +
                                   std::to_string(options_.compression_threshold));
  }
  if (Status s = scheduler_.Register(&rank_); !s.ok()) return s;
  ClusterInfo cluster;
  if (Status s = scheduler_.AwaitClusterView(&cluster); !s.ok()) return s;
  num_workers_ = cluster.num_workers;
  membership_ = FixedMembership(num_workers_, 0);
  if (options_.elastic) {
    membership_.set_fixed_below(0);  // nothing is known before the scheduler says
    elastic_ = true;
  }
  num_servers_ = static_cast<int>(cluster.server_addresses.size());
  for (const std::string& address : cluster.server_addresses) {
    links_.push_back(std::make_shared<const ServerLink>(address, *security_));
  }
  const std::map<std::string, std::string> rank_label{{"rank", std::to_string(rank_)}};
  push_latency_ = &metrics_->Latency("kubeps_worker_push_latency_seconds",
                                     "Time from push to acknowledgement, per request", rank_label);
  pull_latency_ =
      &metrics_->Latency("kubeps_worker_pull_latency_seconds",
                         "Time from pull to parameters received, per request", rank_label);
  push_bytes_ =
      &metrics_->Counter("kubeps_worker_push_bytes_total", "Gradient bytes pushed", rank_label);
  pull_bytes_ =
      &metrics_->Counter("kubeps_worker_pull_bytes_total", "Parameter bytes pulled", rank_label);
  shared_bytes_ = &metrics_->Counter("kubeps_worker_shared_memory_bytes_total",
                                     "Tensor bytes pushed or pulled through shared memory, not TCP",
                                     rank_label);
  mapped_bytes_ = &metrics_->Counter(
      "kubeps_worker_mapped_bytes_total",
      "Parameter bytes pulled by mapping where a server on this host keeps them, not copied",
      rank_label);
  // Enough threads for a few requests per shard in flight each way. A
  // PushPull call holds its push thread until its pull is answered too.
  push_pool_ = std::make_unique<TaskPool>(std::max(8, 8 * num_servers()));
  pull_pool_ = std::make_unique<TaskPool>(std::max(4, 4 * num_servers()));
  // A worker that (re)joins after a recovery starts in its generation.
  if (PollHeartbeat().ok()) generation_ = announced_generation_.load();
  heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return Status::Ok();
}

Status KVWorkerImpl::PollHeartbeat(HeartbeatAnswer* out) {
  HeartbeatAnswer own;
  HeartbeatAnswer& answer = out ? *out : own;
  if (Status s = scheduler_.Heartbeat(0, &answer); !s.ok()) return s;
  if (!answer.refused.empty()) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure_ = "the restarted scheduler refused this worker's registration: " + answer.refused;
    failure_reason_ = kReasonJoinFailed;
    return Status::Ok();
  }
  if (answer.replaced) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure_ = "a newer process of this worker registered with it; this one stops";
    failure_reason_ = kReasonReplaced;
    return Status::Ok();
  }
  // Order matters for readers: the membership before the generation.
  if (answer.membership.changes_size() > 0) {
    std::lock_guard<std::mutex> lock(membership_mutex_);
    if (!elastic_ || NewerMembership(answer.membership, membership_)) {
      membership_ = answer.membership;
      elastic_ = true;
    }
  }
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    silent_nodes_ = answer.dead_nodes;
  }
  announced_common_checkpoint_ = answer.common_checkpoint_step;
  announced_generation_ = answer.generation;
  if (!answer.failure.empty()) {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    failure_ = answer.failure;
    failure_reason_ = answer.failure_reason;
  }
  return Status::Ok();
}

void KVWorkerImpl::HeartbeatLoop() {
  while (!stopping_) {
    for (int waited = 0; waited < options_.heartbeat_interval_ms && !stopping_; waited += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // A missed beat is not an error: the next one tells the same.
    [[maybe_unused]] Status beat = PollHeartbeat();
  }
}

Status KVWorkerImpl::Recover(uint64_t* resume_step) {
  std::optional<uint64_t> own;
  Status recovered = RecoverFrom(generation_, resume_step, options_.async ? &own : nullptr);
  // The residuals as of the resume step, so that the redone steps send what
  // they sent before; where no copy is of it, they stay as they are.
  if (recovered.ok() && residual_copies_) residual_copies_->RollBack(*resume_step);
  if (recovered.ok() && options_.async) {
    // An async worker's steps are its own; the restore step of a job run
    // again over its checkpoints counts every worker's pushes. It stands
    // only where the shards cannot tell (a checkpoint of an older build).
    *resume_step = std::max(own.value_or(*resume_step), scheduler_.reported_step());
  }
  return recovered;
}

Status KVWorkerImpl::RecoverFrom(uint64_t generation, uint64_t* resume_step,
                                 std::optional<uint64_t>* own_step) {
  const auto start = Clock::now();
  for (;;) {
    HeartbeatAnswer answer;
    const Status beat = PollHeartbeat(&answer);
    if (!beat.ok() && SecondsSince(start) * 1000 > options_.peer_wait_limit_ms) return beat;
    if (Status stopped = JobStopped(); !stopped.ok()) return stopped;
    // Readiness, the restore step and the worker's own step, all off this
    // call's own beat: the heartbeat thread's may have been answered before
    // every shard restored, and be read after this one.
    if (beat.ok() && answer.generation_ready && answer.generation >= generation) {
      *resume_step = answer.restore_step;
      if (own_step) *own_step = answer.own_step;
      // The server whose restart opened the recovery may have come back
      // elsewhere (on Kubernetes, a new pod with a new IP).
      if (answer.generation > generation_) {
        if (Status s = RefreshServerLinks(); !s.ok()) return s;
      }
      generation_ = answer.generation;
      if (generation_ > 0) {
        KLOG_INFO << "resuming from step " << *resume_step << " (generation " << generation_ << ")";
      }
      return Status::Ok();
    }
    if (SecondsSince(start) * 1000 > options_.peer_wait_limit_ms) {
      return Status::Error("the job's recovery did not complete within " +
                           std::to_string(options_.peer_wait_limit_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status KVWorkerImpl::RollBackToHeldState(uint64_t start, const std::vector<uint64_t>& held,
                                         uint64_t* resume_step) {
  const uint64_t asked_in = generation_;
  v1::ProgramStateMissing missing;
  missing.set_generation(asked_in);
  missing.set_start_step(start);
  for (uint64_t step : held) missing.add_held_steps(step);
  // Said in every beat until the rollback is ready: a lost beat loses
  // nothing, and the scheduler acts once (a generation later, it is stale).
  scheduler_.SayProgramStateMissing(std::move(missing));
  Status recovered = RecoverFrom(asked_in + 1, resume_step);
  scheduler_.SayProgramStateMissing(std::nullopt);
  // The scheduler's verdict on this request is the program's to hear as
  // such (FailedPrecondition); any other stop is the job's.
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (!recovered.ok() && failure_reason_ == kReasonProgramStateMissing)
    return Status::FailedPrecondition(failure_).WithReason(failure_reason_);
  return recovered;
}

Status KVWorkerImpl::Membership(uint64_t step, StepMembership* out) {
  scheduler_.ReportStep(step);
  const auto start = Clock::now();
  for (;;) {
    std::optional<StepMembership> known;
    {
      std::lock_guard<std::mutex> lock(membership_mutex_);
      if (MembershipKnown(membership_, step)) known = MembershipOf(membership_, rank_, step);
    }
    // A worker that is not one of the step's asks again and again while it
    // waits to be taken in: where the job has stopped, that is its answer.
    if (known && known->member) {
      *out = *known;
      return Status::Ok();
    }
    if (Status stopped = JobStopped(); !stopped.ok()) return stopped;
    if (known) {
      *out = *known;
      return Status::Ok();
    }
    if (SecondsSince(start) * 1000 > options_.peer_wait_limit_ms) {
      return Status::Error("the scheduler did not say who computes step " + std::to_string(step) +
                           " within " + std::to_string(options_.peer_wait_limit_ms) + " ms");
    }
    // Past the lease: this beat reports the step, and its answer extends it
    // at once, unless the job waits at a step for workers to take in.
    const bool beat = PollHeartbeat().ok();
    {
      std::lock_guard<std::mutex> lock(membership_mutex_);
      if (MembershipKnown(membership_, step)) continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(beat ? 5 : 20));
  }
}

bool KVWorkerImpl::RollbackAnnounced() const { return announced_generation_ > generation_; }

std::string KVWorkerImpl::WhyAPeerMayBeLate() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (silent_nodes_.empty()) return "a peer is slow or restarting";
  std::string names;
  for (const std::string& id : silent_nodes_) names += (names.empty() ? "" : ", ") + id;
  return "the scheduler has not heard from " + names + " for a while";
}

Status KVWorkerImpl::JobStopped() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failure_.empty()) return Status::Ok();
  // Refused or replaced: this process's end, not the job's.
  if (IsOwnEnd(failure_reason_)) return Status::Error(failure_).WithReason(failure_reason_);
  return Status::Error(JobStoppedMessage(failure_reason_, failure_)).WithReason(failure_reason_);
}

KVWorkerImpl::ServerLink::ServerLink(const std::string& server_address,
                                     const TransportSecurity& security)
    : address(server_address),
      // Its own connection, as a worker's process has: a process holding
      // several clients (kv_goodput's workers) would otherwise share one.
      channel(OpenChannel(server_address, &security, Connection::kOwn)),
      stub(v1::ParameterServer::NewStub(channel)) {}

std::shared_ptr<const KVWorkerImpl::ServerLink> KVWorkerImpl::Link(int server) const {
  std::lock_guard<std::mutex> lock(links_mutex_);
  return links_[server];
}

Status KVWorkerImpl::RefreshServerLinks() {
  ClusterInfo cluster;
  if (Status s = scheduler_.AwaitClusterView(&cluster); !s.ok()) return s;
  if (static_cast<int>(cluster.server_addresses.size()) != num_servers_) {
    return Status::Error("the scheduler's view lists " +
                         std::to_string(cluster.server_addresses.size()) +
                         " servers; this job has " + std::to_string(num_servers_));
  }
  std::lock_guard<std::mutex> lock(links_mutex_);
  for (int server = 0; server < num_servers_; ++server) {
    const std::string& address = cluster.server_addresses[server];
    if (links_[server]->address == address) continue;
    KLOG_INFO << "server " << server << " moved from " << links_[server]->address << " to "
              << address;
    links_[server] = std::make_shared<const ServerLink>(address, *security_);
    if (shared_) shared_->Reset(server, SharedMemoryPath::OnThisHost(address, options_.own_host));
  }
  return Status::Ok();
}

std::string KVWorkerImpl::ServerName(int server) const {
  return "server " + std::to_string(server) + " (" + Link(server)->address + ")";
}

bool KVWorkerImpl::PrepareTensors(const std::vector<uint64_t>& sizes) {
  if (sizes == laid_out_) return shared_ != nullptr;
  parts_ = PlaceTensors(sizes, num_servers(), options_.placement);
  laid_out_ = sizes;
  shared_.reset();
  std::vector<bool> on_this_host(num_servers_, false);
  for (int server = 0; options_.shared_memory && server < num_servers_; ++server) {
    on_this_host[server] = SharedMemoryPath::OnThisHost(Link(server)->address, options_.own_host);
  }
  if (std::find(on_this_host.begin(), on_this_host.end(), true) == on_this_host.end()) return false;
  if (Status s = SharedMemoryPath::Create(options_.node_id, parts_, options_.map_values, &shared_);
      !s.ok()) {
    KLOG_INFO << "tensors go over TCP to every server: " << s.message();
    return false;
  }
  for (int server = 0; server < num_servers_; ++server)
    shared_->Reset(server, on_this_host[server]);
  return true;
}

std::optional<SegmentFile> PrepareSegment(KVWorker* kv, const std::vector<uint64_t>& sizes) {
  auto* in_process = dynamic_cast<KVWorkerImpl*>(kv);
  if (!in_process || !in_process->PrepareTensors(sizes)) return std::nullopt;
  return in_process->shared()->File();
}

Status KVWorkerImpl::InitTensors(const std::vector<const float*>& values,
                                 const std::vector<uint64_t>& sizes) {
  PrepareTensors(sizes);
  if (encoding_ == GradientEncoding::kTwoBit) {
    residuals_.clear();
    for (uint64_t size : sizes) residuals_.emplace_back(size, 0.0f);
    if (!options_.async) {
      residual_copies_ = std::make_unique<RollbackCopies>(
          options_.checkpoint_interval, [this] { return NewestCommonCheckpoint(); });
      for (auto& residual : residuals_) {
        residual_copies_->Track(residual.data(), residual.size() * sizeof(float));
      }
    }
  }
  if (!names_.empty() && names_.size() != sizes.size()) {
    return Status::InvalidArgument("InitTensors: " + std::to_string(names_.size()) + " names for " +
                                   std::to_string(sizes.size()) + " tensors");
  }
  // Rank 0's values are stored, with the names; once they are, every other
  // worker's names are checked against them.
  if (rank_ == 0) {
    SayServersWithoutParts(sizes);
    if (Status s = SendInits(values, false); !s.ok()) return s;
  }
  if (Status s = Barrier("init"); !s.ok()) return s;
  if (rank_ != 0 && !names_.empty()) {
    // Every key, whatever pointers this rank passed (its values are not sent).
    static const float kNone = 0;
    return SendInits(std::vector<const float*>(sizes.size(), &kNone), true);
  }
  return Status::Ok();
}

void KVWorkerImpl::SayServersWithoutParts(const std::vector<uint64_t>& sizes) const {
  std::vector<bool> used(num_servers_, false);
  for (const Part& part : parts_) used[part.server] = true;
  const int empty = static_cast<int>(std::count(used.begin(), used.end(), false));
  if (empty == 0) return;
  KLOG_ERROR << "warning: " << empty << " of the job's " << num_servers_
             << " servers hold no part of the model (" << sizes.size()
             << " tensors, none of as many elements as there are servers, so none is sliced): "
             << "such a server checkpoints nothing, and the job cannot recover from the loss of "
             << "a server; lower replicaSpecs.ps.replicas to " << num_servers_ - empty;
}

Status KVWorkerImpl::SendInits(const std::vector<const float*>& values, bool check_only) {
  // A request per batch, each with the server it goes to; a check goes to
  // every server, with no part where this worker places none (a worker of
  // fewer tensors than rank 0 may place none where rank 0 placed some).
  std::vector<std::pair<int, v1::InitRequest>> requests;
  std::vector<uint32_t> on_server(num_servers_, 0);
  for (const Part& part : parts_) ++on_server[part.server];
  for (const auto& batch : Batches(values)) {
    if (batch.empty()) continue;
    v1::InitRequest& request =
        requests.emplace_back(batch.front()->server, v1::InitRequest{}).second;
    if (check_only) {
      uint64_t elements = 0;
      AddPartRefs(batch, request.mutable_parts(), &elements);
    } else {
      PackParts(batch, values, request.mutable_parts(), request.mutable_data());
    }
    if (!names_.empty()) {
      for (const Part* part : batch) request.add_names(names_[part->key]);
    }
  }
  if (check_only) {
    for (int server = 0; server < num_servers_; ++server) {
      if (on_server[server] == 0) requests.emplace_back(server, v1::InitRequest{});
    }
  }
  for (auto& [server, request] : requests) {
    *request.mutable_id() = NextRequestId();
    if (check_only) {
      request.set_check_only(true);
      request.set_parts_on_server(on_server[server]);
    }
    v1::InitResponse response;
    const auto link = Link(server);
    Status s = caller_.Call(ServerName(server), "Init", [&](grpc::ClientContext& c) {
      return link->stub->Init(&c, request, &response);
    });
    Acknowledge(request.id().seq());
    if (check_only && !s.ok() && !IsModelMismatchRefusal(s)) {
      // Only a verdict on the model ends the check's worker: a server of a
      // kubeps before the check reads it as an Init without data and refuses
      // it, and one that cannot answer now fails this worker's pulls anyway.
      KLOG_INFO << "could not check the tensors' names with " << ServerName(server) << ": "
                << s.message();
      continue;
    }
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

template <typename Ptr>
std::vector<std::vector<const Part*>> KVWorkerImpl::Batches(
    const std::vector<Ptr>& selected) const {
  std::vector<std::vector<const Part*>> batches;
  std::vector<int> open(num_servers_, -1);  // batch being filled per server
  std::vector<uint64_t> filled(num_servers_, 0);
  // Never past what a shard accepts, whatever the option says.
  std::vector<uint64_t> limit(num_servers_, std::min<uint64_t>(options_.tcp_request_elems,
                                                               kMaxRequestBytes / sizeof(float)));
  for (int server = 0; server < num_servers_; ++server) {
    if (shared_ && shared_->MayTry(server)) limit[server] = kSharedMemoryBatchElems;
  }
  for (const Part& part : parts_) {
    if (part.key >= selected.size() || selected[part.key] == nullptr) continue;
    int& current = open[part.server];
    if (current < 0 || filled[part.server] + part.length > limit[part.server] ||
        batches[current].size() == kMaxPartsPerRequest) {
      current = static_cast<int>(batches.size());
      batches.emplace_back();
      filled[part.server] = 0;
    }
    batches[current].push_back(&part);
    filled[part.server] += part.length;
  }
  return batches;
}

v1::RequestId KVWorkerImpl::NextRequestId() {
  std::lock_guard<std::mutex> lock(mutex_);
  v1::RequestId id;
  id.set_node_id(options_.node_id);
  id.set_incarnation(incarnation_);
  id.set_seq(next_seq_);
  unanswered_.insert(next_seq_);
  id.set_acked_below(*unanswered_.begin());
  ++next_seq_;
  return id;
}

void KVWorkerImpl::Acknowledge(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  unanswered_.erase(seq);
}

KVWorker::Ticket KVWorkerImpl::NewTicket(int requests, std::shared_ptr<Pending>* pending) {
  *pending = std::make_shared<Pending>();
  (*pending)->remaining = requests;
  std::lock_guard<std::mutex> lock(mutex_);
  Ticket ticket = next_ticket_++;
  pending_[ticket] = *pending;
  return ticket;
}

void KVWorkerImpl::Complete(const std::shared_ptr<Pending>& pending, const Status& status) {
  std::function<void()> then;
  {
    std::lock_guard<std::mutex> lock(pending->mutex);
    if (!status.ok() && pending->status.ok()) pending->status = status;
    if (--pending->remaining > 0) return;
    if (pending->status.ok() && pending->then && pending->then_requests > 0) {
      then = std::move(pending->then);
      pending->then = nullptr;
      pending->remaining = pending->then_requests;
    }
  }
  if (then) {
    then();  // starts the second stage; its requests complete the ticket
    return;
  }
  pending->done.notify_all();
}

// The lowest key of a batch: the forward pass reads keys in order, so the
// lower the key, the sooner the next step needs it (task_pool.h).
int64_t KVWorkerImpl::Priority(const std::vector<const Part*>& batch) {
  int64_t lowest = INT64_MAX;
  for (const Part* part : batch) lowest = std::min<int64_t>(lowest, part->key);
  return lowest;
}

void KVWorkerImpl::StepPushed(Pending& pending, uint64_t step) {
  // Before any request of the step moves a residual on (every one of the
  // step before has: its values were pulled first).
  if (residual_copies_) residual_copies_->BeforeStep(step);
  uint64_t done = steps_pushed_.load();
  while (done < step + 1 && !steps_pushed_.compare_exchange_weak(done, step + 1)) {
  }
  if (!options_.async) return;
  scheduler_.ReportStep(step);
  pending.step_done = step + 1;  // before any request of the ticket runs
}

KVWorker::Ticket KVWorkerImpl::Push(const std::vector<const float*>& grads, uint64_t step) {
  auto batches = Batches(grads);
  std::shared_ptr<Pending> pending;
  Ticket ticket = NewTicket(static_cast<int>(batches.size()), &pending);
  StepPushed(*pending, step);
  for (auto& batch : batches) {
    push_pool_->Run(
        [this, batch, grads, step, pending] { Complete(pending, PushBatch(batch, grads, step)); },
        Priority(batch));
  }
  return ticket;
}

std::vector<float*> KVWorkerImpl::Destinations(std::vector<float*> values, uint64_t version) {
  if (!shared_) return values;
  for (size_t key = 0; key < values.size(); ++key) {
    if (values[key])
      values[key] = shared_->Destination(static_cast<uint32_t>(key), values[key], version);
  }
  return values;
}

KVWorker::Ticket KVWorkerImpl::Pull(const std::vector<float*>& given, uint64_t min_version) {
  const std::vector<float*> values = Destinations(given, min_version);
  auto batches = Batches(values);
  std::shared_ptr<Pending> pending;
  Ticket ticket = NewTicket(static_cast<int>(batches.size()), &pending);
  for (auto& batch : batches) {
    pull_pool_->Run(
        [this, batch, values, min_version, pending] {
          Complete(pending, PullBatch(batch, values, min_version, pending));
        },
        Priority(batch));
  }
  return ticket;
}

KVWorker::Ticket KVWorkerImpl::PushPull(const std::vector<const float*>& grads,
                                        const std::vector<float*>& given, uint64_t step) {
  const std::vector<float*> values = Destinations(given, step + 1);
  auto push_batches = Batches(grads);
  auto pull_batches = Batches(values);
  std::shared_ptr<Pending> pending;
  if (push_batches == pull_batches) {
    // The same parts both ways: each batch's push and pull are one call, the
    // pull answered as soon as the push is applied and the step complete, so
    // the first parts travel back while the last are still being pushed,
    // instead of the pipeline draining in between. A pull that was not
    // ready within the call's long-poll slice goes on in the pull pool,
    // giving the push thread back.
    Ticket ticket = NewTicket(static_cast<int>(push_batches.size()), &pending);
    StepPushed(*pending, step);
    for (auto& batch : push_batches) {
      push_pool_->Run(
          [this, batch, grads, values, step, pending] {
            bool answered = false;
            Status s = PushPullBatch(batch, grads, values, step, pending, &answered);
            if (!s.ok() || answered) return Complete(pending, s);
            pull_pool_->Run(
                [this, batch, values, step, pending] {
                  Complete(pending, PullBatch(batch, values, step + 1, pending));
                },
                Priority(batch));
          },
          Priority(batch));
    }
    return ticket;
  }
  Ticket ticket = NewTicket(static_cast<int>(push_batches.size()), &pending);
  StepPushed(*pending, step);
  auto start_pulls = [this, pending, pull_batches, values, step] {
    for (auto& batch : pull_batches) {
      pull_pool_->Run([this, batch, values, step,
                       pending] { Complete(pending, PullBatch(batch, values, step + 1, pending)); },
                      Priority(batch));
    }
  };
  if (push_batches.empty()) {
    pending->remaining = static_cast<int>(pull_batches.size());
    start_pulls();
    return ticket;
  }
  pending->then = start_pulls;
  pending->then_requests = static_cast<int>(pull_batches.size());
  for (auto& batch : push_batches) {
    push_pool_->Run(
        [this, batch, grads, step, pending] { Complete(pending, PushBatch(batch, grads, step)); },
        Priority(batch));
  }
  return ticket;
}

Status KVWorkerImpl::Wait(Ticket ticket) {
  uint64_t version = 0;
  return WaitWithVersion(ticket, &version);
}

Status KVWorkerImpl::WaitWithVersion(Ticket ticket, uint64_t* version) {
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(ticket);
    if (it == pending_.end())
      return Status::Error("Wait: unknown ticket " + std::to_string(ticket));
    pending = it->second;
    pending_.erase(it);
  }
  std::unique_lock<std::mutex> lock(pending->mutex);
  pending->done.wait(lock, [&] { return pending->remaining <= 0; });
  *version = pending->version == UINT64_MAX ? 0 : pending->version;
  if (pending->status.ok() && pending->step_done > scheduler_.reported_step())
    scheduler_.ReportStep(pending->step_done);
  return pending->status;
}

Status KVWorkerImpl::Barrier(const std::string& name) {
  return scheduler_.Barrier(name, rank_, [this] { return JobStopped(); });
}

Status KVWorkerImpl::Finish() { return scheduler_.Finish(rank_, steps_pushed_.load()); }

}  // namespace kubeps
