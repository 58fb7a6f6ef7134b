#include "ps-server/shard.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "common/logging.h"
#include "common/long_poll.h"
#include "common/termination_message.h"

namespace kubeps {
namespace {

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

std::string Describe(const v1::PartRef& ref) {
  return "part (key " + std::to_string(ref.key()) + ", offset " + std::to_string(ref.offset()) +
         ", length " + std::to_string(ref.length()) + ")";
}

}  // namespace

Shard::Shard(const ShardOptions& options, std::unique_ptr<Optimizer> optimizer,
             MetricsServer* metrics)
    : options_(options),
      optimizer_(std::move(optimizer)),
      pushes_(metrics->Counter("kubeps_server_pushes_total", "Push requests applied")),
      pulls_(metrics->Counter("kubeps_server_pulls_total", "Pull requests answered")),
      updates_(metrics->Counter("kubeps_server_updates_applied_total",
                                "Optimizer updates applied to a parameter part")),
      push_bytes_(metrics->Counter("kubeps_server_push_bytes_total", "Gradient bytes received")),
      pull_bytes_(metrics->Counter("kubeps_server_pull_bytes_total", "Parameter bytes sent")),
      duplicates_(metrics->Counter("kubeps_server_duplicates_suppressed_total",
                                   "Resent requests answered without being applied again")),
      checkpoints_written_(
          metrics->Counter("kubeps_server_checkpoints_total", "Checkpoints written")),
      nonfinite_pushes_(metrics->Counter("kubeps_server_nonfinite_pushes_total",
                                         "Pushes holding a NaN or Inf gradient")),
      updates_skipped_(metrics->Counter(
          "kubeps_server_updates_skipped_total",
          "Updates of a parameter part skipped for a non-finite gradient (nonFinite: SkipStep)")),
      checkpoint_failures_(metrics->Counter("kubeps_server_checkpoint_failures_total",
                                            "Checkpoint writes that failed")) {
  if (!options_.checkpoint_dir.empty()) {
    Status s = CheckpointStore::Open(options_.checkpoint_dir, &checkpoints_);
    if (!s.ok()) KLOG_ERROR << s.message() << "; this shard will not checkpoint";
  }
}

grpc::Status Shard::CheckGeneration(uint64_t generation) const {
  if (awaiting_recovery_) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        "this shard restarted from a checkpoint and waits for the job to roll back");
  }
  if (generation < generation_) {
    return grpc::Status(grpc::StatusCode::ABORTED,
                        "the job rolled back (generation " + std::to_string(generation_) + ")");
  }
  if (generation > generation_) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this shard is still restoring generation " + std::to_string(generation));
  }
  return grpc::Status::OK;
}

uint64_t Shard::generation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation_;
}

grpc::Status Shard::CheckParts(const google::protobuf::RepeatedPtrField<v1::PartRef>& parts,
                               size_t data_bytes, bool must_exist,
                               GradientEncoding encoding) const {
  if (parts.empty()) return Invalid("request names no parts");
  if (static_cast<size_t>(parts.size()) > kMaxPartsPerRequest) {
    return Invalid("request names " + std::to_string(parts.size()) + " parts, at most " +
                   std::to_string(kMaxPartsPerRequest));
  }
  uint64_t total = 0, encoded = 0;
  for (const auto& ref : parts) {
    if (ref.length() == 0 || ref.length() > (1ull << 32)) {
      return Invalid(Describe(ref) + ": bad length");
    }
    total += ref.length();
    encoded += EncodedBytes(encoding, ref.length());
  }
  if (total * sizeof(float) > kMaxRequestBytes) {
    return Invalid("request's parts hold " + std::to_string(total * sizeof(float)) +
                   " bytes, more than the " + std::to_string(kMaxRequestBytes) +
                   " bytes (256 MiB) one request may move");
  }
  // Each part once: a part named twice would be answered twice (a pull's
  // answer grows without bound) or applied twice (an async push).
  std::vector<const v1::PartRef*> sorted;
  sorted.reserve(parts.size());
  for (const auto& ref : parts) sorted.push_back(&ref);
  auto key_of = [](const v1::PartRef* r) { return PartKey{r->key(), r->offset()}; };
  std::sort(sorted.begin(), sorted.end(),
            [&](const v1::PartRef* a, const v1::PartRef* b) { return key_of(a) < key_of(b); });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (key_of(sorted[i]) == key_of(sorted[i - 1])) {
      return Invalid(Describe(*sorted[i]) + " listed twice in one request");
    }
  }
  for (const auto& ref : parts) {
    if (!must_exist) continue;
    auto it = parts_.find({ref.key(), ref.offset()});
    if (it == parts_.end()) return Invalid(Describe(ref) + ": not stored on this server");
    if (it->second.value->size() != ref.length()) {
      return Invalid(Describe(ref) + ": this server stores " +
                     std::to_string(it->second.value->size()) + " elements there");
    }
  }
  if (data_bytes != SIZE_MAX && data_bytes != encoded) {
    return Invalid("data holds " + std::to_string(data_bytes) + " bytes, parts need " +
                   std::to_string(encoded) +
                   (encoding == GradientEncoding::kFloat32
                        ? std::string()
                        : std::string(" as ") + GradientEncodingName(encoding)));
  }
  return grpc::Status::OK;
}

grpc::Status Shard::Init(const v1::InitRequest& request, v1::InitResponse* response) {
  std::unique_lock<std::mutex> lock(mutex_);
  grpc::Status valid = CheckParts(request.parts(), request.data().size(), false);
  if (!valid.ok()) return valid;
  if (key_set_fixed_) {
    for (const auto& ref : request.parts()) {
      if (!parts_.count({ref.key(), ref.offset()})) {
        return Invalid(Describe(ref) +
                       ": not stored on this server, and the key set is fixed since the first "
                       "push (every part is initialised before any worker pushes)");
      }
    }
  }
  // Init is idempotent by nature (first value wins), so it needs no dedup:
  // rank 0's resends and a restarted rank 0 leave the parameters alone.
  const float* data = reinterpret_cast<const float*>(request.data().data());
  uint32_t kept = 0;
  for (const auto& ref : request.parts()) {
    auto [it, inserted] = parts_.try_emplace({ref.key(), ref.offset()});
    if (inserted) {
      it->second.value = std::make_shared<std::vector<float>>(data, data + ref.length());
      ResetContributions(it->second);
    } else {
      ++kept;
    }
    data += ref.length();
  }
  response->set_already_initialized(kept);
  lock.unlock();
  advanced_.notify_all();
  return grpc::Status::OK;
}

Shard::Values Shard::Writable(const Values& candidate, size_t n) {
  // Under mutex_: every other owner is an answer, which only lets go, so a
  // count of one stays one. The fence orders our writes after the reads of
  // the answer that let go last (as the count's decrement publishes them).
  if (candidate && candidate.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    candidate->resize(n);
    return candidate;
  }
  return std::make_shared<std::vector<float>>(n);
}

void Shard::ResetContributions(Part& part) const {
  if (!options_.sync) return;
  part.contributions.resize(options_.num_workers);
  part.contributed.assign(options_.num_workers, false);
  part.shares.assign(options_.num_workers, 0);
  part.received = 0;
  part.expected = 0;
}

int Shard::Contributors(const v1::PushRequest& request) const {
  return request.contributors() == 0 ? options_.num_workers
                                     : static_cast<int>(request.contributors());
}

int Shard::Gather(const v1::PushRequest& request, PushData& data, std::vector<Part*>* gathered) {
  const int rank = request.worker_rank();
  int non_finite = -1;
  gathered->clear();
  if (!options_.sync) {
    uint64_t total = 0;
    for (const auto& ref : request.parts()) total += ref.length();
    async_gradient_.resize(total);
    float* out = async_gradient_.data();
    for (int i = 0; i < request.parts_size(); ++i) {
      const auto& ref = request.parts(i);
      gathered->push_back(&parts_.at({ref.key(), ref.offset()}));
      if (!data.Read(out, ref.length()) && non_finite < 0) non_finite = i;
      out += ref.length();
    }
    return non_finite;
  }
  for (int i = 0; i < request.parts_size(); ++i) {
    const auto& ref = request.parts(i);
    Part& part = parts_.at({ref.key(), ref.offset()});
    const size_t n = part.value->size();
    // A gradient for a step already applied, or a second one from the same
    // worker for this step (a restarted worker redoing it), changes nothing.
    if (request.step() < part.version || part.contributed[rank]) {
      data.Skip(n);
      gathered->push_back(nullptr);
      continue;
    }
    // The slot is not marked yet: a push refused below leaves nothing behind.
    // The step's last gradient is not kept: it is added to the others as it
    // is read, a copy less of every byte.
    bool finite;
    if (part.received + 1 == Contributors(request)) {
      finite = GatherLast(part, rank, request, data);
    } else {
      part.contributions[rank].resize(n);
      finite = data.Read(part.contributions[rank].data(), n);
    }
    if (!finite && non_finite < 0) non_finite = i;
    gathered->push_back(&part);
  }
  return non_finite;
}

void Shard::Apply(const v1::PushRequest& request, const std::vector<Part*>& gathered, bool skip) {
  if (!options_.sync) {
    const float* gradient = async_gradient_.data();
    for (Part* part : gathered) {
      const size_t n = part->value->size();
      if (skip) {
        updates_skipped_.Increment();
      } else {
        // In place unless a pull answer still holds the values.
        Values next = Writable(part->value, n);
        optimizer_->Apply(part->value->data(), next->data(), gradient, n, &part->state);
        part->value = std::move(next);
        ++part->version;
        updates_.Increment();
      }
      gradient += n;
    }
    return;
  }
  const int expected = Contributors(request);
  for (Part* part : gathered) {
    if (part == nullptr) continue;
    part->contributed[request.worker_rank()] = true;
    part->shares[request.worker_rank()] = request.share();
    part->global_batch = request.global_batch();
    part->expected = expected;
    part->skip_update |= skip;
    if (++part->received == expected) CompleteStep(*part);
  }
}

bool Shard::GatherLast(Part& part, int rank, const v1::PushRequest& request, PushData& data) {
  const size_t n = part.value->size();
  part.shares[rank] = request.share();
  part.global_batch = request.global_batch();
  std::vector<int> ranks;  // the step's contributors, this push's among them, in rank order
  bool equal_shares = true;
  for (int r = 0; r < static_cast<int>(part.contributed.size()); ++r) {
    if (!part.contributed[r] && r != rank) continue;
    equal_shares = equal_shares && part.shares[r] == part.shares[ranks.empty() ? r : ranks[0]];
    ranks.push_back(r);
  }
  // Equal shares (every fixed job): the plain mean. Otherwise each
  // gradient, a mean over its share of the step's examples, counts by
  // that share, so the sum is the mean over the whole global batch.
  equal_shares = equal_shares || part.global_batch == 0;
  auto weight = [&](int r) {
    return equal_shares
               ? 1.0f
               : static_cast<float>(part.shares[r]) / static_cast<float>(part.global_batch);
  };
  const float scale = equal_shares ? 1.0f / static_cast<float>(ranks.size()) : 1.0f;
  // The mean goes to this push's slot, which holds nothing this step.
  part.contributions[rank].resize(n);
  float* mean = part.contributions[rank].data();
  // Block by block, so that the sum and the scaling read each gradient
  // from memory once (a big part is many times the cache), and this push's
  // block is read from the request (and checked) just before it is added.
  constexpr size_t kBlock = 4096;
  float incoming[kBlock];
  bool finite = true;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t len = std::min(kBlock, n - begin);
    finite &= data.Read(incoming, len);
    auto block = [&](int r) -> const float* {
      return r == rank ? incoming : part.contributions[r].data() + begin;
    };
    float* __restrict m = mean + begin;
    const float* __restrict first = block(ranks[0]);
    const float first_weight = weight(ranks[0]);
    if (equal_shares) {
      std::copy_n(first, len, m);
    } else {
      for (size_t i = 0; i < len; ++i) m[i] = first[i] * first_weight;
    }
    for (size_t k = 1; k < ranks.size(); ++k) {
      const float* __restrict g = block(ranks[k]);
      if (equal_shares) {
        for (size_t i = 0; i < len; ++i) m[i] += g[i];
      } else {
        const float w = weight(ranks[k]);
        for (size_t i = 0; i < len; ++i) m[i] += w * g[i];
      }
    }
    if (equal_shares) {
      for (size_t i = 0; i < len; ++i) m[i] *= scale;
    }
  }
  part.mean_rank = rank;
  return finite;
}

void Shard::CompleteStep(Part& part) {
  const size_t n = part.value->size();
  if (part.skip_update) {
    // SkipStep: the step ends without an update, so that every worker's
    // pull of the next version is answered (with this one's values).
    part.previous = part.value;
    updates_skipped_.Increment();
  } else {
    Values next = Writable(part.previous, n);
    optimizer_->Apply(part.value->data(), next->data(), part.contributions[part.mean_rank].data(),
                      n, &part.state);
    part.previous = std::move(part.value);
    part.value = std::move(next);
    updates_.Increment();
  }
  part.contributed.assign(options_.num_workers, false);
  part.received = 0;
  part.expected = 0;
  part.skip_update = false;
  ++part.version;
}

grpc::Status Shard::Push(const v1::PushRequest& request, PushData& data) {
  if (request.worker_rank() < 0 || request.worker_rank() >= options_.num_workers) {
    return Invalid("worker_rank " + std::to_string(request.worker_rank()) + " outside [0, " +
                   std::to_string(options_.num_workers) + ")");
  }
  if (static_cast<int>(request.contributors()) > options_.num_workers ||
      request.share() > request.global_batch()) {
    return Invalid("worker_rank " + std::to_string(request.worker_rank()) + ": contributors " +
                   std::to_string(request.contributors()) + " (at most " +
                   std::to_string(options_.num_workers) + "), share " +
                   std::to_string(request.share()) + " of global_batch " +
                   std::to_string(request.global_batch()));
  }
  // The exactly-once table keys on the sender's id: without one, every
  // later push would be a duplicate of sender "" and be dropped.
  if (request.id().node_id().empty()) {
    return Invalid("push without a request id (id.node_id is empty) from worker_rank " +
                   std::to_string(request.worker_rank()));
  }
  std::unique_ptr<v1::ShardCheckpoint> due;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (grpc::Status g = CheckGeneration(request.generation()); !g.ok()) return g;
    grpc::Status valid = CheckParts(request.parts(), data.size(), true, data.encoding());
    if (!valid.ok()) return valid;
    uint64_t checkpoint_step = 0;
    if (options_.sync && CheckpointDue(&checkpoint_step)) {
      due = std::make_unique<v1::ShardCheckpoint>(Snapshot(checkpoint_step));
      last_checkpoint_ = static_cast<int64_t>(checkpoint_step);
    }
    if (options_.sync) {
      for (const auto& ref : request.parts()) {
        const Part& part = parts_.at({ref.key(), ref.offset()});
        if (request.step() > part.version) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              Describe(ref) + " is at step " + std::to_string(part.version) +
                                  ", push is for step " + std::to_string(request.step()));
        }
        // Every worker of a step has the same schedule (common/membership.h):
        // pushes that disagree on the step's workers are a bug, never summed.
        if (request.step() == part.version && part.expected != 0 &&
            part.expected != Contributors(request)) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              Describe(ref) + ": worker " + std::to_string(request.worker_rank()) +
                                  "'s push says step " + std::to_string(request.step()) + " has " +
                                  std::to_string(Contributors(request)) +
                                  " workers, earlier pushes said " + std::to_string(part.expected));
        }
      }
    }
  }
  switch (dedup_.Begin(request.id())) {
    case DedupTable::Verdict::kApply:
      break;
    case DedupTable::Verdict::kDuplicate:
      duplicates_.Increment();
      return grpc::Status::OK;  // the original answer: the push was applied
    case DedupTable::Verdict::kStale:
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "push from incarnation " + std::to_string(request.id().incarnation()) +
                              " of " + request.id().node_id() +
                              ", which the scheduler has replaced by incarnation " +
                              std::to_string(dedup_.CurrentIncarnation(request.id().node_id())) +
                              ": not applied (the process it came from restarted)");
    case DedupTable::Verdict::kNotYetKnown:
      // The client resends; the next heartbeat brings the scheduler's view.
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "incarnation " + std::to_string(request.id().incarnation()) + " of " +
                              request.id().node_id() +
                              " is not yet known to this shard (it has not heard from the "
                              "scheduler since that process registered); try again");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A restore may have happened since the checks above.
    if (grpc::Status g = CheckGeneration(request.generation()); !g.ok()) {
      dedup_.Done(request.id());
      return g;
    }
    std::vector<Part*> gathered;
    const int non_finite = Gather(request, data, &gathered);
    if (non_finite >= 0) {
      nonfinite_pushes_.Increment();
      if (options_.non_finite == NonFinitePolicy::kFail) {
        // Not applied, so not recorded as applied: the id stays free.
        dedup_.Abandon(request.id());
        return Invalid("the gradient of " + request.id().node_id() + " (rank " +
                       std::to_string(request.worker_rank()) + ") for step " +
                       std::to_string(request.step()) + ", " + Describe(request.parts(non_finite)) +
                       ", " + kNonFiniteGradientRefusal +
                       ": the model diverged; lower the learning rate, or set spec.nonFinite: "
                       "SkipStep to skip such steps");
      }
    }
    Apply(request, gathered, non_finite >= 0);
    key_set_fixed_ = true;
    ++applied_pushes_;
    uint64_t checkpoint_step = 0;
    if (!options_.sync && CheckpointDue(&checkpoint_step)) {
      due = std::make_unique<v1::ShardCheckpoint>(Snapshot(checkpoint_step));
      last_checkpoint_ = static_cast<int64_t>(checkpoint_step);
    }
  }
  dedup_.Done(request.id());
  if (due) (void)WriteCheckpoint(*due);  // logged and counted; see CheckpointFailure
  advanced_.notify_all();
  pushes_.Increment();
  push_bytes_.Increment(static_cast<double>(data.size()));
  return grpc::Status::OK;
}

void Shard::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  advanced_.notify_all();
}

grpc::Status Shard::Pull(const v1::PullRequest& request, PullAnswer* answer,
                         const std::function<bool()>& cancelled, PullLanding* landing) {
  *answer = PullAnswer{};
  if (grpc::Status w = CheckLongPollWait("Pull", request.wait_ms()); !w.ok()) return w;
  grpc::Status valid = CheckParts(request.parts(), SIZE_MAX, false);
  if (!valid.ok()) return valid;
  std::unique_lock<std::mutex> lock(mutex_);
  if (grpc::Status g = CheckGeneration(request.generation()); !g.ok()) return g;
  const grpc::Status stopped(grpc::StatusCode::UNAVAILABLE,
                             "this shard is shutting down (the job is over or it was stopped)");
  auto ready = [&] {
    if (stopping_) return true;
    if (request.generation() != generation_) return true;  // rolled back while waiting
    for (const auto& ref : request.parts()) {
      auto it = parts_.find({ref.key(), ref.offset()});
      if (it == parts_.end() || it->second.version < request.min_version()) return false;
    }
    return true;
  };
  switch (WaitLongPoll(lock, advanced_, request.wait_ms(), ready, cancelled)) {
    case LongPollEnd::kCancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, "the pull was cancelled while it waited");
    case LongPollEnd::kTimedOut:
      return grpc::Status::OK;  // ready = false
    case LongPollEnd::kReady:
      break;
  }
  if (stopping_) return stopped;
  if (grpc::Status g = CheckGeneration(request.generation()); !g.ok()) return g;
  grpc::Status exists = CheckParts(request.parts(), SIZE_MAX, true);
  if (!exists.ok()) return exists;
  // References to the values, taken under the lock; read after it.
  std::vector<PartValues> values;
  std::vector<uint64_t> versions;
  values.reserve(request.parts_size());
  versions.reserve(request.parts_size());
  uint64_t total = 0;
  for (const v1::PartRef& ref : request.parts()) {
    const Part& part = parts_.at({ref.key(), ref.offset()});
    // Sync: a part one step past the version asked for is answered as it was
    // at that version (see Part::previous), so that every part answered
    // belongs to the same step.
    const bool as_before =
        options_.sync && part.version == request.min_version() + 1 && part.previous;
    values.push_back(as_before ? part.previous : part.value);
    versions.push_back(as_before ? request.min_version() : part.version);
    total += ref.length();
  }
  lock.unlock();
  if (landing) {
    for (size_t i = 0; i < values.size(); ++i) {
      float* region = nullptr;
      if (grpc::Status s = landing->Begin(static_cast<int>(i), &region); !s.ok()) return s;
      if (region) {
        std::copy(values[i]->begin(), values[i]->end(), region);
        landing->Done(static_cast<int>(i), versions[i]);
      }
    }
  } else {
    answer->values = std::move(values);
  }
  answer->ready = true;
  answer->landed = landing != nullptr;
  answer->version = UINT64_MAX;
  for (uint64_t version : versions) answer->version = std::min(answer->version, version);
  pulls_.Increment();
  pull_bytes_.Increment(static_cast<double>(total * sizeof(float)));
  return grpc::Status::OK;
}

std::vector<float> Shard::PartValue(uint32_t key, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parts_.find({key, offset});
  return it == parts_.end() ? std::vector<float>{} : *it->second.value;
}

uint64_t Shard::PartVersion(uint32_t key, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parts_.find({key, offset});
  return it == parts_.end() ? 0 : it->second.version;
}

}  // namespace kubeps
