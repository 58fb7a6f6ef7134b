// The Kueue half of JobReconciler (job_reconciler.h): a queued job's
// Workload is made, read for its admission, given its quota back after an
// eviction and marked Finished when the job ends.
#include "common/logging.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kubeclient/api_path.h"
#include "operator/kubeclient/time_format.h"

namespace kubeps::kube {

using nlohmann::json;
using Clock = std::chrono::system_clock;

Status JobReconciler::GateOnKueue(const json& job, const JobIdentity& id, const std::string& queue,
                                  api::TrainingJob* spec, KueueGate* gate) {
  const std::string name = WorkloadName(id);
  const std::string workloads = CollectionPath(kWorkloads, id.namespace_);
  Response got;
  if (Status s = client_->Get(workloads + "/" + name, &got); !s.ok()) return s;
  if (got.code == 404) {
    std::optional<int32_t> priority;
    if (!spec->spec.scheduling_policy.priority_class.empty())
      priority = PriorityValue(spec->spec.scheduling_policy.priority_class);
    Response created;
    if (Status s = client_->Post(
            workloads, BuildWorkload(id, *spec, queue, options_.images, priority), &created);
        !s.ok())
      return s;
    if (created.code == 404) {
      // No Workload kind: Kueue is not installed. Waiting is right (it may
      // be installed later), but slowly, and saying why.
      gate->reason = "KueueNotInstalled";
      gate->message = "the job is labelled " + std::string(kQueueNameLabel) + "=" + queue +
                      " but the cluster serves no kueue.x-k8s.io/v1beta1 Workload (is Kueue "
                      "installed?); it waits, without pods, and checks again every 30 s";
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
  const WorkloadAdmission admission = ReadAdmission(got.body);
  if (admission.evicted) {
    gate->reason = "Evicted";
    gate->message = "Kueue evicted the job's Workload " + name + " (" + admission.reason +
                    (admission.message.empty() ? "" : ": " + admission.message) +
                    "); its pods are deleted and it waits to be admitted again";
    gate->give_back_quota = admission.quota_reserved;
    gate->workload = got.body;
    return Status::Ok();
  }
  if (!admission.admitted) {
    gate->reason = "WaitingForAdmission";
    gate->message = "the job waits for Kueue to admit its Workload " + name + " (queue " + queue +
                    ")" + (admission.message.empty() ? "" : ": " + admission.message);
    return Status::Ok();
  }
  gate->admitted = true;
  ApplyFlavorNodeLabels(FlavorNodeLabels(admission.flavors), spec);
  return Status::Ok();
}

std::map<std::string, std::map<std::string, std::string>> JobReconciler::FlavorNodeLabels(
    const std::map<std::string, std::map<std::string, std::string>>& flavors) {
  static const Resource kResourceFlavors{"kueue.x-k8s.io", "v1beta1", "resourceflavors"};
  std::map<std::string, std::map<std::string, std::string>> labels;
  std::map<std::string, json> read;  // flavor -> its nodeLabels, each read once
  for (const auto& [pod_set, by_resource] : flavors) {
    for (const auto& [resource, flavor] : by_resource) {
      if (!read.count(flavor)) {
        Response response;
        Status s = client_->Get(GroupVersionPath(kResourceFlavors) + "/resourceflavors/" + flavor,
                                &response);
        read[flavor] = s.ok() && response.ok()
                           ? response.body["spec"].value("nodeLabels", json::object())
                           : json::object();
      }
      for (const auto& [key, value] : read[flavor].items()) {
        if (value.is_string()) labels[pod_set][key] = value.get<std::string>();
      }
    }
  }
  return labels;
}

std::optional<int32_t> JobReconciler::PriorityValue(const std::string& priority_class) {
  Response response;
  Status s =
      client_->Get("/apis/scheduling.k8s.io/v1/priorityclasses/" + priority_class, &response);
  if (!s.ok() || !response.ok()) {
    KLOG_INFO << "PriorityClass " << priority_class << " not read ("
              << (s.ok() ? response.Describe() : s.message())
              << "): the Workload goes without a priority";
    return std::nullopt;
  }
  return response.body.value("value", int32_t{0});
}

void JobReconciler::FinishWorkload(const JobIdentity& id, const api::TrainingJobStatus& status) {
  if (workloads_finished_.count(id.uid)) return;
  const std::string path = ObjectPath(kWorkloads, id.namespace_, WorkloadName(id));
  Response got;
  if (Status s = client_->Get(path, &got); !s.ok()) return;  // the next reconcile tries again
  if (got.code == 404) {  // never made (no Kueue), or deleted: nothing holds quota
    workloads_finished_.insert(id.uid);
    return;
  }
  if (!got.ok()) return;
  if (ReadAdmission(got.body).finished) {
    workloads_finished_.insert(id.uid);
    return;
  }
  const bool succeeded = status.phase == api::JobPhase::kSucceeded;
  json finished = WithCondition(got.body, "Finished", true, succeeded ? "Succeeded" : "Failed",
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

void JobReconciler::GiveBackQuota(const JobIdentity& id, const KueueGate& gate) {
  json released = WithoutQuotaReservation(gate.workload, gate.message, Rfc3339(Clock::now()));
  Response response;
  if (Status s = client_->Put(ObjectPath(kWorkloads, id.namespace_, WorkloadName(id), "status"),
                              released, &response);
      !s.ok() || !response.ok()) {
    KLOG_INFO << "giving back the quota of " << WorkloadName(id) << ": "
              << (s.ok() ? response.Describe() : s.message()) << "; trying again";
  }
}

}  // namespace kubeps::kube
