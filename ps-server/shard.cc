#include "ps-server/shard.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include "common/copy_bytes.h"
#include "common/logging.h"
#include "common/long_poll.h"
#include "common/termination_message.h"
#include "ps-server/shard_messages.h"

namespace kubeps {

using shard_messages::Describe;
using shard_messages::Invalid;

namespace {

// kubeps.torch leaves out of a parameter's name the wrappers a run may add
// or drop: torch.compile's "_orig_mod." anywhere, and the leading "module."
// of nn.DataParallel and DistributedDataParallel. Releases before kept them,
// and checkpoints they wrote hold such names: the same tensor as the name
// without them declared now (not the other way round: a name declared with
// them now is a submodule of that name).
std::string WithoutWrappers(const std::string& name) {
  std::string out;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view segment(name.data() + start, dot - start);
    if (segment != "_orig_mod") {
      if (!out.empty()) out += '.';
      out += segment;
    }
    start = dot + 1;
  }
  constexpr std::string_view kParallelWrapper = "module.";
  if (out.rfind(kParallelWrapper, 0) == 0) out.erase(0, kParallelWrapper.size());
  return out;
}

}  // namespace

Shard::Shard(const ShardOptions& options, std::unique_ptr<Optimizer> optimizer,
             MetricsServer* metrics)
    : options_(options),
      optimizer_(std::move(optimizer)),
      update_threads_(std::max(1, options.update_threads)),
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
                                            "Checkpoint writes that failed")),
      folders_not_flushed_(metrics->Counter(
          "kubeps_server_checkpoint_folder_flush_failures_total",
          "Files renamed into the checkpoint folder whose entry could not be flushed to the disk "
          "(a failing disk: the file may not survive a crash of the node)")),
      learning_rate_(metrics->Gauge("kubeps_server_learning_rate",
                                    "The learning rate of the last update this shard applied "
                                    "(spec.optimizer.schedule)")) {
  if (!options_.checkpoint_dir.empty()) {
    Status s = CheckpointStore::Open(options_.checkpoint_dir, &checkpoints_);
    if (!s.ok()) KLOG_ERROR << s.message() << "; this shard will not checkpoint";
  }
  if (checkpoints_) {
    writer_ = std::make_unique<CheckpointWriter>(
        [this](const v1::ShardCheckpoint& checkpoint) { (void)WriteCheckpoint(checkpoint); });
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
  // A check may name no part: the worker places none on this server.
  if (!request.check_only() || request.parts_size() > 0) {
    grpc::Status valid =
        CheckParts(request.parts(), request.check_only() ? SIZE_MAX : request.data().size(), false);
    if (!valid.ok()) return valid;
  }
  if (grpc::Status same = CheckDeclaredAsStored(request); !same.ok()) return same;
  // A part stored without a name (before names were kept) takes the first
  // one it is told.
  auto adopt_names = [&] {
    for (int i = 0; i < request.names_size(); ++i) {
      auto it = parts_.find({request.parts(i).key(), request.parts(i).offset()});
      if (it != parts_.end() && it->second.name.empty()) it->second.name = request.names(i);
    }
  };
  if (request.check_only()) {
    adopt_names();
    return grpc::Status::OK;
  }
  if (key_set_fixed_) {
    for (const auto& ref : request.parts()) {
      if (!parts_.count({ref.key(), ref.offset()})) {
        // A restarted rank 0 whose program declares a tensor more.
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            Describe(ref) +
                                ": not stored on this server, and the key set is fixed since the "
                                "first push (every part is initialised before any worker "
                                "pushes): " +
                                kModelMismatchRefusal + ", or the program changed since");
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
      it->second.value = std::make_shared<ValueBuffer>(data, ref.length());
      ResetContributions(it->second);
    } else {
      ++kept;
    }
    data += ref.length();
  }
  adopt_names();
  response->set_already_initialized(kept);
  lock.unlock();
  advanced_.notify_all();
  return grpc::Status::OK;
}

grpc::Status Shard::CheckDeclaredAsStored(const v1::InitRequest& request) const {
  const bool named = !request.names().empty();
  if (named && request.names_size() != request.parts_size()) {
    return Invalid(std::to_string(request.names_size()) + " names for " +
                   std::to_string(request.parts_size()) + " parts: want one per part, or none");
  }
  for (const std::string& name : request.names()) {
    if (name.size() > kMaxTensorNameBytes) {  // they go into every checkpoint
      return Invalid("a tensor name of " + std::to_string(name.size()) + " bytes: at most " +
                     std::to_string(kMaxTensorNameBytes));
    }
  }
  const std::string& node = request.id().node_id();
  auto refuse = [&](const std::string& why) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        why + ": " + kModelMismatchRefusal +
                            ", the program changed since the job started, the checkpoints "
                            "resumed from are another model's (or were placed under another "
                            "spec.bigArrayBound: kubeps reshard JOB.yaml cuts them for this "
                            "one), or the workers' kubeps versions "
                            "place tensors otherwise (an agent image changed mid-job; keys are "
                            "given in the order a program declares its tensors)");
  };
  if (request.check_only() && parts_.size() > request.parts_on_server()) {
    const uint32_t n = request.parts_on_server();
    return refuse(node + " places " + std::to_string(n) + (n == 1 ? " part" : " parts") +
                  " on this server, which holds " + std::to_string(parts_.size()) + " (rank 0's)");
  }
  for (int i = 0; i < request.parts_size(); ++i) {
    const v1::PartRef& ref = request.parts(i);
    const std::string name = named ? "\"" + request.names(i) + "\"" : "a tensor";
    // Not held: rank 0 declares it now, or (a check) this shard restarted
    // empty and rank 0's next Init fills it. Not a verdict on the model.
    auto it = parts_.find({ref.key(), ref.offset()});
    if (it == parts_.end()) continue;
    const Part& part = it->second;
    if (part.value->size() != ref.length()) {
      return refuse(node + " declares " + name + " as " + Describe(ref) +
                    ", but this server holds " + std::to_string(part.value->size()) +
                    " elements there");
    }
    if (named && !part.name.empty() && !request.names(i).empty() && part.name != request.names(i) &&
        WithoutWrappers(part.name) != request.names(i)) {
      return refuse(node + " declares " + name + " as " + Describe(ref) +
                    ", but this server holds \"" + part.name + "\" there");
    }
  }
  return grpc::Status::OK;
}

Shard::Values Shard::Writable(const Values& candidate, size_t n) {
  // Under mutex_: every other owner is an answer, which only lets go, so a
  // count of one stays one. The fence orders our writes after the reads of
  // the answer that let go last (as the count's decrement publishes them).
  // A worker that maps the buffer holds no count: in sync mode it reads it
  // only until its next pull, which comes before the gradient that lets
  // this update happen (MappedValues).
  if (candidate && candidate.use_count() == 1 && candidate->size() == n &&
      (candidate->segment() != nullptr) == Shares(n)) {
    std::atomic_thread_fence(std::memory_order_acquire);
    return candidate;
  }
  return NewValues(n);
}

Shard::Values Shard::NewValues(size_t n) {
  if (Shares(n)) {
    if (std::unique_ptr<ValueBuffer> shared =
            ValueBuffer::InSharedMemory(options_.shared_values_owner, n)) {
      return Values(std::move(shared));
    }
    sharing_ = Sharing::kNoRoom;
  }
  return std::make_shared<ValueBuffer>(n);
}

void Shard::ResetContributions(Part& part) const {
  if (!options_.sync) return;
  part.contributions.resize(options_.num_workers);
  part.contributed.assign(options_.num_workers, false);
  part.copying.assign(options_.num_workers, 0);
  part.shares.assign(options_.num_workers, 0);
  part.received = 0;
  part.expected = 0;
}

int Shard::Contributors(const v1::PushRequest& request) const {
  return request.contributors() == 0 ? options_.num_workers
                                     : static_cast<int>(request.contributors());
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
  if (landing && options_.sync && !options_.shared_values_owner.empty() &&
      sharing_ == Sharing::kNotAsked) {
    for (int i = 0; i < request.parts_size(); ++i) {
      if (landing->MayMap(i)) sharing_ = Sharing::kYes;
    }
  }
  const grpc::Status stopped(grpc::StatusCode::UNAVAILABLE,
                             "this shard is shutting down (the job is over or it was stopped)");
  auto ready = [&] {
    if (stopping_) return true;
    if (request.generation() != generation_) return true;  // rolled back while waiting
    for (const auto& ref : request.parts()) {
      auto it = parts_.find({ref.key(), ref.offset()});
      if (it == parts_.end() || it->second.version < request.min_version() || it->second.updating) {
        return false;
      }
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
      if (const SharedSegment* segment = values[i]->segment();
          segment && landing->MayMap(static_cast<int>(i))) {
        v1::MappedValues& mapped = answer->mapped.emplace_back();
        mapped.set_part(static_cast<uint32_t>(i));
        mapped.set_segment(segment->name());
        mapped.set_nonce(segment->nonce());
        mapped.set_offset(ValueBuffer::DataOffset());
        mapped.set_version(versions[i]);
        continue;
      }
      float* region = nullptr;
      if (grpc::Status s = landing->Begin(static_cast<int>(i), &region); !s.ok()) return s;
      if (region) {
        CopyBytes(region, values[i]->data(), values[i]->size() * sizeof(float));
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
  return it == parts_.end() ? std::vector<float>{} : it->second.value->Copy();
}

uint64_t Shard::PartVersion(uint32_t key, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parts_.find({key, offset});
  return it == parts_.end() ? 0 : it->second.version;
}

}  // namespace kubeps
