// Kueue's labels on a queued TrainingJob changed after its Workload was
// made: its queue and its WorkloadPriorityClass follow, as Kueue's
// jobframework updates the Workloads of the job kinds it integrates. A
// label change bumps no generation, so the Workload is never made again for
// it: only these look.
#include "common/logging.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;

namespace {

std::string LabelOf(const json& job, const std::string& label) {
  return job["metadata"].value("labels", json::object()).value(label, "");
}

}  // namespace

Status JobReconciler::FollowLabelChanges(const json& job, const JobIdentity& id,
                                         const api::TrainingJob& spec, const std::string& queue,
                                         bool quota_reserved, JobState* state, json* workload) {
  if (Status s = FollowQueueChange(job, id, queue, quota_reserved, state, workload); !s.ok())
    return s;
  return FollowPriorityChange(job, id, spec, state, workload);
}

Status JobReconciler::FollowQueueChange(const json& job, const JobIdentity& id,
                                        const std::string& queue, bool quota_reserved,
                                        JobState* state, json* workload) {
  const std::string was = (*workload)["spec"].value("queueName", "");
  if (was == queue) {
    state->label_changes_reported.erase(kQueueNameLabel);
    return Status::Ok();
  }
  const std::string name = WorkloadName(id);
  auto not_followed = [&](const std::string& why) {
    SayLabelNotFollowed(job, state, kQueueNameLabel, "QueueChangeIgnored",
                        "its Kueue Workload " + name + " stays in queue " + was + ": " + why);
    return Status::Ok();
  };
  if (quota_reserved) {
    return not_followed("it holds quota there (suspend the job to give it back and move it)");
  }
  std::string refused;
  const json patch = {{"metadata", {{"labels", {{kQueueNameLabel, queue}}}}},
                      {"spec", {{"queueName", queue}}}};
  if (Status s = PatchWorkload(id, patch, workload, &refused); !s.ok()) return s;
  if (!refused.empty()) return not_followed("moving it was refused: " + refused);
  RecordEvent(job, "Normal", "UpdatedWorkload",
              "Kueue Workload " + id.namespace_ + "/" + name + " moved from queue " + was +
                  " to queue " + queue);
  return Status::Ok();
}

Status JobReconciler::FollowPriorityChange(const json& job, const JobIdentity& id,
                                           const api::TrainingJob& spec, JobState* state,
                                           json* workload) {
  const std::string wanted = LabelOf(job, kWorkloadPriorityClassLabel);
  const std::string was = WorkloadPriorityClassOf(*workload);
  // Kueue follows the label onto a Workload without a priority, or with a
  // WorkloadPriorityClass's; one with a pods' PriorityClass keeps it.
  const bool follows = !was.empty() || !(*workload)["spec"].contains("priority");
  if (wanted == was || !follows) {
    state->label_changes_reported.erase(kWorkloadPriorityClassLabel);
    return Status::Ok();
  }
  const std::string name = WorkloadName(id);
  auto not_followed = [&](const std::string& why) {
    SayLabelNotFollowed(job, state, kWorkloadPriorityClassLabel, "PriorityChangeIgnored",
                        "its Kueue Workload " + name + " keeps its priority: " + why);
  };
  // The priority the job gets now: the label's class, or without it its
  // pods' PriorityClass or the cluster's default.
  std::optional<WorkloadPriority> priority;
  if (Status s = PriorityOf(job, spec, &priority); !s.ok()) {
    not_followed(s.message());
    return s;  // read again when the reconcile is retried
  }
  if (!wanted.empty() && !priority) {  // the class may not be read (a namespaced Role)
    not_followed("WorkloadPriorityClass " + wanted + " may not be read");
    return Status::Ok();
  }
  json patch = {{"spec", json::object()}};
  if (priority) {
    patch["spec"] = PrioritySpec(*priority, kueue_api_.api_version());
  } else {  // none at all: every priority field goes
    for (const char* field :
         {"priority", "priorityClassName", "priorityClassSource", "priorityClassRef"}) {
      if ((*workload)["spec"].contains(field)) patch["spec"][field] = nullptr;
    }
  }
  std::string refused;
  if (Status s = PatchWorkload(id, patch, workload, &refused); !s.ok()) return s;
  if (!refused.empty()) {
    not_followed("the change was refused: " + refused);
    return Status::Ok();
  }
  const std::string now =
      priority ? priority->class_name + " (priority " + std::to_string(priority->value) + ")"
               : "no priority";
  RecordEvent(job, "Normal", "UpdatedWorkload",
              "Kueue Workload " + id.namespace_ + "/" + name + " takes " + now +
                  (was.empty() ? "" : ", not WorkloadPriorityClass " + was));
  return Status::Ok();
}

Status JobReconciler::PatchWorkload(const JobIdentity& id, const json& patch, json* workload,
                                    std::string* refused) {
  json versioned = patch;
  versioned["metadata"]["resourceVersion"] = (*workload)["metadata"].value("resourceVersion", "");
  const std::string name = WorkloadName(id);
  Response patched;
  if (Status s = client_->Patch(ObjectPath(kueue_api_.Workloads(), id.namespace_, name), versioned,
                                &patched);
      !s.ok()) {
    return s;
  }
  if (patched.code == 409) return Status::Unavailable("Workload " + name + " changed; again");
  if (patched.code == 403 || patched.code == 422) {  // RBAC, or what Kueue's schema refuses
    *refused = patched.Describe();
    return Status::Ok();
  }
  if (!patched.ok()) return Status::Error("updating Workload " + name + ": " + patched.Describe());
  *workload = patched.body;
  return Status::Ok();
}

void JobReconciler::SayLabelNotFollowed(const json& job, JobState* state, const std::string& label,
                                        const std::string& reason, const std::string& message) {
  const std::string value = LabelOf(job, label);
  std::string& said = state->label_changes_reported[label];
  if (said == value) return;
  said = value;
  RecordEvent(job, "Warning", reason,
              "the job is labelled " + label + "=" + value + ", but " + message);
}

}  // namespace kubeps::kube
