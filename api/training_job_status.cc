#include "api/training_job_status.h"

#include <algorithm>
#include <tuple>

#include "common/time_format.h"

namespace kubeps::api {

using nlohmann::json;

const char* ToString(JobPhase phase) {
  switch (phase) {
    case JobPhase::kCreated:
      return "Created";
    case JobPhase::kRunning:
      return "Running";
    case JobPhase::kRestarting:
      return "Restarting";
    case JobPhase::kSucceeded:
      return "Succeeded";
    case JobPhase::kFailed:
      return "Failed";
    case JobPhase::kSuspended:
      return "Suspended";
  }
  return "?";
}

std::optional<JobPhase> ParseJobPhase(std::string_view text) {
  for (JobPhase phase : kJobPhases) {
    if (text == ToString(phase)) return phase;
  }
  return std::nullopt;
}

bool Condition::operator==(const Condition& o) const {
  return std::tie(type, status, reason, message, last_update_time, last_transition_time) ==
         std::tie(o.type, o.status, o.reason, o.message, o.last_update_time,
                  o.last_transition_time);
}

bool ReplicaStatus::operator==(const ReplicaStatus& o) const {
  return std::tie(active, succeeded, failed, restarts) ==
         std::tie(o.active, o.succeeded, o.failed, o.restarts);
}

const Condition* FindCondition(const std::vector<Condition>& conditions, std::string_view type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

void SetStatusCondition(std::vector<Condition>* conditions, Condition condition,
                        const std::string& now) {
  for (Condition& c : *conditions) {
    if (c.type != condition.type) continue;
    if (c.status != condition.status) c.last_transition_time = now;
    if (c.reason != condition.reason || c.message != condition.message) c.last_update_time = now;
    c.status = std::move(condition.status);
    c.reason = std::move(condition.reason);
    c.message = std::move(condition.message);
    return;
  }
  condition.last_update_time = condition.last_transition_time = now;
  conditions->push_back(std::move(condition));
}

void SetPhaseCondition(std::vector<Condition>* conditions, JobPhase phase,
                       const std::string& reason, const std::string& message,
                       const std::string& now) {
  const std::string current = ToString(phase);
  for (Condition& c : *conditions) {
    if (c.type == current || c.type == "Created" || c.status == "False") continue;
    c.status = "False";
    c.last_transition_time = now;
    if (c.type == "Suspended") c.reason = "JobResumed";
  }
  SetStatusCondition(conditions, Condition{current, "True", reason, message, "", ""}, now);
}

bool TrainingJobStatus::HasRun() const {
  if (phase == JobPhase::kRunning) return true;
  if (phase != JobPhase::kRestarting) return false;
  // The Running condition turns False when the job restarts, and stays, False,
  // through a suspension (or Kueue's requeue): it tells of this start only
  // where it changed after the job started again (startTime is set anew on
  // resume).
  const auto started = ParseTime(start_time);
  return std::any_of(conditions.begin(), conditions.end(), [started](const Condition& c) {
    return c.type == ToString(JobPhase::kRunning) && ParseTime(c.last_transition_time) > started;
  });
}

bool TrainingJobStatus::SameExceptTimes(const TrainingJobStatus& o) const {
  auto without_times = [](std::vector<Condition> conditions) {
    for (Condition& c : conditions) c.last_update_time = c.last_transition_time = "";
    return conditions;
  };
  return std::tie(phase, message, observed_generation, replica_statuses, workers, worker_replicas,
                  worker_selector, fixed_workers, start_time, completion_time, step, total_steps,
                  steps_per_second, progress, eta, loss, test_accuracy, replica_restarts) ==
             std::tie(o.phase, o.message, o.observed_generation, o.replica_statuses, o.workers,
                      o.worker_replicas, o.worker_selector, o.fixed_workers, o.start_time,
                      o.completion_time, o.step, o.total_steps, o.steps_per_second, o.progress,
                      o.eta, o.loss, o.test_accuracy, o.replica_restarts) &&
         without_times(conditions) == without_times(o.conditions);
}

TrainingJobStatus StatusFromJson(const json& status) {
  TrainingJobStatus s;
  if (!status.is_object()) return s;
  s.phase = ParseJobPhase(status.value("phase", ""));
  s.message = status.value("message", "");
  s.observed_generation = status.value("observedGeneration", int64_t{0});
  for (const json& c : status.value("conditions", json::array())) {
    if (!c.is_object()) continue;
    s.conditions.push_back({c.value("type", ""), c.value("status", ""), c.value("reason", ""),
                            c.value("message", ""), c.value("lastUpdateTime", ""),
                            c.value("lastTransitionTime", "")});
  }
  // Named: items() of a temporary would iterate over a destroyed object.
  const json replicas = status.value("replicaStatuses", json::object());
  for (const auto& [role, counts] : replicas.items()) {
    if (!counts.is_object()) continue;
    s.replica_statuses[role] = {counts.value("active", 0), counts.value("succeeded", 0),
                                counts.value("failed", 0), counts.value("restarts", 0)};
  }
  s.workers = status.value("workers", "");
  if (status.contains("workerReplicas") && status["workerReplicas"].is_number_integer())
    s.worker_replicas = status["workerReplicas"].get<int>();
  s.worker_selector = status.value("workerSelector", "");
  if (status.contains("fixedWorkers") && status["fixedWorkers"].is_number_integer())
    s.fixed_workers = status["fixedWorkers"].get<int>();
  s.start_time = status.value("startTime", "");
  s.completion_time = status.value("completionTime", "");
  auto count = [&status](const char* key) -> std::optional<int64_t> {
    if (status.contains(key) && status[key].is_number()) return status[key].get<int64_t>();
    return std::nullopt;
  };
  s.step = count("step");
  s.total_steps = count("totalSteps");
  s.steps_per_second = status.value("stepsPerSecond", "");
  s.progress = status.value("progress", "");
  s.eta = status.value("eta", "");
  s.loss = status.value("loss", "");
  s.test_accuracy = status.value("testAccuracy", "");
  const json restarts = status.value("replicaRestarts", json::object());
  for (const auto& [replica, count] : restarts.items()) {
    if (count.is_number_integer() && count.get<int>() > 0) s.replica_restarts[replica] = count;
  }
  return s;
}

json ToJson(const TrainingJobStatus& s) {
  json out = json::object();
  if (s.phase) out["phase"] = ToString(*s.phase);
  if (!s.message.empty()) out["message"] = s.message;
  if (s.observed_generation) out["observedGeneration"] = s.observed_generation;
  if (!s.conditions.empty()) {
    json conditions = json::array();
    for (const Condition& c : s.conditions) {
      conditions.push_back({{"type", c.type},
                            {"status", c.status},
                            {"reason", c.reason},
                            {"message", c.message},
                            {"lastUpdateTime", c.last_update_time},
                            {"lastTransitionTime", c.last_transition_time}});
    }
    out["conditions"] = conditions;
  }
  if (!s.replica_statuses.empty()) {
    json replicas = json::object();
    for (const auto& [role, c] : s.replica_statuses) {
      replicas[role] = {{"active", c.active},
                        {"succeeded", c.succeeded},
                        {"failed", c.failed},
                        {"restarts", c.restarts}};
    }
    out["replicaStatuses"] = replicas;
  }
  if (!s.workers.empty()) out["workers"] = s.workers;
  if (s.worker_replicas) out["workerReplicas"] = *s.worker_replicas;
  if (!s.worker_selector.empty()) out["workerSelector"] = s.worker_selector;
  if (s.fixed_workers) out["fixedWorkers"] = *s.fixed_workers;
  if (!s.start_time.empty()) out["startTime"] = s.start_time;
  if (!s.completion_time.empty()) out["completionTime"] = s.completion_time;
  if (s.step) out["step"] = *s.step;
  if (s.total_steps) out["totalSteps"] = *s.total_steps;
  if (!s.steps_per_second.empty()) out["stepsPerSecond"] = s.steps_per_second;
  if (!s.progress.empty()) out["progress"] = s.progress;
  if (!s.eta.empty()) out["eta"] = s.eta;
  if (!s.loss.empty()) out["loss"] = s.loss;
  if (!s.test_accuracy.empty()) out["testAccuracy"] = s.test_accuracy;
  if (!s.replica_restarts.empty()) out["replicaRestarts"] = s.replica_restarts;
  return out;
}

}  // namespace kubeps::api
