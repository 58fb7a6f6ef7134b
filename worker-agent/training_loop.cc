#include "worker-agent/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "api/training_progress.h"
#include "common/logging.h"
#include "common/step_trace.h"
#include "common/termination_message.h"
#include "worker-agent/trainer/batch_sampler.h"

namespace kubeps {
namespace {

using Clock = std::chrono::steady_clock;

// Steps, samples and loss since the last progress line.
struct Window {
  Clock::time_point start = Clock::now();
  uint64_t steps = 0;
  double loss_sum = 0;
};

void PrintProgress(int epoch, int epochs, int64_t step, int64_t steps_per_epoch,
                   uint64_t total_steps, const Window& window, int local_batch) {
  const double seconds = std::chrono::duration<double>(Clock::now() - window.start).count();
  const double steps_per_sec = seconds > 0 ? window.steps / seconds : 0;
  char line[256];
  std::snprintf(
      line, sizeof line,
      "epoch %d/%d step %lld/%lld total_steps %llu steps/sec %.2f samples/sec %.1f loss %.4f",
      epoch + 1, epochs, static_cast<long long>(step + 1), static_cast<long long>(steps_per_epoch),
      static_cast<unsigned long long>(total_steps), steps_per_sec, steps_per_sec * local_batch,
      window.steps ? window.loss_sum / window.steps : 0.0);
  PrintLine(line);
}

// A job resumed over checkpoints at or past its last step (the same job
// applied twice, or run again with fewer epochs) trains nothing and ends
// with their model: said, so that a user who meant to train on sees why.
std::string NothingLeftToTrain(uint64_t step, uint64_t total_steps) {
  if (step < total_steps) return "";
  return std::string(step == total_steps ? ": the checkpoints hold the job's last step"
                                         : ": the checkpoints are past the job's last step") +
         ", so nothing is left to train, and it ends with their model (raise spec.epochs to train "
         "on; spec.checkpoint.resume: false starts afresh)";
}

}  // namespace

Status RunTrainingLoop(const LoopConfig& config, const trainer::Dataset& train,
                       trainer::Model& model, ParameterStore& store, MetricsServer& metrics,
                       LoopResult* result) {
  const std::map<std::string, std::string> rank{{"rank", std::to_string(config.rank)}};
  auto& steps_total =
      metrics.Counter("kubeps_worker_steps_total", "Training steps completed", rank);
  auto& samples_total =
      metrics.Counter("kubeps_worker_samples_total", "Training examples processed", rank);
  auto& loss_gauge = metrics.Gauge("kubeps_worker_loss", "Training loss of the latest step", rank);
  auto& global_step =
      metrics.Gauge(api::kStepMetric, "Global step of the parameters this worker holds", rank);
  auto& total_steps_gauge =
      metrics.Gauge(api::kTotalStepsMetric, "Steps the job trains in all", rank);
  StepHistograms step_histograms(metrics, rank);

  uint64_t step = store.start_step();  // global step = parameter version in sync mode
  // The global batch: a fixed job's is its workers' batches together; an
  // elastic job's is the scheduler's, cut over each step's workers.
  StepMembership share;
  if (Status s = store.Membership(step, &share); !s.ok()) return s;
  const uint64_t global_batch =
      share.global_batch > 0 ? share.global_batch
                             : static_cast<uint64_t>(config.local_batch) * config.num_workers;
  trainer::BatchSampler sampler(train.size(), static_cast<int>(global_batch), config.seed);
  const int64_t steps_per_epoch = sampler.StepsPerEpoch();
  if (steps_per_epoch == 0) {
    return Status::Error("global batch " + std::to_string(sampler.global_batch()) +
                         " is larger than the data set (" + std::to_string(train.size()) +
                         " examples)");
  }
  std::vector<float> images(global_batch * train.image_size());
  std::vector<uint8_t> labels(global_batch);

  uint64_t total_steps = static_cast<uint64_t>(steps_per_epoch) * config.epochs;
  if (config.max_steps > 0) total_steps = std::min(total_steps, config.max_steps);
  result->total_steps = total_steps;
  total_steps_gauge.Set(static_cast<double>(total_steps));
  auto& rollbacks = metrics.Counter("kubeps_worker_rollbacks_total",
                                    "Times the job rolled back to a shard checkpoint", rank);
  const auto start = Clock::now();
  Window window;
  const uint64_t first_step = step;
  bool trained = false;  // this process computed a step: not a member any more means scaled away
  global_step.Set(static_cast<double>(step));
  if (store.joins_running_job() && share.global_batch > 0) {
    // An elastic job takes a worker in at a step (below, where it is not
    // one of this step's): this one is, or waits for its step.
    PrintLine(share.member ? "joined the job at step " + std::to_string(step)
                           : "waiting to be taken in: the job is at step " + std::to_string(step) +
                                 " of " + std::to_string(total_steps));
  } else if (step > 0) {
    PrintLine("resuming at step " + std::to_string(step) + " of " + std::to_string(total_steps) +
              NothingLeftToTrain(step, total_steps));
  }
  while (step < total_steps) {
    const int epoch = static_cast<int>(step / steps_per_epoch);
    const int64_t s = static_cast<int64_t>(step % steps_per_epoch);
    const auto step_start = Clock::now();
    store.TakeWaitedSeconds();  // the first pull's, a rollback's: no step's
    if (Status m = store.Membership(step, &share); !m.ok()) return m;
    if (!share.member) {
      if (share.next_member_step) {
        // Taken in from a later step: start there, with its parameters.
        step = std::min(*share.next_member_step, total_steps);
        if (step == total_steps) break;
        Status joined = store.JoinAt(step, model);
        if (joined.IsAborted()) {
          if (Status resumed = store.Resume(model, &step); !resumed.ok()) return resumed;
        } else if (!joined.ok()) {
          return joined;
        }
        PrintLine("joined the job at step " + std::to_string(step));
        global_step.Set(static_cast<double>(step));
        continue;
      }
      if (trained || share.scaled_away) {
        // Scaled away (behind the sidecar, its agent remembers it across the
        // program's restarts): this worker's last step is pushed once Flush returns.
        // A rollback meanwhile may need it for the steps redone: it resumes.
        Status flushed = store.Flush();
        if (flushed.IsAborted()) {
          if (Status resumed = store.Resume(model, &step); !resumed.ok()) return resumed;
          rollbacks.Increment();
          PrintLine("rolled back to step " + std::to_string(step) + ": " + flushed.message());
          continue;
        }
        if (!flushed.ok()) return flushed;
        PrintLine("left the job at step " + std::to_string(step) + ": it was scaled away");
        result->left = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // waiting to be taken in
      continue;
    }
    trained = true;
    uint64_t first = share.first_example, end = share.end_example;
    if (share.global_batch == 0) BatchRun(global_batch, share.position, share.count, &first, &end);
    const int batch = static_cast<int>(end - first);
    Status filled =
        trainer::FillRunBatch(train, sampler, epoch, s, first, end, images.data(), labels.data());
    if (!filled.ok()) return filled;
    const bool traced = config.trace_step && step == *config.trace_step;
    if (traced) {
      StepTrace::Get().Open("timeline of step " + std::to_string(step) + " and the next one's " +
                            "forward and backward pass, worker " + std::to_string(config.rank));
    }
    store.BeginStep(step);
    float loss;
    {
      TraceSpan span("forward + backward, step " + std::to_string(step));
      loss = model.ForwardBackward(images.data(), labels.data(), batch);
    }
    // The step after the traced one has waited for everything the traced
    // step's exchanges brought: the timeline is complete.
    if (config.trace_step && step == *config.trace_step + 1) {
      std::string table = StepTrace::Get().Close();
      while (!table.empty()) {
        const size_t end = table.find('\n');
        PrintLine(table.substr(0, end));
        table.erase(0, end == std::string::npos ? table.size() : end + 1);
      }
    }
    Status updated;
    if (config.fail_on_non_finite_loss && !std::isfinite(loss)) {
      // A rollback the store saw in this forward pass (the parameters may
      // have been of two steps) explains the loss: it is redone, not failed.
      updated = store.Flush();
      if (!updated.IsAborted()) {
        result->failure_reason = kReasonNonFiniteLoss;
        return Status::Error("the loss of step " + std::to_string(step) + " is " +
                             std::to_string(loss) +
                             ": the model diverged (lower the learning rate, or set "
                             "spec.nonFinite: SkipStep to skip such steps)");
      }
    } else {
      TraceSpan span("Update returns, step " + std::to_string(step));
      updated = store.Update(step, model);
      // The last step's parameters are the result: they must have arrived.
      if (updated.ok() && step + 1 == total_steps) updated = store.Flush();
    }
    if (updated.IsAborted()) {
      // A shard restarted from its checkpoint: go back to that step, with
      // its parameters, and redo the steps since, exactly as before.
      if (Status resumed = store.Resume(model, &step); !resumed.ok()) return resumed;
      rollbacks.Increment();
      global_step.Set(static_cast<double>(step));
      PrintLine("rolled back to step " + std::to_string(step) + ": " + updated.message());
      continue;
    }
    if (!updated.ok()) {
      if (IsNonFiniteGradientRefusal(updated)) result->failure_reason = kReasonNonFiniteGradient;
      return updated.Prefixed("step " + std::to_string(step) + ": ");
    }
    steps_total.Increment();
    samples_total.Increment(batch);
    loss_gauge.Set(loss);
    global_step.Set(static_cast<double>(step + 1));
    step_histograms.duration.Observe(
        std::chrono::duration<double>(Clock::now() - step_start).count());
    const double waited = store.TakeWaitedSeconds();
    step_histograms.exchange_wait.Observe(waited);
    result->waited_seconds += waited;
    ++window.steps;
    window.loss_sum += loss;
    const bool last = step + 1 == total_steps;
    if (last ||
        Clock::now() - window.start >= std::chrono::milliseconds(config.progress_interval_ms)) {
      PrintProgress(epoch, config.epochs, s, steps_per_epoch, step + 1, window, batch);
      result->final_loss = window.loss_sum / window.steps;
      window = Window{};
    }
    ++step;
  }
  result->steps = step;
  result->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (result->seconds > 0) result->steps_per_second = (step - first_step) / result->seconds;
  return Status::Ok();
}

}  // namespace kubeps
