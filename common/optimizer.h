// Server-side optimizers. One implementation serves the parameter servers
// and the trainer's local (single-process) mode, so the two are comparable
// bit for bit. The state of an optimizer belongs to one parameter part and
// is checkpointed with it.
//
// Not synchronised: an optimizer's state belongs to one parameter part, which
// one update at a time changes (on a shard, the push that completed the
// part's step; ApplyInRanges splits that one update over threads).
#ifndef KUBEPS_COMMON_OPTIMIZER_H_
#define KUBEPS_COMMON_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kubeps {

// The learning rate as a function of the update: a linear warmup over
// warmup_steps (update u of them at learning_rate * u / warmup_steps), then,
// over decay_steps, a cosine or linear decay to min_learning_rate, which stays.
// A function of the part's update count alone (checkpointed with it), so a
// job resumed or rolled back goes on with the rates a run without the fault
// used.
struct LearningRateSchedule {
  uint64_t warmup_steps = 0;
  std::string decay = "none";  // none | cosine | linear
  uint64_t decay_steps = 0;
  float min_learning_rate = 0.0f;
};

struct OptimizerConfig {
  std::string name = "sgd";    // sgd | momentum | adam | none (average only)
  float learning_rate = 0.1f;  // the peak of the schedule
  float momentum = 0.9f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  LearningRateSchedule schedule;
};

// The learning rate of the update-th update of a part (1 for the first).
// Without a schedule it is learning_rate itself, bit for bit.
float LearningRateAt(const OptimizerConfig& config, uint64_t update);

// Per-part optimizer state: momentum buffer or Adam's moments.
struct OptimizerState {
  std::vector<float> slot1;  // momentum velocity, or Adam's first moment
  std::vector<float> slot2;  // Adam's second moment
  uint64_t steps = 0;        // updates applied so far
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // weights -= update(grad); `grad` is the (averaged) gradient. (`none`:
  // weights = grad.) Denormal floats are flushed to zero while it runs
  // (common/denormals.h says why).
  void Apply(float* weights, const float* grad, size_t n, OptimizerState* state) const {
    Apply(weights, weights, grad, n, state);
  }
  // The same with the updated weights written to `to`, `from` left as it
  // was: a parameter server keeps the values it answers pulls from
  // unchanged (ps-server/shard.h). `from` and `to` are the same array or
  // disjoint ones; the results are the same bit for bit either way.
  void Apply(const float* from, float* to, const float* grad, size_t n,
             OptimizerState* state) const;

  // Hands `range` each element range of [0, n) once, on threads of its own,
  // and returns when every range is done.
  using RangeRunner =
      std::function<void(size_t n, const std::function<void(size_t begin, size_t end)>& range)>;
  // The same update as Apply, its elements split over `run`'s threads: a
  // big part's update on several cores. Each element gets the bits Apply
  // gives it, and the step is counted once.
  void ApplyInRanges(const float* from, float* to, const float* grad, size_t n,
                     OptimizerState* state, const RangeRunner& run) const;

  // `none`: the value is the mean itself, and the workers' own optimizer
  // applies it, so what to do with a non-finite one is theirs to decide.
  virtual bool OnlyAverages() const { return false; }

 protected:
  // Sizes the state for n elements and counts the step: once an update.
  virtual void BeginStep(size_t n, OptimizerState* state) const { ++state->steps; }
  // Elements [begin, end) of the step BeginStep began. Ranges that do not
  // overlap may run at the same time.
  virtual void UpdateRange(const float* from, float* to, const float* grad, size_t begin,
                           size_t end, OptimizerState* state) const = 0;
};

// nullptr with *error set when the name is unknown.
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerConfig& config, std::string* error);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_OPTIMIZER_H_
