// Deterministic mini-batches for data-parallel training.
//
// Every epoch has its own shuffled order of the examples, a Fisher-Yates
// shuffle driven by std::mt19937_64 seeded from (seed, epoch), with its own
// integer draws, so the order is the same on every platform and standard
// library. Step s of an epoch is the global batch perm[s*G, (s+1)*G); the
// incomplete batch at the end of the epoch is dropped. Worker `rank` of
// `num_workers` takes the contiguous slice [rank*b, (rank+1)*b) of it with
// b = G / num_workers (when G is not a multiple of num_workers, the last
// G - b*num_workers examples of each global batch are not used). So two
// workers with batch b see exactly the examples one worker with batch 2b
// sees, and the averaged gradients match.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_BATCH_SAMPLER_H_
#define KUBEPS_WORKER_AGENT_TRAINER_BATCH_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "worker-agent/trainer/fashion_mnist.h"

namespace kubeps::trainer {

class BatchSampler {
 public:
  BatchSampler(int64_t num_examples, int global_batch, uint64_t seed);

  int64_t num_examples() const { return num_examples_; }
  int global_batch() const { return global_batch_; }
  uint64_t seed() const { return seed_; }

  // num_examples / global_batch (0 when global_batch <= 0).
  int64_t StepsPerEpoch() const;

  // global_batch / num_workers: the batch of each worker.
  int LocalBatch(int num_workers) const;

  // The order of the examples in `epoch`: a permutation of 0..num_examples-1.
  // The last epoch asked for is cached; the reference is valid until the
  // next call with another epoch. Not thread-safe.
  const std::vector<uint32_t>& Permutation(int64_t epoch);

  // The example indices of worker `rank`'s slice of step `step` of `epoch`
  // (LocalBatch(num_workers) of them). Errors for a step, rank or worker
  // count out of range.
  Status WorkerIndices(int64_t epoch, int64_t step, int rank, int num_workers,
                       std::vector<uint32_t>* indices);
  // The example indices of [first, end) of the global batch of (epoch,
  // step): an elastic job's worker's run of the step (common/membership.h).
  Status RunIndices(int64_t epoch, int64_t step, uint64_t first, uint64_t end,
                    std::vector<uint32_t>* indices);

 private:
  int64_t num_examples_;
  int global_batch_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<uint32_t> perm_;
};

// Writes the examples [first, end) of the global batch of (epoch, step):
// (end - first) x data.image_size() floats and as many labels.
Status FillRunBatch(const Dataset& data, BatchSampler& sampler, int64_t epoch, int64_t step,
                    uint64_t first, uint64_t end, float* images, uint8_t* labels);

// Writes worker `rank`'s batch of (epoch, step): `images` gets
// LocalBatch(num_workers) x data.image_size() floats in [0, 1] and `labels`
// LocalBatch(num_workers) bytes. The sampler must have been made with
// data.size() examples.
Status FillWorkerBatch(const Dataset& data, BatchSampler& sampler, int64_t epoch, int64_t step,
                       int rank, int num_workers, float* images, uint8_t* labels);

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_BATCH_SAMPLER_H_
