#include "worker-agent/trainer/batch_sampler.h"

#include <random>
#include <string>

namespace kubeps::trainer {
namespace {

// SplitMix64 finaliser: spreads (seed, epoch) over the whole seed space.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound] without modulo bias (rejection sampling).
uint64_t UniformUpTo(std::mt19937_64& rng, uint64_t bound) {
  if (bound == UINT64_MAX) return rng();
  const uint64_t range = bound + 1;
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % range);  // multiple of range
  uint64_t r;
  do {
    r = rng();
  } while (r >= limit);
  return r % range;
}

}  // namespace

BatchSampler::BatchSampler(int64_t num_examples, int global_batch, uint64_t seed)
    : num_examples_(num_examples < 0 ? 0 : num_examples),
      global_batch_(global_batch),
      seed_(seed) {}

int64_t BatchSampler::StepsPerEpoch() const {
  return global_batch_ > 0 ? num_examples_ / global_batch_ : 0;
}

int BatchSampler::LocalBatch(int num_workers) const {
  return num_workers > 0 ? global_batch_ / num_workers : 0;
}

const std::vector<uint32_t>& BatchSampler::Permutation(int64_t epoch) {
  if (epoch == cached_epoch_ && perm_.size() == static_cast<size_t>(num_examples_)) return perm_;
  perm_.resize(static_cast<size_t>(num_examples_));
  for (size_t i = 0; i < perm_.size(); ++i) perm_[i] = static_cast<uint32_t>(i);
  std::mt19937_64 rng(Mix(seed_ ^ Mix(static_cast<uint64_t>(epoch))));
  for (size_t i = perm_.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformUpTo(rng, i - 1));
    std::swap(perm_[i - 1], perm_[j]);
  }
  cached_epoch_ = epoch;
  return perm_;
}

Status BatchSampler::WorkerIndices(int64_t epoch, int64_t step, int rank, int num_workers,
                                   std::vector<uint32_t>* indices) {
  if (num_workers <= 0 || num_workers > global_batch_) {
    return Status::Error("BatchSampler: " + std::to_string(num_workers) +
                         " workers cannot split a global batch of " +
                         std::to_string(global_batch_));
  }
  if (rank < 0 || rank >= num_workers) {
    return Status::Error("BatchSampler: rank " + std::to_string(rank) + " is not in 0.." +
                         std::to_string(num_workers - 1));
  }
  const int b = LocalBatch(num_workers);
  return RunIndices(epoch, step, static_cast<uint64_t>(rank) * b,
                    static_cast<uint64_t>(rank) * b + b, indices);
}

Status BatchSampler::RunIndices(int64_t epoch, int64_t step, uint64_t first, uint64_t end,
                                std::vector<uint32_t>* indices) {
  if (num_examples_ > int64_t{UINT32_MAX}) {
    return Status::Error("BatchSampler: " + std::to_string(num_examples_) +
                         " examples do not fit 32-bit indices");
  }
  if (first >= end || end > static_cast<uint64_t>(global_batch_)) {
    return Status::Error("BatchSampler: examples [" + std::to_string(first) + ", " +
                         std::to_string(end) + ") are not within a global batch of " +
                         std::to_string(global_batch_));
  }
  if (epoch < 0 || step < 0 || step >= StepsPerEpoch()) {
    return Status::Error("BatchSampler: step " + std::to_string(step) + " of epoch " +
                         std::to_string(epoch) + " is out of range (" +
                         std::to_string(StepsPerEpoch()) + " steps per epoch)");
  }
  const std::vector<uint32_t>& perm = Permutation(epoch);
  const size_t begin = static_cast<size_t>(step) * global_batch_ + first;
  indices->assign(perm.begin() + begin, perm.begin() + begin + (end - first));
  return Status::Ok();
}

namespace {

// Gathers the examples `pick` chooses from the sampler.
template <typename Pick>
Status Fill(const Dataset& data, const BatchSampler& sampler, float* images, uint8_t* labels,
            Pick pick) {
  if (sampler.num_examples() != data.size()) {
    return Status::Error("filling a batch: the sampler covers " +
                         std::to_string(sampler.num_examples()) +
                         " examples but the data set has " + std::to_string(data.size()));
  }
  thread_local std::vector<uint32_t> indices;
  if (Status s = pick(&indices); !s.ok()) return s;
  data.Gather(indices.data(), static_cast<int>(indices.size()), images, labels);
  return Status::Ok();
}

}  // namespace

Status FillRunBatch(const Dataset& data, BatchSampler& sampler, int64_t epoch, int64_t step,
                    uint64_t first, uint64_t end, float* images, uint8_t* labels) {
  return Fill(data, sampler, images, labels, [&](std::vector<uint32_t>* indices) {
    return sampler.RunIndices(epoch, step, first, end, indices);
  });
}

Status FillWorkerBatch(const Dataset& data, BatchSampler& sampler, int64_t epoch, int64_t step,
                       int rank, int num_workers, float* images, uint8_t* labels) {
  return Fill(data, sampler, images, labels, [&](std::vector<uint32_t>* indices) {
    return sampler.WorkerIndices(epoch, step, rank, num_workers, indices);
  });
}

}  // namespace kubeps::trainer
