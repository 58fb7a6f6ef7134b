// The Kueue half of JobReconciler (job_reconciler.h): a queued job's
// Workload is made, read for its admission, given its quota back after an
// eviction and marked Finished when the job ends.
#include "common/logging.h"
#include "common/time_format.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;
using Clock = std::chrono::system_clock;

namespace {

// Made from a newer read of the job than `job` (another operator's, while
// leadership moved): never deactivated nor deleted from this one.
bool MadeForANewerJob(const json& workload, const json& job) {
  const std::optional<int64_t> made_for = MadeForGeneration(workload);
  return made_for && *made_for > job["metadata"].value("generation", int64_t{0});
}

}  // namespace

Status JobReconciler::GateOnKueue(const json& job, const JobIdentity& id, const std::string& queue,
                                  api::TrainingJob* spec, JobState* state, KueueGate* gate) {
  const std::string name = WorkloadName(id);
  const std::string workloads = CollectionPath(kueue_api_.Workloads(), id.namespace_);
  if (workloads_watched_ && workloads_watched_()) gate->recheck = std::chrono::milliseconds(0);
  // The job's generation the Workload was made for: a Workload is made
  // again only for a job changed since, never twice for the same spec, nor
  // from a read older than the one it was made from (another operator's).
  const int64_t generation = job["metadata"].value("generation", int64_t{0});
  Response got;
  if (Status s = client_->Get(workloads + "/" + name, &got); !s.ok()) return s;
  if (got.code == 404 && kueue_api_.MayBeStale404())
    return Status::Unavailable("Kueue's API may have changed version; reading Workload " + name +
                               " again");
  if (got.code == 404) {
    std::optional<WorkloadPriority> priority;
    if (Status s = PriorityOf(job, *spec, &priority); !s.ok()) {
      gate->reason = "PriorityClassNotRead";
      gate->message = s.message() + "; its Kueue Workload is made once it can be read";
      gate->recheck = std::chrono::seconds(30);
      return Status::Ok();
    }
    json workload =
        BuildWorkload(id, *spec, queue, options_.images, priority, kueue_api_.api_version());
    workload["metadata"]["annotations"] = {
        {kWorkloadJobGenerationAnnotation, std::to_string(generation)}};
    const std::optional<int32_t> seconds = MaximumExecutionSeconds(job);
    if (seconds) workload["spec"]["maximumExecutionTimeSeconds"] = *seconds;
    const json labels = job["metadata"].value("labels", json::object());
    if (!seconds && labels.contains(kMaxExecutionTimeLabel)) {
      RecordEvent(job, "Warning", "InvalidLabel",
                  std::string(kMaxExecutionTimeLabel) + "=" +
                      labels[kMaxExecutionTimeLabel].dump() +
                      " is not a positive whole number of seconds: the Workload has no time limit");
    }
    Response created;
    if (Status s = client_->Post(workloads, workload, &created); !s.ok()) return s;
    if (created.code == 404) {
      // No Workload kind: Kueue is not installed. Waiting is right (it may
      // be installed later), but slowly, and saying why.
      gate->reason = "KueueNotInstalled";
      gate->message = "the job is labelled " + std::string(kQueueNameLabel) + "=" + queue +
                      " but the cluster serves no " + kueue_api_.api_version() +
                      " Workload (is Kueue installed?); it waits, without pods, and checks "
                      "again every 30 s";
      gate->recheck = std::chrono::seconds(30);
      return Status::Ok();
    }
    if (created.code == 403 || created.code == 422) {  // RBAC, or a Workload Kueue refuses
      gate->reason = "WorkloadRefused";
      gate->message = "creating Kueue Workload " + name + ": " + created.Describe();
      gate->recheck = std::chrono::seconds(30);
      return Status::Ok();
    }
    if (created.code == 409) return Status::Unavailable("Workload " + name + " appeared; again");
    if (!created.ok())
      return Status::Error("creating Workload " + name + ": " + created.Describe());
    RecordEvent(job, "Normal", "CreatedWorkload",
                "Created Kueue Workload " + id.namespace_ + "/" + name + " in queue " + queue);
    got = created;
  } else if (!got.ok()) {
    return Status::Error("reading Workload " + name + ": " + got.Describe());
  }
  if (BeingDeleted(got.body)) {
    // Kueue's own finalizer, where a version puts one on: lifted, as its
    // jobframework lifts it from the Workloads of the jobs it deletes.
    LiftInUseFinalizer(id, got.body);
    gate->reason = "WorkloadDeleting";
    gate->message = "the job's earlier Kueue Workload " + name +
                    " is being deleted; a new one is made once it is gone";
    return Status::Ok();
  }
  const json annotations = got.body["metadata"].value("annotations", json::object());
  const std::optional<int64_t> made_for = MadeForGeneration(got.body);
  const WorkloadAdmission found = ReadAdmission(got.body);
  const bool quota_reserved = found.quota_reserved;
  // One made by an operator before this annotation: compared only while it
  // waits, so that an upgrade that changes the pods' requests a little (the
  // agent's) restarts no running job.
  const bool changed_since = made_for ? generation > *made_for : !quota_reserved;
  if (changed_since) {
    // Fewer pods than admitted still fit the quota: an elastic job scaled
    // down (or back up within it) trains on.
    const std::string change = PodSetChange(
        got.body,
        BuildWorkload(id, *spec, queue, options_.images, std::nullopt, kueue_api_.api_version()),
        /*reserved=*/quota_reserved, found.admitted);
    if (!change.empty()) {
      // The quota asked for no longer fits the job: the job stops, and a
      // new Workload asks for what it needs.
      gate->reason = "WorkloadChanged";
      gate->message = "the job no longer fits its Kueue Workload " + name + " (" + change +
                      "): its pods are deleted, then the Workload, and a new one asks Kueue "
                      "for the job as it is now";
      gate->remake_because = "the job changed since it was made (" + change + ")";
      gate->workload = got.body;
      return Status::Ok();
    }
  }
  if (Status s = FollowLabelChanges(job, id, *spec, queue, quota_reserved, state, &got.body);
      !s.ok()) {
    return s;
  }
  // Deactivated by this operator while the job was suspended, and the job
  // resumed. One Kueue deactivated (its requeuing limit, an execution time
  // limit, a rejected admission check) or an admin did stays off.
  if (!IsActive(got.body) && annotations.contains(kWorkloadSuspendedAnnotation)) {
    const json patch = {{"metadata", {{"annotations", {{kWorkloadSuspendedAnnotation, nullptr}}}}},
                        {"spec", {{"active", true}}}};
    Response patched;
    if (Status s = client_->Patch(workloads + "/" + name, patch, &patched); !s.ok()) return s;
    if (!patched.ok())
      return Status::Error("activating Workload " + name + ": " + patched.Describe());
    RecordEvent(job, "Normal", "ActivatedWorkload",
                "Kueue Workload " + id.namespace_ + "/" + name + " is active again: queued");
    got = patched;
  }
  const WorkloadAdmission admission = ReadAdmission(got.body);
  gate->workload = got.body;
  if (admission.evicted) {
    gate->reason = "Evicted";
    gate->message = "Kueue evicted the job's Workload " + name + " (" + admission.reason +
                    (admission.message.empty() ? "" : ": " + admission.message) +
                    "); its pods are deleted and it waits to be admitted again";
    gate->give_back_quota = admission.quota_reserved;
    return Status::Ok();
  }
  if (!admission.admitted) {
    gate->reason = "WaitingForAdmission";
    gate->message = "the job waits for Kueue to admit its Workload " + name + " (queue " + queue +
                    ")" + (admission.message.empty() ? "" : ": " + admission.message);
    return Status::Ok();
  }
  gate->admitted = true;
  // Partly admitted (an elastic job's Workload has minCount): the job
  // trains with the workers Kueue admitted, its global batch batchSize x
  // those, as for any elastic job that starts with them.
  const auto workers = admission.counts.find("worker");
  if (spec->spec.elastic.enabled() && workers != admission.counts.end() &&
      workers->second < spec->spec.worker.replicas) {
    gate->partial_admission = "Kueue admitted " + std::to_string(workers->second) + " of the " +
                              std::to_string(spec->spec.worker.replicas) +
                              " workers the job asks for (partial admission, down to "
                              "elasticPolicy.minReplicas): it trains with " +
                              std::to_string(workers->second);
    spec->spec.worker.replicas = workers->second;
  }
  std::string placed =
      got.body["metadata"].value("uid", "") + got.body["status"]["admission"].dump();
  for (const auto& [pod_set, updates] : admission.pod_set_updates) {
    for (const auto& [check, update] : updates) placed += check + update.dump();
  }
  if (state->placed_admission != placed) {
    std::map<std::string, PodSetPlacement> placements;
    std::string conflict;
    if (Status s = AdmittedPlacement(admission, &placements, &conflict); !s.ok()) return s;
    state->placements = std::move(placements);
    state->placement_conflict = std::move(conflict);
    state->placed_admission = placed;
  }
  gate->conflict = state->placement_conflict;
  const std::string with_template = ApplyPodSetPlacement(state->placements, spec);
  if (gate->conflict.empty()) gate->conflict = with_template;
  if (!gate->conflict.empty()) {
    gate->conflict = "Kueue admitted the job's Workload " + name +
                     ", but the admission conflicts with the job (" + gate->conflict +
                     "); Kueue's own job integrations do not start a job so, and neither does "
                     "the operator: its Workload is marked Finished (FailedToStart), giving its "
                     "quota back";
  }
  return Status::Ok();
}

Status JobReconciler::AdmittedPlacement(const WorkloadAdmission& admission,
                                        std::map<std::string, PodSetPlacement>* placements,
                                        std::string* conflict) {
  std::map<std::string, PodSetPlacement> read;  // flavor -> its placement, each read once
  for (const auto& [pod_set, by_resource] : admission.flavors) {
    PodSetPlacement& placement = (*placements)[pod_set];
    std::set<std::string> seen;  // a flavor of several resources counts once
    for (const auto& [resource, flavor] : by_resource) {
      if (!seen.insert(flavor).second) continue;
      if (!read.count(flavor)) {
        Response response;
        Status s = client_->Get(ObjectPath(kueue_api_.ResourceFlavors(), "", flavor), &response);
        // Not there (deleted since it was assigned) or not readable for
        // now: the start waits, as Kueue's integrations wait for it. Only
        // a flavor the operator may not read (a namespaced Role) adds nothing.
        if (!s.ok() || (!response.ok() && response.code != 403)) {
          return Status::Unavailable("reading ResourceFlavor " + flavor + " of the admission: " +
                                     (s.ok() ? response.Describe() : s.message()));
        }
        const json spec =
            response.ok() ? response.body.value("spec", json::object()) : json::object();
        // A flavor's nodeLabels and tolerations place pods as an update's
        // nodeSelector and tolerations do.
        read[flavor] =
            PlacementOfUpdate({{"nodeSelector", spec.value("nodeLabels", json::object())},
                               {"tolerations", spec.value("tolerations", json::array())}});
      }
      placement.Add(read[flavor]);  // a later flavor's key set already: the first value stays
    }
  }
  // As Kueue marks the pods of its own integrations, before the updates.
  for (auto& [pod_set, placement] : *placements) {
    PodSetPlacement marks;
    marks.labels[kPodSetLabel] = pod_set;
    marks.annotations[kWorkloadAnnotation] = admission.workload;
    if (admission.topology_assigned.count(pod_set)) {
      marks.labels[kTopologyAssignedLabel] = "true";
      marks.scheduling_gates.push_back({{"name", kTopologySchedulingGate}});
    }
    placement.Add(marks);
  }
  for (const auto& [pod_set, updates] : admission.pod_set_updates) {
    PodSetPlacement& placement = (*placements)[pod_set];
    for (const auto& [check, update] : updates) {
      const PodSetPlacement more = PlacementOfUpdate(update);
      const std::string clash = Conflict(placement, more);
      if (!clash.empty() && conflict->empty())
        *conflict = pod_set + ": admission check " + check + ": " + clash;
      placement.Add(more);
    }
  }
  return Status::Ok();
}

Status JobReconciler::PriorityOf(const json& job, const api::TrainingJob& spec,
                                 std::optional<WorkloadPriority>* priority) {
  const std::string kueue_class =
      job["metadata"].value("labels", json::object()).value(kWorkloadPriorityClassLabel, "");
  WorkloadPriority named;
  std::string path, kind;
  if (!kueue_class.empty()) {
    named = {kueue_class, kWorkloadPriorityClassSource};
    path = ObjectPath(kueue_api_.WorkloadPriorityClasses(), "", kueue_class);
    kind = "WorkloadPriorityClass";
  } else if (!spec.spec.scheduling_policy.priority_class.empty()) {
    named = {spec.spec.scheduling_policy.priority_class, kPriorityClassSource};
    path = "/apis/scheduling.k8s.io/v1/priorityclasses/" + named.class_name;
    kind = "PriorityClass";
  } else {
    return DefaultPriority(priority);
  }
  json read;
  if (Status s = ReadForPriority(path, "the job's " + kind + " " + named.class_name, &read);
      !s.ok() || read.is_null()) {
    return s;
  }
  named.value = read.value("value", int32_t{0});
  *priority = named;
  return Status::Ok();
}

Status JobReconciler::DefaultPriority(std::optional<WorkloadPriority>* priority) {
  json classes;
  if (Status s = ReadForPriority("/apis/scheduling.k8s.io/v1/priorityclasses",
                                 "the cluster's PriorityClasses (for its default)", &classes);
      !s.ok() || classes.is_null()) {
    return s;
  }
  for (const json& pc : classes.value("items", json::array())) {
    if (!pc.value("globalDefault", false)) continue;
    const int32_t value = pc.value("value", int32_t{0});
    // Two defaults (a race between their writers): the lower, as Kueue picks.
    if (!*priority || value < (*priority)->value) {
      *priority = WorkloadPriority{pc["metadata"].value("name", ""), kPriorityClassSource, value};
    }
  }
  return Status::Ok();
}

Status JobReconciler::ReadForPriority(const std::string& path, const std::string& what,
                                      json* body) {
  Response response;
  Status s = client_->Get(path, &response);
  if (s.ok() && response.code == 403) {
    KLOG_INFO << what << " may not be read (" << response.Describe()
              << "): the Workload goes without a priority from it";
    *body = nullptr;
    return Status::Ok();
  }
  if (!s.ok() || !response.ok()) {
    return Status::Unavailable(what + " cannot be read (" +
                               (s.ok() ? response.Describe() : s.message()) + ")");
  }
  *body = std::move(response.body);
  return Status::Ok();
}

void JobReconciler::ReportPodsReady(const JobIdentity& id, bool admitted,
                                    const std::vector<json>& pods, const api::TrainingJob& spec,
                                    json* workload) {
  using controller::ReplicaRole;
  std::map<ReplicaRole, std::set<int>> ready;  // the replicas whose pod is ready or done
  for (const json& pod : pods) {
    controller::ReplicaName name{ReplicaRole::kWorker, 0};
    if (!OwnedBy(pod, id) || pod["metadata"].contains("deletionTimestamp") ||
        !KubeCluster::ReplicaOf(pod, &name))
      continue;
    const json status = pod.value("status", json::object());
    bool done_or_ready = status.value("phase", "") == "Succeeded";
    for (const json& condition : status.value("conditions", json::array())) {
      done_or_ready = done_or_ready || (condition.value("type", "") == "Ready" &&
                                        condition.value("status", "") == "True");
    }
    if (done_or_ready) ready[name.role].insert(name.index);
  }
  auto all_of = [&ready](ReplicaRole role, int replicas) {
    for (int index = 0; index < replicas; ++index) {
      if (!ready[role].count(index)) return false;
    }
    return true;
  };
  const PodsReadyCondition next = NextPodsReady(
      *workload, admitted,
      all_of(ReplicaRole::kScheduler, 1) && all_of(ReplicaRole::kServer, spec.spec.ps.replicas) &&
          all_of(ReplicaRole::kWorker, spec.spec.worker.replicas));
  if (!next.changed) return;
  const json updated = WithCondition(*workload, "PodsReady", next.ready, next.reason, next.message,
                                     Rfc3339(Clock::now()));
  Response put;
  Status s = client_->Put(
      ObjectPath(kueue_api_.Workloads(), id.namespace_, WorkloadName(id), "status"), updated, &put);
  if (s.ok() && put.ok()) {
    *workload = put.body;  // a later write of this reconcile builds on it
  } else {                 // a later read writes it again
    KLOG_INFO << "PodsReady of Workload " << WorkloadName(id) << ": "
              << (s.ok() ? put.Describe() : s.message());
  }
}

void JobReconciler::FinishWorkload(const JobIdentity& id, const api::TrainingJobStatus& status) {
  if (workloads_finished_.count(id.uid)) return;
  const std::string path = ObjectPath(kueue_api_.Workloads(), id.namespace_, WorkloadName(id));
  Response got;
  if (Status s = client_->Get(path, &got); !s.ok()) return;  // the next reconcile tries again
  if (got.code == 404) {  // never made (no Kueue), or deleted: nothing holds quota
    if (kueue_api_.MayBeStale404()) return;  // asked in a version not served: again
    workloads_finished_.insert(id.uid);
    return;
  }
  if (!got.ok()) return;
  if (ReadAdmission(got.body).finished) {
    workloads_finished_.insert(id.uid);
    return;
  }
  // Kueue's reasons: a job that never started because its admission
  // conflicts with it is FailedToStart, as Kueue's jobframework says.
  const api::Condition* failed = api::FindCondition(status.conditions, "Failed");
  const std::string reason = status.phase == api::JobPhase::kSucceeded     ? "Succeeded"
                             : failed && failed->reason == "FailedToStart" ? "FailedToStart"
                                                                           : "Failed";
  json finished = WithCondition(got.body, "Finished", true, reason,
                                status.message.empty() ? "the job finished" : status.message,
                                Rfc3339(Clock::now()));
  Response put;
  if (Status s = client_->Put(path + "/status", finished, &put); s.ok() && put.ok()) {
    workloads_finished_.insert(id.uid);
  } else {
    KLOG_INFO << "marking Workload " << WorkloadName(id)
              << " Finished: " << (s.ok() ? put.Describe() : s.message()) << "; trying again";
  }
}

bool JobReconciler::GiveBackQuota(const JobIdentity& id, const json& workload,
                                  const std::string& why) {
  json released = WithoutQuotaReservation(workload, why, Rfc3339(Clock::now()));
  Response response;
  if (Status s = client_->Put(
          ObjectPath(kueue_api_.Workloads(), id.namespace_, WorkloadName(id), "status"), released,
          &response);
      !s.ok() || !response.ok()) {
    KLOG_INFO << "giving back the quota of " << WorkloadName(id) << ": "
              << (s.ok() ? response.Describe() : s.message()) << "; trying again";
    return false;
  }
  return true;
}

void JobReconciler::DeleteWorkload(const json& job, const JobIdentity& id, json workload,
                                   const std::string& why, JobState* state) {
  const std::string name = WorkloadName(id);
  const std::string path = ObjectPath(kueue_api_.Workloads(), id.namespace_, name);
  if (workload.is_null()) {
    Response got;
    if (Status s = client_->Get(path, &got); !s.ok() || !got.ok()) return;  // none, or next time
    workload = got.body;
  }
  if (BeingDeleted(workload)) return;
  if (MadeForANewerJob(workload, job)) return;
  const json& meta = workload["metadata"];
  LiftInUseFinalizer(id, workload);
  // This Workload, not one made again under its name meanwhile.
  Response deleted;
  Status s = client_->DeleteWithOptions(path, DeleteOnlyUid(meta.value("uid", "")), &deleted);
  if (s.ok() && (deleted.ok() || deleted.code == 404 || deleted.code == 409)) {
    state->workload_not_deleted.clear();
    if (deleted.ok())
      RecordEvent(job, "Normal", "DeletedWorkload",
                  "Deleted Kueue Workload " + id.namespace_ + "/" + name + ": " + why);
    return;
  }
  // RBAC without `delete` on workloads (an operator upgraded, its role not):
  // the job would wait, or keep its quota, with no word of why.
  const std::string message = "deleting Kueue Workload " + id.namespace_ + "/" + name + " (" + why +
                              "): " + (s.ok() ? deleted.Describe() : s.message()) + "; tried again";
  KLOG_ERROR << message;
  if (message != state->workload_not_deleted)
    RecordEvent(job, "Warning", "WorkloadNotDeleted", message);
  state->workload_not_deleted = message;
}

bool JobReconciler::DeactivateWorkload(const json& job, const JobIdentity& id) {
  const std::string name = WorkloadName(id);
  const std::string path = ObjectPath(kueue_api_.Workloads(), id.namespace_, name);
  Response got;
  if (Status s = client_->Get(path, &got); !s.ok()) return false;
  if (got.code == 404) return !kueue_api_.MayBeStale404();  // none: nothing holds quota
  if (!got.ok()) return false;
  if (BeingDeleted(got.body) || MadeForANewerJob(got.body, job)) return true;
  json workload = got.body;
  if (IsActive(workload)) {
    // Marked as this operator's, so that only this deactivation is undone
    // when the job resumes.
    const json patch = {{"metadata", {{"annotations", {{kWorkloadSuspendedAnnotation, "true"}}}}},
                        {"spec", {{"active", false}}}};
    Response patched;
    Status s = client_->Patch(path, patch, &patched);
    if (!s.ok() || !patched.ok()) {
      KLOG_INFO << "deactivating Workload " << name << ": "
                << (s.ok() ? patched.Describe() : s.message()) << "; trying again";
      return false;
    }
    RecordEvent(job, "Normal", "DeactivatedWorkload",
                "Deactivated Kueue Workload " + id.namespace_ + "/" + name +
                    ": the job is suspended; its quota goes back to the queue");
    workload = patched.body;
  }
  // The job is stopped: the reservation goes, as after an eviction.
  if (!ReadAdmission(workload).quota_reserved) return true;
  return GiveBackQuota(id, workload, "the job is suspended (spec.runPolicy.suspend)");
}

void JobReconciler::LiftInUseFinalizer(const JobIdentity& id, const json& workload) {
  const json& meta = workload["metadata"];
  json finalizers = json::array();
  bool held = false;
  for (const json& finalizer : meta.value("finalizers", json::array())) {
    if (finalizer == kWorkloadInUseFinalizer) {
      held = true;
    } else {
      finalizers.push_back(finalizer);
    }
  }
  if (!held) return;
  // Conditional on what was read: another writer's finalizers stay.
  const json patch = {
      {"metadata",
       {{"finalizers", finalizers}, {"resourceVersion", meta.value("resourceVersion", "")}}}};
  Response patched;
  Status s = client_->Patch(ObjectPath(kueue_api_.Workloads(), id.namespace_, WorkloadName(id)),
                            patch, &patched);
  if (!s.ok() || (!patched.ok() && patched.code != 404)) {
    KLOG_INFO << "lifting " << kWorkloadInUseFinalizer << " from Workload " << WorkloadName(id)
              << ": " << (s.ok() ? patched.Describe() : s.message()) << "; trying again";
  }
}

}  // namespace kubeps::kube
