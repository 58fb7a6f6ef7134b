#include "ps-server/shard.h"

#include <chrono>
#include <cstring>

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
                                   "Resent requests answered without being applied again")) {}

grpc::Status Shard::CheckParts(const google::protobuf::RepeatedPtrField<v1::PartRef>& parts,
                               size_t data_bytes, bool must_exist) const {
  if (parts.empty()) return Invalid("request names no parts");
  uint64_t total = 0;
  for (const auto& ref : parts) {
    if (ref.length() == 0 || ref.length() > (1ull << 32)) {
      return Invalid(Describe(ref) + ": bad length");
    }
    total += ref.length();
    if (!must_exist) continue;
    auto it = parts_.find({ref.key(), ref.offset()});
    if (it == parts_.end()) return Invalid(Describe(ref) + ": not stored on this server");
    if (it->second.value.size() != ref.length()) {
      return Invalid(Describe(ref) + ": this server stores " +
                     std::to_string(it->second.value.size()) + " elements there");
    }
  }
  if (data_bytes != SIZE_MAX && data_bytes != total * sizeof(float)) {
    return Invalid("data holds " + std::to_string(data_bytes) + " bytes, parts need " +
                   std::to_string(total * sizeof(float)));
  }
  return grpc::Status::OK;
}

grpc::Status Shard::Init(const v1::InitRequest& request, v1::InitResponse* response) {
  std::unique_lock<std::mutex> lock(mutex_);
  grpc::Status valid = CheckParts(request.parts(), request.data().size(), false);
  if (!valid.ok()) return valid;
  // Init is idempotent by nature (first value wins), so it needs no dedup:
  // rank 0's resends and a restarted rank 0 leave the parameters alone.
  const float* data = reinterpret_cast<const float*>(request.data().data());
  uint32_t kept = 0;
  for (const auto& ref : request.parts()) {
    auto [it, inserted] = parts_.try_emplace({ref.key(), ref.offset()});
    if (inserted) {
      it->second.value.assign(data, data + ref.length());
      if (options_.sync) it->second.contributions.resize(options_.num_workers);
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

void Shard::Accumulate(Part& part, int worker_rank, uint64_t step, const float* grad) {
  const size_t n = part.value.size();
  if (!options_.sync) {
    optimizer_->Apply(part.value.data(), grad, n, &part.state);
    ++part.version;
    updates_.Increment();
    return;
  }
  // A gradient for a step already applied, or a second one from the same
  // worker for this step (a restarted worker redoing it), changes nothing.
  if (step < part.version || !part.contributions[worker_rank].empty()) return;
  part.contributions[worker_rank].assign(grad, grad + n);
  if (++part.received < options_.num_workers) return;

  // Sum in rank order: the result is the same whatever order pushes came in.
  std::vector<float> mean(part.contributions[0]);
  for (int r = 1; r < options_.num_workers; ++r) {
    const float* g = part.contributions[r].data();
    for (size_t i = 0; i < n; ++i) mean[i] += g[i];
  }
  const float scale = 1.0f / static_cast<float>(options_.num_workers);
  for (float& x : mean) x *= scale;
  optimizer_->Apply(part.value.data(), mean.data(), n, &part.state);
  for (auto& c : part.contributions) c.clear();
  part.received = 0;
  ++part.version;
  updates_.Increment();
}

grpc::Status Shard::Push(const v1::PushRequest& request, v1::PushResponse* response) {
  if (request.worker_rank() < 0 || request.worker_rank() >= options_.num_workers) {
    return Invalid("worker_rank " + std::to_string(request.worker_rank()) + " outside [0, " +
                   std::to_string(options_.num_workers) + ")");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    grpc::Status valid = CheckParts(request.parts(), request.data().size(), true);
    if (!valid.ok()) return valid;
    if (options_.sync) {
      for (const auto& ref : request.parts()) {
        const Part& part = parts_.at({ref.key(), ref.offset()});
        if (request.step() > part.version) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              Describe(ref) + " is at step " + std::to_string(part.version) +
                                  ", push is for step " + std::to_string(request.step()));
        }
      }
    }
  }
  if (dedup_.Begin(request.id()) == DedupTable::Verdict::kDuplicate) {
    duplicates_.Increment();
    return grpc::Status::OK;  // the original answer: the push was applied
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const float* data = reinterpret_cast<const float*>(request.data().data());
    for (const auto& ref : request.parts()) {
      Accumulate(parts_.at({ref.key(), ref.offset()}), request.worker_rank(), request.step(), data);
      data += ref.length();
    }
  }
  dedup_.Done(request.id());
  advanced_.notify_all();
  pushes_.Increment();
  push_bytes_.Increment(static_cast<double>(request.data().size()));
  return grpc::Status::OK;
}

grpc::Status Shard::Pull(const v1::PullRequest& request, v1::PullResponse* response) {
  grpc::Status valid = CheckParts(request.parts(), SIZE_MAX, false);
  if (!valid.ok()) return valid;
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] {
    for (const auto& ref : request.parts()) {
      auto it = parts_.find({ref.key(), ref.offset()});
      if (it == parts_.end() || it->second.version < request.min_version()) return false;
    }
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(request.wait_ms());
  if (!advanced_.wait_until(lock, deadline, ready)) {
    response->set_ready(false);
    return grpc::Status::OK;
  }
  grpc::Status exists = CheckParts(request.parts(), SIZE_MAX, true);
  if (!exists.ok()) return exists;
  uint64_t total = 0;
  for (const auto& ref : request.parts()) total += ref.length();
  std::string* data = response->mutable_data();
  data->resize(total * sizeof(float));
  char* out = data->data();
  uint64_t min_version = UINT64_MAX;
  for (const auto& ref : request.parts()) {
    const Part& part = parts_.at({ref.key(), ref.offset()});
    std::memcpy(out, part.value.data(), ref.length() * sizeof(float));
    out += ref.length() * sizeof(float);
    min_version = std::min(min_version, part.version);
  }
  lock.unlock();
  response->set_ready(true);
  response->set_version(min_version);
  pulls_.Increment();
  pull_bytes_.Increment(static_cast<double>(data->size()));
  return grpc::Status::OK;
}

std::vector<float> Shard::PartValue(uint32_t key, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parts_.find({key, offset});
  return it == parts_.end() ? std::vector<float>{} : it->second.value;
}

uint64_t Shard::PartVersion(uint32_t key, uint64_t offset) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = parts_.find({key, offset});
  return it == parts_.end() ? 0 : it->second.version;
}

}  // namespace kubeps
