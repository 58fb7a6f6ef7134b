// The TrainingJob's status, typed: what the operator writes through the
// /status subresource and `kubectl get tj` shows. Conditions follow
// Kubernetes' API conventions (one per type, True/False, time-stamped
// transitions) with the helpers of apimachinery's meta.SetStatusCondition.
// Plain values and pure functions: safe to use from any thread.
#ifndef KUBEPS_API_TRAINING_JOB_STATUS_H_
#define KUBEPS_API_TRAINING_JOB_STATUS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubeps::api {

enum class JobPhase { kCreated, kRunning, kRestarting, kSucceeded, kFailed, kSuspended };
inline constexpr JobPhase kJobPhases[] = {JobPhase::kCreated,    JobPhase::kRunning,
                                          JobPhase::kRestarting, JobPhase::kSucceeded,
                                          JobPhase::kFailed,     JobPhase::kSuspended};
const char* ToString(JobPhase phase);
std::optional<JobPhase> ParseJobPhase(std::string_view text);
// Succeeded and Failed are terminal.
inline bool IsFinished(JobPhase phase) {
  return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed;
}

struct Condition {
  std::string type;    // a phase's name: Created, Running, ..., Suspended
  std::string status;  // "True" or "False"
  std::string reason;  // CamelCase
  std::string message;
  std::string last_update_time;
  std::string last_transition_time;
  bool operator==(const Condition& other) const;
};

// Adds the condition of `condition.type` or updates it, as
// meta.SetStatusCondition does: lastTransitionTime moves only when the status
// changes, lastUpdateTime when the reason or message does.
void SetStatusCondition(std::vector<Condition>* conditions, Condition condition,
                        const std::string& now);
// The condition of `type`, or null.
const Condition* FindCondition(const std::vector<Condition>& conditions, std::string_view type);

// Kubeflow's convention for a job's conditions: the condition of its phase is
// True; every other one but Created becomes False (a resumed job is no
// longer Suspended: reason JobResumed).
void SetPhaseCondition(std::vector<Condition>* conditions, JobPhase phase,
                       const std::string& reason, const std::string& message,
                       const std::string& now);

struct ReplicaStatus {
  int active = 0;
  int succeeded = 0;
  int failed = 0;
  int restarts = 0;
  bool operator==(const ReplicaStatus& other) const;
};

struct TrainingJobStatus {
  std::optional<JobPhase> phase;  // none until the operator first looks
  std::string message;
  int64_t observed_generation = 0;
  std::vector<Condition> conditions;
  std::map<std::string, ReplicaStatus> replica_statuses;  // "scheduler", "ps", "worker"
  std::string workers;                                    // "active+succeeded/replicas"
  // The scale subresource's status (kubectl scale, autoscalers): the worker
  // pods pending or running, and the label selector of the job's workers.
  std::optional<int> worker_replicas;
  std::string worker_selector;
  // A job without elasticPolicy: the workers it started with, which it
  // keeps until it ends or is suspended (its scheduler knows that number:
  // a worker more would be refused). None while held or before the start.
  std::optional<int> fixed_workers;
  std::string start_time;  // RFC 3339; "" = not yet
  std::string completion_time;
  // Training progress (api/training_progress.h), worker 0's: while it
  // trains as its metrics last said, once it has finished as it said on
  // exiting. Figures are text, as the columns show them; "" = not known.
  std::optional<int64_t> step;         // the global step
  std::optional<int64_t> total_steps;  // epochs x steps per epoch, or the cap
  std::string steps_per_second;        // "12.3"
  std::string progress;                // "42%" of total_steps
  std::string eta;                     // time left at that rate: "3m20s"; "0s" when done
  std::string loss;                    // the last loss: "0.3720"
  std::string test_accuracy;           // once worker 0 has evaluated the model: "0.8665"
  // Each replica's restarts ("worker-1" -> 2): the record that outlives its
  // pods, so that a pod deleted from outside does not reset the count
  // that backoffLimit is checked against.
  std::map<std::string, int> replica_restarts;

  bool finished() const { return phase && IsFinished(*phase); }
  // Running, or restarting after it was since it last started (its Running
  // condition turned False after startTime): a pod of it made again trains
  // on with the rest, not from new.
  bool HasRun() const;
  // Equal in everything but time stamps: whether a write would change anything.
  bool SameExceptTimes(const TrainingJobStatus& other) const;
};

// From the object's "status" (missing, null or partial: the defaults above).
TrainingJobStatus StatusFromJson(const nlohmann::json& status);
nlohmann::json ToJson(const TrainingJobStatus& status);

}  // namespace kubeps::api

#endif  // KUBEPS_API_TRAINING_JOB_STATUS_H_
