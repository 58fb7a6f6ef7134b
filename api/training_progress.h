// How far a job has got, as `kubectl get tj` shows it: the figures a
// worker reports (its step, the job's total steps, the loss, the test
// accuracy) and what the columns make of them (progress, ETA).
//
// Two ways in, one meaning: while a worker trains, its metrics page
// (kubeps_worker_step, kubeps_worker_total_steps, kubeps_worker_loss); once
// it has finished, its termination message, "TrainingFinished: step=1404
// totalSteps=1404 stepsPerSecond=178.25 loss=0.3720 testAccuracy=0.8665",
// which outlives the process, so that a finished job's status holds the real
// last step and the accuracy, not whatever a probe last caught.
//
// Plain values and pure functions: safe to use from any thread.
#ifndef KUBEPS_API_TRAINING_PROGRESS_H_
#define KUBEPS_API_TRAINING_PROGRESS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace kubeps::api {

// The termination reason of a worker that trained to the end.
inline constexpr const char* kReasonTrainingFinished = "TrainingFinished";

// The worker metrics the operator reads progress from.
inline constexpr const char* kStepMetric = "kubeps_worker_step";
inline constexpr const char* kTotalStepsMetric = "kubeps_worker_total_steps";
inline constexpr const char* kLossMetric = "kubeps_worker_loss";
// An elastic job's scheduler sets this gauge (label rank) to 1 for each rank
// that computes the newest step and to 0 once it no longer does: the
// operator deletes a worker scaled away only if it has not left 30 s after.
inline constexpr const char* kComputingWorkerMetric = "kubeps_job_worker_computing";

struct TrainingSummary {
  int64_t step = 0;                        // the global step training ended at
  int64_t total_steps = 0;                 // epochs x steps per epoch, or the KUBEPS_MAX_STEPS cap
  std::optional<double> steps_per_second;  // over this process's training
  std::optional<double> loss;              // of the last progress interval
  std::optional<double> test_accuracy;     // worker 0 only: it evaluates the model
};

// The message part of the termination message (after "TrainingFinished: ").
std::string FormatTrainingSummary(const TrainingSummary& summary);
// The summary in `message`, or none when it is not one (no step or no
// totalSteps, a value that is not a number).
std::optional<TrainingSummary> ParseTrainingSummary(const std::string& message);

// "42%": the share of `total_steps` done, rounded down (a job shows 100%
// only when done), at most 100%; "" when the total is unknown (0).
std::string ProgressPercent(int64_t step, int64_t total_steps);

// The time left at `steps_per_second`, as kubectl writes an age ("45s",
// "3m20s", "2h5m", "3d4h"); "0s" when every step is done; "" when it cannot
// be told (total or rate unknown).
std::string EstimatedTimeLeft(int64_t step, int64_t total_steps, double steps_per_second);

// `seconds` (>= 0) as kubectl writes a duration, two units at most.
std::string HumanDuration(double seconds);

// A figure for a status field and a column: `digits` after the point.
std::string FormatFixed(double value, int digits);

}  // namespace kubeps::api

#endif  // KUBEPS_API_TRAINING_PROGRESS_H_
