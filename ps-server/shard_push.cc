// How a shard's push moves its gradients (ps-server/shard.h): it claims its
// parts under the shard's lock, copies the gradients in without it (the
// step's last push summing them as it reads its own), counts them in under
// the lock again, and computes a completed step's update without it.
#include <algorithm>

#include "common/termination_message.h"
#include "ps-server/shard.h"
#include "ps-server/shard_messages.h"

namespace kubeps {

using shard_messages::Describe;
using shard_messages::Invalid;

bool Shard::SameWorkerCopying(const v1::PushRequest& request) const {
  if (!options_.sync) return false;
  for (const auto& ref : request.parts()) {
    auto it = parts_.find({ref.key(), ref.offset()});
    if (it != parts_.end() && it->second.copying[request.worker_rank()] != 0) return true;
  }
  return false;
}

grpc::Status Shard::ClaimParts(const v1::PushRequest& request, std::vector<Claim>* claims) {
  const int rank = request.worker_rank();
  // The parts were there when the push was checked, but the shard may have
  // been emptied since (a checkpoint restored): found before any is claimed.
  std::vector<Part*> parts;
  parts.reserve(request.parts_size());
  for (const auto& ref : request.parts()) {
    auto it = parts_.find({ref.key(), ref.offset()});
    if (it == parts_.end()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          Describe(ref) + " is no longer stored on this shard (it was reset)");
    }
    parts.push_back(&it->second);
  }
  const uint64_t order = ++claims_made_;
  claims->assign(request.parts_size(), Claim{});
  for (int i = 0; i < request.parts_size(); ++i) {
    Part& part = *parts[i];
    Claim& claim = (*claims)[i];
    claim.length = part.value->size();
    claim.order = order;
    // A gradient for a step already applied, or a second one from the same
    // worker for this step (a restarted worker redoing it), changes nothing.
    if (options_.sync && (request.step() < part.version || part.contributed[rank])) continue;
    claim.part = &part;
    if (!options_.sync) continue;
    part.copying[rank] = order;
    int in_or_coming = part.received;
    for (uint64_t c : part.copying) in_or_coming += c != 0;
    claim.may_complete = in_or_coming == Contributors(request);
  }
  ++pushes_outside_lock_;
  return grpc::Status::OK;
}

int Shard::CopyIn(const v1::PushRequest& request, PushData& data, std::vector<Claim>* claims,
                  std::vector<float>* async_gradient) {
  const int rank = request.worker_rank();
  int non_finite = -1;
  if (!options_.sync) {
    uint64_t total = 0;
    for (const Claim& claim : *claims) total += claim.length;
    async_gradient->resize(total);
    float* out = async_gradient->data();
    for (size_t i = 0; i < claims->size(); ++i) {
      if (!data.Read(out, (*claims)[i].length) && non_finite < 0) non_finite = static_cast<int>(i);
      out += (*claims)[i].length;
    }
    return non_finite;
  }
  for (size_t i = 0; i < claims->size(); ++i) {
    Claim& claim = (*claims)[i];
    if (claim.part == nullptr) {
      data.Skip(claim.length);
      continue;
    }
    // The step's last gradient is not kept: it is added to the others as it
    // is read, a copy less of every byte.
    MeanPlan plan;
    claim.completes = claim.may_complete && AwaitLast(request, claim, &plan);
    bool finite;
    if (claim.completes) {
      finite = GatherLast(*claim.part, rank, claim.length, plan, data);
    } else {
      // The slot is not marked yet: a push refused below leaves nothing behind.
      std::vector<float>& slot = claim.part->contributions[rank];
      slot.resize(claim.length);
      finite = data.Read(slot.data(), claim.length);
    }
    if (!finite && non_finite < 0) non_finite = static_cast<int>(i);
  }
  return non_finite;
}

bool Shard::AwaitLast(const v1::PushRequest& request, const Claim& claim, MeanPlan* plan) {
  const int rank = request.worker_rank();
  Part& part = *claim.part;
  std::unique_lock<std::mutex> lock(mutex_);
  // Only for the pushes that claimed the part before this one: a push
  // claiming it later waits for this one instead, so no two wait for each
  // other (a resend may claim it while this one waits).
  advanced_.wait(lock, [&] {
    for (int r = 0; r < static_cast<int>(part.copying.size()); ++r) {
      if (r != rank && part.copying[r] != 0 && part.copying[r] < claim.order) return false;
    }
    return true;
  });
  // A push copying in when this one claimed the part may have been refused;
  // and where the step's pushes disagree on its workers, the step may have
  // completed without this one (CheckCounts then drops it).
  if (part.received + 1 != Contributors(request) || part.version != request.step() ||
      part.updating) {
    return false;
  }
  part.shares[rank] = request.share();
  part.global_batch = request.global_batch();
  for (int r = 0; r < static_cast<int>(part.contributed.size()); ++r) {
    if (!part.contributed[r] && r != rank) continue;
    plan->equal_shares = plan->equal_shares &&
                         part.shares[r] == part.shares[plan->ranks.empty() ? r : plan->ranks[0]];
    plan->ranks.push_back(r);
  }
  // Equal shares (every fixed job): the plain mean. Otherwise each
  // gradient, a mean over its share of the step's examples, counts by
  // that share, so the sum is the mean over the whole global batch.
  plan->equal_shares = plan->equal_shares || part.global_batch == 0;
  if (!plan->equal_shares) {
    for (int r : plan->ranks) {
      plan->weights.push_back(static_cast<float>(part.shares[r]) /
                              static_cast<float>(part.global_batch));
    }
  }
  return true;
}

bool Shard::GatherLast(Part& part, int rank, size_t n, const MeanPlan& plan, PushData& data) {
  const std::vector<int>& ranks = plan.ranks;
  const size_t count = ranks.size();
  const float scale = 1.0f / static_cast<float>(count);
  // The mean goes to this push's slot, which holds nothing this step.
  part.contributions[rank].resize(n);
  float* mean = part.contributions[rank].data();
  // Block by block, so that the sum and the scaling read each gradient
  // from memory once (a big part is many times the cache), and this push's
  // block is checked just before it is added: read where it lies (shared
  // memory), else copied into `scratch`.
  constexpr size_t kBlock = 4096;
  float scratch[kBlock];
  bool finite = true;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t len = std::min(kBlock, n - begin);
    bool block_finite = true;
    const float* incoming = data.View(len, scratch, &block_finite);
    finite &= block_finite;
    auto term = [&](size_t k) -> const float* {
      return ranks[k] == rank ? incoming : part.contributions[ranks[k]].data() + begin;
    };
    float* __restrict m = mean + begin;
    const float* __restrict first = term(0);
    if (!plan.equal_shares) {
      for (size_t i = 0; i < len; ++i) m[i] = first[i] * plan.weights[0];
      for (size_t k = 1; k < count; ++k) {
        const float* __restrict g = term(k);
        const float w = plan.weights[k];
        for (size_t i = 0; i < len; ++i) m[i] += w * g[i];
      }
      continue;
    }
    // The plain mean, added in rank order and then scaled, in as few passes
    // as the count allows: each term is read once, and two workers' (the
    // common case) take one pass.
    if (count == 1) {
      for (size_t i = 0; i < len; ++i) m[i] = first[i] * scale;
      continue;
    }
    const float* __restrict second = term(1);
    if (count == 2) {
      for (size_t i = 0; i < len; ++i) m[i] = (first[i] + second[i]) * scale;
      continue;
    }
    for (size_t i = 0; i < len; ++i) m[i] = first[i] + second[i];
    for (size_t k = 2; k < count; ++k) {
      const float* __restrict g = term(k);
      for (size_t i = 0; i < len; ++i) m[i] += g[i];
    }
    for (size_t i = 0; i < len; ++i) m[i] *= scale;
  }
  return finite;
}

void Shard::Release(const v1::PushRequest& request, const std::vector<Claim>& claims) {
  for (const Claim& claim : claims) {
    if (claim.part && options_.sync) claim.part->copying[request.worker_rank()] = 0;
  }
}

grpc::Status Shard::CheckCounts(const v1::PushRequest& request, std::vector<Claim>* claims) const {
  if (!options_.sync) return grpc::Status::OK;
  for (int i = 0; i < request.parts_size(); ++i) {
    Claim& claim = (*claims)[i];
    if (claim.part == nullptr) continue;
    const Part& part = *claim.part;
    // Both only where the step's pushes come from more workers than it has
    // (the workers disagree on who is in it): the step completed without
    // this gradient, which is then dropped as a late one is; or this one
    // would complete it without having summed it, and is refused.
    if (part.version != request.step() || part.updating) {
      claim.part = nullptr;
    } else if (!claim.completes && part.received + 1 >= Contributors(request)) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          Describe(request.parts(i)) + ": step " + std::to_string(request.step()) +
                              " has its " + std::to_string(part.received) +
                              " gradients from other workers already; worker " +
                              std::to_string(request.worker_rank()) +
                              "'s would be one too many (the workers disagree on the step's " +
                              std::to_string(Contributors(request)) + " workers)");
    }
  }
  return grpc::Status::OK;
}

void Shard::AwaitPushesOutsideLock(std::unique_lock<std::mutex>& lock) {
  ++quiescing_;  // no push claims anything meanwhile, so steady traffic cannot hold this up
  advanced_.wait(lock, [&] { return pushes_outside_lock_ == 0; });
  --quiescing_;
  // Pushes that waited claim once the caller lets go of the lock.
  advanced_.notify_all();
}

void Shard::Apply(const v1::PushRequest& request, const std::vector<Claim>& claims, bool skip,
                  const std::vector<float>& async_gradient, std::vector<Update>* updates) {
  if (!options_.sync) {
    const float* gradient = async_gradient.data();
    for (const Claim& claim : claims) {
      Part* part = claim.part;
      const size_t n = claim.length;
      if (skip) {
        updates_skipped_.Increment();
      } else {
        // In place unless a pull answer still holds the values.
        Values next = Writable(part->value, n);
        ApplyOptimizer(part->value->data(), next->data(), gradient, n, &part->state);
        part->value = std::move(next);
        ++part->version;
        updates_.Increment();
      }
      gradient += n;
    }
    return;
  }
  const int rank = request.worker_rank();
  const int expected = Contributors(request);
  for (const Claim& claim : claims) {
    Part* part = claim.part;
    if (part == nullptr) continue;
    part->contributed[rank] = true;
    part->shares[rank] = request.share();
    part->global_batch = request.global_batch();
    part->expected = expected;
    part->skip_update |= skip;
    if (claim.completes) part->mean_rank = rank;
    // The last to claim a step's part waits for the others' copies, so the
    // push that completes a step is the one that summed it (CheckCounts).
    if (++part->received == expected) {
      if (Update update = CompleteStep(*part); update.part) updates->push_back(std::move(update));
    }
  }
}

Shard::Update Shard::CompleteStep(Part& part) {
  if (part.skip_update) {
    // SkipStep: the step ends without an update, so that every worker's
    // pull of the next version is answered (with this one's values).
    part.previous = part.value;
    updates_skipped_.Increment();
    NextStep(part);
    return Update{};
  }
  // The update goes to the buffer of the version before (unless an answer
  // still holds it), which no pull may now take (Part::updating).
  Update update{&part, Writable(part.previous, part.value->size())};
  part.previous.reset();
  part.updating = true;
  ++parts_updating_;
  return update;
}

void Shard::RunUpdate(const Update& update) {
  Part& part = *update.part;
  ApplyOptimizer(part.value->data(), update.next->data(), part.contributions[part.mean_rank].data(),
                 part.value->size(), &part.state);
}

void Shard::ApplyOptimizer(const float* from, float* to, const float* gradient, size_t n,
                           OptimizerState* state) {
  optimizer_->ApplyInRanges(from, to, gradient, n, state, update_threads_.Runner());
  if (!optimizer_->OnlyAverages())
    learning_rate_.Set(LearningRateAt(options_.optimizer, state->steps));
}

void Shard::PublishUpdate(Update& update) {
  Part& part = *update.part;
  part.previous = std::move(part.value);
  part.value = std::move(update.next);
  part.updating = false;
  --parts_updating_;
  updates_.Increment();
  NextStep(part);
}

void Shard::NextStep(Part& part) {
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
  if (request.contributors() > static_cast<uint32_t>(options_.num_workers) ||
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
  grpc::Status status = CheckStep(request, data, &due);
  if (status.ok()) status = ApplyOnce(request, data, &due);
  // A checkpoint taken is written whatever became of the push that took it,
  // after the push is answered (a failure is logged and counted; see
  // CheckpointFailure).
  if (due) writer_->Hand(std::move(due));
  return status;
}

grpc::Status Shard::CheckStep(const v1::PushRequest& request, const PushData& data,
                              std::unique_ptr<v1::ShardCheckpoint>* due) {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t checkpoint_step = 0;
  // A snapshot reads the optimizer state, which an update writes without the lock.
  advanced_.wait(lock, [&] {
    return parts_updating_ == 0 || !options_.sync || !CheckpointDue(&checkpoint_step);
  });
  if (grpc::Status g = CheckGeneration(request.generation()); !g.ok()) return g;
  grpc::Status valid = CheckParts(request.parts(), data.size(), true, data.encoding());
  if (!valid.ok()) return valid;
  if (!options_.sync) return grpc::Status::OK;
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
  if (CheckpointDue(&checkpoint_step)) *due = TakeCheckpoint(checkpoint_step);
  return grpc::Status::OK;
}

grpc::Status Shard::ApplyOnce(const v1::PushRequest& request, PushData& data,
                              std::unique_ptr<v1::ShardCheckpoint>* due) {
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
  std::vector<Claim> claims;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    advanced_.wait(lock, [&] { return quiescing_ == 0 && !SameWorkerCopying(request); });
    // A restore may have happened since the checks above: refused, not
    // applied, so not recorded as applied in the restored table.
    grpc::Status g = CheckGeneration(request.generation());
    if (!g.ok()) {
      dedup_.Abandon(request.id());
      return g;
    }
    if (grpc::Status claimed = ClaimParts(request, &claims); !claimed.ok()) {
      dedup_.Abandon(request.id());
      return claimed;
    }
  }
  // Async: the push's gradients back to back, in a buffer each RPC thread
  // keeps from push to push.
  thread_local std::vector<float> async_gradient;
  std::vector<Update> updates;
  const int non_finite = CopyIn(request, data, &claims, &async_gradient);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Release(request, claims);
    // Not applied, so not recorded as applied: the id stays free.
    auto refuse = [&](grpc::Status why) {
      dedup_.Abandon(request.id());
      --pushes_outside_lock_;
      advanced_.notify_all();  // a push waiting for this one's copy
      return why;
    };
    if (grpc::Status counts = CheckCounts(request, &claims); !counts.ok()) return refuse(counts);
    if (non_finite >= 0) {
      nonfinite_pushes_.Increment();
      if (options_.non_finite == NonFinitePolicy::kFail) {
        return refuse(Invalid(
            "the gradient of " + request.id().node_id() + " (rank " +
            std::to_string(request.worker_rank()) + ") for step " + std::to_string(request.step()) +
            ", " + Describe(request.parts(non_finite)) + ", " + kNonFiniteGradientRefusal +
            ": the model diverged; lower the learning rate, or set spec.nonFinite: "
            "SkipStep to skip such steps"));
      }
    }
    // SkipStep with optimizer none: the mean goes on, NaN and Inf included,
    // so that the workers' own optimizer skips the step (a GradScaler's
    // overflow), every worker alike; the values of the step before would be
    // a gradient applied twice.
    const bool skip = non_finite >= 0 && !optimizer_->OnlyAverages();
    Apply(request, claims, skip, async_gradient, &updates);
    key_set_fixed_ = true;
    if (request.global_batch() > 0) {
      global_batch_ = request.global_batch();
      state_batch_size_ = static_cast<uint32_t>(options_.batch_size);
    }
    ++applied_pushes_;
    if (!options_.sync) {
      // Applied whole, under this lock: settled here, so that a checkpoint
      // holding its update (this push's, or a later one's) holds its id,
      // and its worker's step.
      dedup_.Done(request.id());
      uint64_t& next = (*async_worker_steps_.mutable_next_step())[request.worker_rank()];
      next = std::max(next, request.step() + 1);
      uint64_t checkpoint_step = 0;
      if (CheckpointDue(&checkpoint_step)) *due = TakeCheckpoint(checkpoint_step);
    }
    if (updates.empty()) --pushes_outside_lock_;
  }
  // Pushes waiting for this one's copy go on at once, not after its update.
  advanced_.notify_all();
  if (!updates.empty()) {
    // The steps this push completed are updated without the lock: pushes
    // and pulls of the shard's other parts go on meanwhile.
    for (const Update& update : updates) RunUpdate(update);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Update& update : updates) PublishUpdate(update);
      --pushes_outside_lock_;
    }
    advanced_.notify_all();
  }
  if (options_.sync) dedup_.Done(request.id());
  pushes_.Increment();
  push_bytes_.Increment(static_cast<double>(data.size()));
  return grpc::Status::OK;
}

}  // namespace kubeps
