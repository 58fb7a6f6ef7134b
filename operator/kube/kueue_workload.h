// Kueue's side of a queued TrainingJob, as pure functions: the Workload
// that asks Kueue for quota, and what Kueue wrote back into its status.
// Modelled on Kueue's jobframework, which integrates a job kind the same
// way: a job labelled kueue.x-k8s.io/queue-name runs only while its
// Workload is admitted; it is stopped (its pods deleted) when Kueue evicts
// the Workload, and marks the Workload Finished when it ends, so Kueue
// releases the quota. docs/kueue.md tells the whole cycle.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBE_KUEUE_WORKLOAD_H_
#define KUBEPS_OPERATOR_KUBE_KUEUE_WORKLOAD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/training_job.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

inline constexpr const char* kQueueNameLabel = "kueue.x-k8s.io/queue-name";
// The finalizer Kueue's jobframework puts on the Workloads it makes and
// lifts when it deletes one; the operator lifts it too, where a Kueue
// version puts it on a kubeps Workload.
inline constexpr const char* kWorkloadInUseFinalizer = "kueue.x-k8s.io/resource-in-use";
// Set on a Workload the operator deactivated for its job's suspend: only
// that deactivation is undone when the job resumes.
inline constexpr const char* kWorkloadSuspendedAnnotation = "kubeps.io/deactivated-for-suspend";
// Kueue's Topology Aware Scheduling. A role's pod template annotated with
// one of these asks Kueue to place its pods within a domain of that
// topology level (its value: a node label, a rack or a block); an admission
// that assigns the role domains holds its pods behind the scheduling gate
// until Kueue's ungater gives each its domain's node labels. Kueue finds
// an admitted job's pods by the pod set label and the Workload annotation.
inline constexpr const char* kRequiredTopologyAnnotation =
    "kueue.x-k8s.io/podset-required-topology";
inline constexpr const char* kPreferredTopologyAnnotation =
    "kueue.x-k8s.io/podset-preferred-topology";
inline constexpr const char* kUnconstrainedTopologyAnnotation =
    "kueue.x-k8s.io/podset-unconstrained-topology";
inline constexpr const char* kTopologySchedulingGate = "kueue.x-k8s.io/topology";
inline constexpr const char* kTopologyAssignedLabel = "kueue.x-k8s.io/tas";
inline constexpr const char* kPodSetLabel = "kueue.x-k8s.io/podset";
inline constexpr const char* kWorkloadAnnotation = "kueue.x-k8s.io/workload";
// The job's metadata.generation a Workload was made for.
inline constexpr const char* kWorkloadJobGenerationAnnotation = "kubeps.io/job-generation";
// That generation; none where the annotation is missing (a Workload made by
// an operator from before it) or not a number.
std::optional<int64_t> MadeForGeneration(const nlohmann::json& workload);

// The LocalQueue a job is submitted to (its kueue.x-k8s.io/queue-name
// label); "" for a job Kueue does not manage.
std::string QueueName(const nlohmann::json& job);

// Named as Kueue names the Workloads of the kinds it integrates:
// "trainingjob-<job>-<5 hex digits>", cut to 63 characters (Kueue puts the
// name in labels). The hash covers the job's uid, so a job deleted and
// applied again gets a new Workload, not its predecessor's.
std::string WorkloadName(const JobIdentity& job);

// A job's priority in Kueue, as Kueue's own integrations take it: the
// WorkloadPriorityClass its kueue.x-k8s.io/priority-class label names
// (Kueue's own classes, which order its queues without touching the
// pods), else the PriorityClass of its pods (spec.schedulingPolicy
// .priorityClass); with the class's value, which Kueue requires with it.
inline constexpr const char* kWorkloadPriorityClassLabel = "kueue.x-k8s.io/priority-class";
inline constexpr const char* kWorkloadPriorityClassSource = "kueue.x-k8s.io/workloadpriorityclass";
inline constexpr const char* kPriorityClassSource = "scheduling.k8s.io/priorityclass";
struct WorkloadPriority {
  std::string class_name;
  std::string source;  // kWorkloadPriorityClassSource or kPriorityClassSource
  int32_t value = 0;
};

// The job's kueue.x-k8s.io/max-exec-time-seconds label, Kueue's limit on
// the time it runs admitted (Kueue deactivates it past that): a positive
// whole number of seconds, else none.
inline constexpr const char* kMaxExecutionTimeLabel = "kueue.x-k8s.io/max-exec-time-seconds";
std::optional<int32_t> MaximumExecutionSeconds(const nlohmann::json& job);

// The Workload of a queued job, owned by it (deleting the job deletes it):
// one pod set per role ("scheduler", "server", "worker") with count =
// replicas and template = the pod the operator would create for replica 0
// of the role (its requests, the agent sidecar's included, are what Kueue
// reserves quota for); an elastic job's workers with minCount =
// minReplicas, so that Kueue may admit it partly; a role whose template
// carries a topology annotation with a topologyRequest, its pods ordered by
// their replica index; with `priority`, its class, source and value. In
// `api_version`'s shape: v1beta2 names the class in priorityClassRef
// {group, kind, name}, where v1beta1 has priorityClassName and
// priorityClassSource.
nlohmann::json BuildWorkload(const JobIdentity& job, const api::TrainingJob& spec,
                             const std::string& queue, const ImageSet& images,
                             const std::optional<WorkloadPriority>& priority,
                             const std::string& api_version);

// The spec fields that give a Workload of `api_version` `priority`: its
// value, and its class as that version names it.
nlohmann::json PrioritySpec(const WorkloadPriority& priority, const std::string& api_version);

// The Kueue WorkloadPriorityClass a Workload of either version takes its
// priority from; "" where it has none or a pods' PriorityClass.
std::string WorkloadPriorityClassOf(const nlohmann::json& workload);

// How the pod sets of `wanted` (BuildWorkload of the job as it is now)
// differ from those of `workload`, the one Kueue has, in what Kueue admits
// by: "" when every pod set has the same count and its containers the same
// requests, and, until the Workload is admitted, the same minCount and
// tolerations (Kueue admits by them; its own job integration compares the
// tolerations too, and leaves them alone once admitted, when the flavor's
// are added: a reservation whose admission checks still run is not that
// yet); else
// what changed, for the user ("worker: 3 pods, was 2"). `reserved`: the
// Workload holds its quota, so fewer pods still fit. The rest of the
// template (env, images) does not count, so that an operator upgrade does
// not re-queue every job.
std::string PodSetChange(const nlohmann::json& workload, const nlohmann::json& wanted,
                         bool reserved = false, bool admitted = false);

// The Workload is being deleted (a finalizer holds it): its name is taken.
bool BeingDeleted(const nlohmann::json& workload);

// spec.active, true where unset (the CRD's default): false, Kueue neither
// queues nor admits it.
bool IsActive(const nlohmann::json& workload);

// An Evicted condition's reason for a deactivated Workload: Kueue's
// "InactiveWorkload" before 0.10, "Deactivated" and "DeactivatedDueTo..."
// since.
bool IsDeactivation(const std::string& eviction_reason);

// What Kueue decided, from a Workload's status. Read as Kueue's own
// jobframework does: eviction first (Evicted=True stops the job whatever
// else is set), then admission (Admitted=True with status.admission).
struct WorkloadAdmission {
  std::string workload;  // its name
  bool admitted = false;
  // Evicted and not merely waiting: a deactivation's eviction (IsDeactivation)
  // of a Workload active again and holding no reservation only waits.
  bool evicted = false;
  bool finished = false;
  bool quota_reserved = false;  // status.admission is set (Kueue holds quota for it)
  // Why it is not admitted: Evicted's reason and message, else
  // QuotaReserved=False's (Kueue's "couldn't assign flavors ...").
  std::string reason;
  std::string message;
  // Each pod set's assigned ResourceFlavors (resource name -> flavor).
  std::map<std::string, std::map<std::string, std::string>> flavors;
  // Each pod set's admitted count, where Kueue says it: fewer than asked
  // for where it admitted a pod set with minCount partly.
  std::map<std::string, int> counts;
  // The pod sets Kueue assigned topology domains (Topology Aware Scheduling).
  std::set<std::string> topology_assigned;
  // Each pod set's podSetUpdates from the admission checks, in their order.
  struct PodSetUpdate {
    std::string check;  // the admission check's name
    nlohmann::json update;
  };
  std::map<std::string, std::vector<PodSetUpdate>> pod_set_updates;
};
WorkloadAdmission ReadAdmission(const nlohmann::json& workload);

// `workload` with `type` set to `status` (a Kueue condition: reason,
// message, lastTransitionTime kept while the status does not change).
nlohmann::json WithCondition(nlohmann::json workload, const std::string& type, bool status,
                             const std::string& reason, const std::string& message,
                             const std::string& now);

// Kueue's PodsReady condition for a Workload whose job's pods are all ready
// (or done) or not, following the one it has, as Kueue's own job
// integrations write it for its waitForPodsReady (which evicts a job whose
// pods are not ready in time, and counts its recovery time after a pod
// failed): Started, then WaitForRecovery and Recovered; WaitForStart
// before the start and while it is not admitted (evicted, requeued).
// `changed`: it is not the Workload's yet.
struct PodsReadyCondition {
  bool ready = false;
  std::string reason;
  std::string message;
  bool changed = false;
};
PodsReadyCondition NextPodsReady(const nlohmann::json& workload, bool admitted, bool pods_ready);

// `workload` with its quota reservation given back after an eviction, as
// Kueue's jobframework does once the job is stopped: admission cleared,
// QuotaReserved=False (Pending) and Admitted=False, so Kueue queues it again.
nlohmann::json WithoutQuotaReservation(nlohmann::json workload, const std::string& message,
                                       const std::string& now);

// Where an admission puts a pod set's pods, and what it marks them with:
// the nodeLabels and tolerations of its ResourceFlavors (a flavor of
// tainted nodes, as GPU nodes often are, needs both), the pod set label and
// Workload annotation (and, with a topology assignment, Kueue's scheduling
// gate), then the podSetUpdates of its admission checks (a
// ProvisioningRequest's annotations, which send the pods to the nodes
// provisioned for them). Objects of strings, and arrays of tolerations and
// of gates, as in a PodSpec.
struct PodSetPlacement {
  nlohmann::json node_selector = nlohmann::json::object();
  nlohmann::json tolerations = nlohmann::json::array();
  nlohmann::json labels = nlohmann::json::object();
  nlohmann::json annotations = nlohmann::json::object();
  nlohmann::json scheduling_gates = nlohmann::json::array();

  // Merges `more` in as Kueue merges pod set infos: a key already set keeps
  // its value, a toleration or a gate already there is not added again.
  void Add(const PodSetPlacement& more);
};

// An admission check's podSetUpdates entry (labels, annotations,
// nodeSelector, tolerations) as a placement.
PodSetPlacement PlacementOfUpdate(const nlohmann::json& update);

// The first key that `first` and `second` both set, to different values,
// among the node selector, the labels and the annotations (Kueue compares
// those three; tolerations only add up), as `nodeSelector "pool": "spot"
// against "gpu"`; "" where there is none. Kueue's own integrations do not
// start a job whose admission checks' updates conflict so with its flavors
// or its pod template.
std::string Conflict(const PodSetPlacement& first, const PodSetPlacement& second);

// `spec` with each role's placement (pod set name -> placement) merged into
// its pod template as Kueue merges it into the pods of the kinds it
// integrates, the template's own values first: a key the template sets
// keeps its value, a toleration it has is not added twice. Returns the
// first conflict with a template (`worker: nodeSelector "gpu": "a100" in
// its pod template against "h100"`), "" where there is none.
std::string ApplyPodSetPlacement(const std::map<std::string, PodSetPlacement>& placement,
                                 api::TrainingJob* spec);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_KUEUE_WORKLOAD_H_
