// Reconciles one TrainingJob against the cluster: the kubeps-operator's
// reconcile function. Level-triggered and idempotent: it reads the job and
// its pods (from the caches), makes the Secret and Services exist, lets the
// shared job logic (controller/job_controller.h) create, restart and delete
// pods, and writes the job's status through the /status subresource.
// Running it twice on the same state changes nothing; an operator restart
// loses nothing that matters (restart counts live on the pods, the phase of
// a finished job in its status).
//
// A job labelled kueue.x-k8s.io/queue-name runs only while Kueue admits
// its Workload (kueue_workload.h): until then, and after an eviction, it is
// held like a suspended job (no pods, phase Suspended, the reason in its
// condition); when it ends, its Workload is marked Finished.
//
// Not thread-safe: the manager runs one reconcile worker; its caches
// (informer.h) are what other threads share.
#ifndef KUBEPS_OPERATOR_KUBE_JOB_RECONCILER_H_
#define KUBEPS_OPERATOR_KUBE_JOB_RECONCILER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/training_job_status.h"
#include "common/metrics.h"
#include "operator/controller/job_controller.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kube/kueue_api.h"
#include "operator/kube/kueue_workload.h"
#include "operator/kube/mount_failures.h"
#include "operator/kube/pod_builder.h"
#include "operator/kube/pod_expectations.h"
#include "operator/kube/progress_probe.h"
#include "operator/kube/stranded_pods.h"
#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

struct ReconcileResult {
  std::chrono::milliseconds requeue_after{0};  // 0 = only on the next change
};

class JobReconciler {
 public:
  JobReconciler(KubeClient* client, JobObjectOptions options, MetricsServer* metrics);

  // `job` is the TrainingJob object as the API server has it; `pods` are
  // the pods labelled with its name in its namespace.
  Status Reconcile(const nlohmann::json& job, const std::vector<nlohmann::json>& pods,
                   ReconcileResult* result);

  // The version of Kueue's API the cluster serves, which the Workload watch
  // follows too (manager.cc).
  KueueApi& kueue_api() { return kueue_api_; }

  // How worker 0's progress is read (progress_probe.h's ProbeProgress
  // unless a test says otherwise).
  using ProgressProbe =
      std::function<std::optional<WorkerProgress>(const std::string& host, int port)>;
  void ProbeProgressWith(ProgressProbe probe) { probe_ = std::move(probe); }
  // How the ranks an elastic job's scheduler says compute are read
  // (ProbeComputingWorkers unless a test says otherwise).
  using ComputingProbe =
      std::function<std::optional<std::vector<int>>(const std::string& host, int port)>;
  void ProbeComputingWith(ComputingProbe probe) { computing_probe_ = std::move(probe); }
  // The clock (ms) the job logic's timers read: the system's unless a test
  // says otherwise.
  void ClockWith(std::function<int64_t()> now_ms) { now_ms_ = std::move(now_ms); }

  // The job is gone: forget its in-memory state.
  void Forget(const std::string& uid);

  // Whether a watch on Workloads is current (manager.cc): then a queued job
  // is reconciled when its Workload changes, not looked at every 2 s.
  void WatchWorkloadsWith(std::function<bool()> watching) {
    workloads_watched_ = std::move(watching);
  }

 private:
  struct JobState {
    controller::JobController::Timers timers;  // carried from one reconcile to the next
    // Secrets, Services and certificates made, for this many replicas (an
    // elastic job's maxReplicas may grow: its new workers need certificates).
    size_t owned_objects_for = 0;
    std::chrono::steady_clock::time_point owned_objects_checked;  // when last looked at
    size_t cert_manager_objects_made = 0;  // Issuers and Certificates POSTed, for as many
    int64_t certificates_waited_since_ms = -1;
    bool certificates_wait_reported = false;
    bool reported_running = false;
    // The job's TLS and who issues its certificates, as its token Secret
    // records them (else as this operator decides); unset until read.
    std::optional<bool> tls;
    std::string tls_issuer;  // kOperatorIssuer, kCertManagerIssuer; "" undecided
    int restarts_reported = 0;
    // "pod/reason" of every pod that could not start, said once in an Event.
    std::set<std::string> start_problems_reported;
    std::set<std::string> quota_refusals_reported;     // pod names, "Service NAME"
    std::set<std::string> evictions_reported;          // pod uids
    double last_steps = -1;                            // worker 0's step counter at the last probe
    std::optional<api::TrainingJobStatus> terminal;    // decided, not yet written
    std::chrono::steady_clock::time_point last_probe;  // answered
    std::optional<std::chrono::steady_clock::time_point> last_probe_tried;  // answered or not
    PodExpectations created_pods;  // made here, maybe not in the cache yet
    MountFailures mount_failures;  // pods waiting on a volume the kubelet cannot mount
    StrandedPods stranded_pods;    // pods left Terminating on a lost node
    // Elastic jobs: the workers the spec asked for at the last look (-1: not
    // looked yet), and since when each worker past them has been there.
    int desired_workers = -1;
    // The ranks the scheduler last said compute the newest step, asked
    // while a worker scaled away is there: kept through a probe unanswered.
    std::optional<std::vector<int>> computing_workers;
    bool told_desired_failure = false;  // its Warning Event was recorded
    std::string workload_not_deleted;   // the WorkloadNotDeleted Event last recorded
    std::string scale_reported;         // the ScaleOutOfBounds or ScaleRefused Event last recorded
    std::string partial_admission_reported;  // the PartiallyAdmitted Event last recorded
    std::string status_refusal_reported;     // the fields the last StatusRefused Event named
    // Kueue label -> the value last said not to be followed (SayLabelNotFollowed).
    std::map<std::string, std::string> label_changes_reported;
    // Where the job's admission puts its pods, worked out once for each
    // admission (`placed_admission`: the Workload's uid, its admission and
    // its checks' updates), as Kueue reads the flavors once, when it starts
    // a job: a running job's reconciles read no flavor, and one that cannot
    // be read for a while holds back only the job's start.
    std::string placed_admission;
    std::map<std::string, PodSetPlacement> placements;
    std::string placement_conflict;
  };
  // A pod with the condition DisruptionTarget is said once in an Event:
  // one being deleted (an eviction: a drain, the taint manager, preemption)
  // goes without failing and is re-created once gone; one the kubelet ended
  // (Failed, not deleted) is made again without counting as a restart,
  // unless it was evicted for node pressure (kube_cluster.h).
  void ReportEvictions(const nlohmann::json& job, const std::vector<nlohmann::json>& pods,
                       JobState* state);
  // The training progress into `status` (job_progress.h): from worker 0's
  // last words once it has finished, else from its metrics while `running`.
  void ReadProgress(const JobIdentity& id, const std::vector<nlohmann::json>& pods, bool running,
                    bool finished, JobState* state, api::TrainingJobStatus* status);
  // Step, total, loss and steps/sec from worker 0's metrics.
  void ProbeWorker(const std::vector<nlohmann::json>& pods, JobState* state,
                   api::TrainingJobStatus* status);

  // A running job whose worker replicas were changed where it cannot follow
  // (kubectl scale, an autoscaler: nothing refuses it at the API server)
  // trains on instead of failing: an elastic job outside [minReplicas,
  // maxReplicas] with the nearest bound, a job without elasticPolicy with
  // the workers it started with: `started` (StartedWorkers), or else
  // `status`'s fixedWorkers (no pod of it left). `job`'s replicas are set
  // to that; returns the Warning Event to record, or no reason.
  struct ScaleRefusal {
    std::string reason;  // ScaleOutOfBounds, ScaleRefused; "": none
    std::string message;
  };
  static ScaleRefusal SettleScaledWorkers(const api::TrainingJobStatus& status,
                                          std::optional<int> started, nlohmann::json* job);
  // The workers the job's pods, those not being deleted, were made for: its
  // scheduler's number, or while that is made again another pod's.
  static std::optional<int> StartedWorkers(const std::vector<nlohmann::json>& pods,
                                           const JobIdentity& id);
  // Elastic jobs (job_reconciler_elastic.cc): the scheduler pod's
  // annotation follows the spec's worker replicas; each change is an Event.
  Status TellDesiredWorkers(const nlohmann::json& job, const JobIdentity& id,
                            const api::TrainingJob& spec, const std::vector<nlohmann::json>& pods,
                            JobState* state);
  // Tells the job logic which ranks the scheduler says compute, so that a
  // worker scaled away is stopped only once it does not leave after its
  // last step (which may come minutes after the scale), not 30 s after it.
  void ReadComputingWorkers(const JobIdentity& id, const api::TrainingJob& spec,
                            const std::vector<nlohmann::json>& pods, JobState* state,
                            controller::JobController* controller);

  // Kueue (job_reconciler_kueue.cc). Whether Kueue lets a queued job run now. Makes its Workload
  // exist (an Event when made); an admitted job's pod templates get the node labels of the flavors
  // Kueue assigned (into *spec).
  struct KueueGate {
    bool admitted = false;
    std::string reason;   // of the hold, for the job's Suspended condition
    std::string message;  // why it waits, for the user
    // Without a watch on Workloads, a queued job's is read this often.
    static constexpr std::chrono::milliseconds kPoll{2000};
    // When to look at the job again for Kueue's sake; 0: when its Workload
    // changes (a watch on Workloads is current).
    std::chrono::milliseconds recheck = kPoll;
    // Evicted while Kueue still reserves quota for it: once its pods are
    // deleted, the operator gives the reservation back (as Kueue's
    // jobframework does), and Kueue queues the Workload again.
    bool give_back_quota = false;
    // What changed in the job since its Workload was made (its pod counts
    // or requests), if anything: once its pods are deleted the Workload is
    // too, and the next reconcile makes it again.
    std::string remake_because;
    nlohmann::json workload;  // as read, once it is there and not being deleted
    // Admitted, but the admission conflicts with the job's pod templates or
    // within itself: Kueue's own integrations fail such a job at its start.
    std::string conflict;
    // Admitted with fewer workers than the job asks for: what it runs with.
    std::string partial_admission;
  };
  Status GateOnKueue(const nlohmann::json& job, const JobIdentity& id, const std::string& queue,
                     api::TrainingJob* spec, JobState* state, KueueGate* gate);
  // Kueue's labels on a job changed after its Workload was made (a label
  // change bumps no generation: nothing else sees it), followed as Kueue's
  // jobframework follows them (job_reconciler_kueue_labels.cc). A change
  // not followed is said once, in a Warning Event. `workload` is updated.
  Status FollowLabelChanges(const nlohmann::json& job, const JobIdentity& id,
                            const api::TrainingJob& spec, const std::string& queue,
                            bool quota_reserved, JobState* state, nlohmann::json* workload);
  // Its queue-name: the Workload moves to that queue while it holds no
  // quota (Kueue does so for a suspended job); one holding quota stays.
  Status FollowQueueChange(const nlohmann::json& job, const JobIdentity& id,
                           const std::string& queue, bool quota_reserved, JobState* state,
                           nlohmann::json* workload);
  // Its priority-class: the Workload takes that WorkloadPriorityClass and
  // its value, where it has no priority or one of a WorkloadPriorityClass
  // (Kueue's UpdateWorkloadPriority), even while admitted where the API
  // server allows it; the label removed, the priority the job would get
  // without it (its pods' PriorityClass, the cluster's default, or none).
  // A class that cannot be read now is an error: the reconcile is retried.
  Status FollowPriorityChange(const nlohmann::json& job, const JobIdentity& id,
                              const api::TrainingJob& spec, JobState* state,
                              nlohmann::json* workload);
  // A merge patch of the job's Workload made from `workload` as read (its
  // resourceVersion: a write that would land on a newer one fails);
  // `refused` is true, with why, where the API server refuses it (403, 422).
  Status PatchWorkload(const JobIdentity& id, const nlohmann::json& patch, nlohmann::json* workload,
                       std::string* refused);
  // The Warning Event `reason` that the job's `label` is not followed, once
  // for each value the label asks for.
  void SayLabelNotFollowed(const nlohmann::json& job, JobState* state, const std::string& label,
                           const std::string& reason, const std::string& message);
  // Where an admission puts each pod set (kueue_workload.h): its flavors'
  // node labels and tolerations, Kueue's marks, then its admission checks'
  // updates. A flavor the operator may not read (a namespaced Role) adds
  // nothing; one that is not there or cannot be read now is an error, as in
  // Kueue: no pod starts without it. `conflict`: the
  // first update that sets a key the flavors or an earlier update set to
  // another value ("server: admission check prov: nodeSelector ...").
  Status AdmittedPlacement(const WorkloadAdmission& admission,
                           std::map<std::string, PodSetPlacement>* placements,
                           std::string* conflict);
  // The job's priority in Kueue (kueue_workload.h): of the class it names,
  // else the cluster's default (DefaultPriority); none where the operator
  // may not read classes (a namespaced Role: the Workload then goes without
  // one, as Kueue requires a class with its value). A class that cannot be
  // read otherwise (not there yet, the API server unavailable) is an error,
  // as in Kueue: no Workload is made without the priority the job asks for.
  Status PriorityOf(const nlohmann::json& job, const api::TrainingJob& spec,
                    std::optional<WorkloadPriority>* priority);
  // Where a job names no class, Kueue's: the cluster's globalDefault
  // PriorityClass, the one the API server gives the pods too; none without.
  Status DefaultPriority(std::optional<WorkloadPriority>* priority);
  // GETs `path`, what a priority is read from (`what`, for messages): its
  // body; null where the operator may not read it (a namespaced Role),
  // logged; Unavailable where it cannot be read now.
  Status ReadForPriority(const std::string& path, const std::string& what, nlohmann::json* body);
  // Kueue's PodsReady condition of the job's Workload (`workload` as read,
  // then as written), from its pods: every replica the job runs with ready
  // or succeeded, while it is admitted. Written when it changes.
  void ReportPodsReady(const JobIdentity& id, bool admitted,
                       const std::vector<nlohmann::json>& pods, const api::TrainingJob& spec,
                       nlohmann::json* workload);
  // A finished queued job: its Workload gets Finished=True, once.
  void FinishWorkload(const JobIdentity& id, const api::TrainingJobStatus& status);
  // The evicted or suspended job's pods are gone: the reservation of its
  // Workload (`workload` as read) is cleared, `why` in its QuotaReserved
  // condition. False: look again.
  bool GiveBackQuota(const JobIdentity& id, const nlohmann::json& workload, const std::string& why);
  // Deletes the job's Workload (`workload` as read, or null: read it first),
  // unless it was made from a newer read of the job, and says `why` in an
  // Event; a deletion refused is a Warning Event, once. Kueue releases the
  // quota.
  void DeleteWorkload(const nlohmann::json& job, const JobIdentity& id, nlohmann::json workload,
                      const std::string& why, JobState* state);
  // The job is suspended and its pods are gone: its Workload gets
  // spec.active false (Kueue's way to stop a job, which keeps its place in
  // the queue), marked as the operator's doing, and its quota reservation
  // is cleared. Not one made from a newer read of the job. False where
  // something is left to do: look again soon.
  bool DeactivateWorkload(const nlohmann::json& job, const JobIdentity& id);
  // Takes Kueue's resource-in-use finalizer off `workload`, if it has it.
  void LiftInUseFinalizer(const JobIdentity& id, const nlohmann::json& workload);
  // No pods, and phase Suspended with `reason` and `message`: a suspended
  // job, and a queued one that Kueue has not admitted (or evicted).
  Status Hold(const nlohmann::json& job, const api::TrainingJobStatus& status,
              const api::TrainingJob& spec, KubeCluster* cluster,
              const controller::LaunchBuilder& launch, JobState* state, const std::string& reason,
              const std::string& message, ReconcileResult* result);

  // Makes the Secrets and Services exist (and the Services again, where
  // deleted since, every owned_objects_recheck). ResourceExhausted, with "Kind name"
  // in *over_quota, when one is refused for exceeded quota; Ok with what the
  // job waits for in *pending while cert-manager has not issued every
  // certificate (no pod is made before: it would wait on its volume).
  Status EnsureOwnedObjects(const JobIdentity& id, const api::TrainingJob& spec, JobState* state,
                            std::string* over_quota, std::string* pending);
  // The Services, NetworkPolicy and PodGroup of the job, with the paths
  // they are made under.
  std::vector<std::pair<std::string, nlohmann::json>> JobObjects(
      const JobIdentity& id, const api::TrainingJob& spec) const;

  // Mutual TLS (job_reconciler_tls.cc). Sets spec.security.tls where the job
  // leaves it to the operator, and decides who issues a TLS job's
  // certificates: as the job's token Secret recorded them when it was made,
  // else --tls and --tls-issuer.
  Status ResolveTls(const JobIdentity& id, api::TrainingJob* spec, JobState* state);
  // Whether the API server serves cert-manager's Certificates and Issuers.
  Status ServesCertManager(bool* served);
  // A TLS job's certificates: EnsureTlsSecrets or EnsureIssuedCertificates.
  Status EnsureTls(const JobIdentity& id, const api::TrainingJob& spec, JobState* state,
                   std::string* over_quota, std::string* pending);
  // The operator's own: the CA Secret and every replica's TLS Secret, made
  // where missing.
  Status EnsureTlsSecrets(const JobIdentity& id, const api::TrainingJob& spec,
                          std::string* over_quota);
  // cert-manager's: the job's Issuers and Certificates made where missing;
  // each Secret cert-manager has written made the job's (OwnIssuedSecret),
  // and one signed by another CA than the job's deleted, so that it is
  // issued again. The first not written yet is said in *pending (and the
  // rest not looked at: one GET a pass while the job waits).
  Status EnsureIssuedCertificates(const JobIdentity& id, const api::TrainingJob& spec,
                                  JobState* state, std::string* over_quota, std::string* pending);
  // The token Secret this operator just made may have been made first by
  // another (two replicas at a leader change): Unavailable, and the job's
  // TLS decision read again, where it records another.
  Status CheckRecordedTls(const JobIdentity& id, const api::TrainingJob& spec, JobState* state);
  // `secret`, written by cert-manager for the Certificate at
  // `certificate_path`, gets the job as an owner unless it has it (directly
  // or through the Certificate); one of an earlier job of the name's waits.
  Status OwnIssuedSecret(const JobIdentity& id, const std::string& certificate_path,
                         const nlohmann::json& secret);
  // `object` made at `path` unless it is there already (owned by the job,
  // else the predecessor's: Unavailable until it is collected).
  Status EnsureObject(const JobIdentity& id, const std::string& path, const nlohmann::json& object,
                      std::string* over_quota);
  static Status WaitForPredecessor(const std::string& kind, const nlohmann::json& object);
  // Writes `status` onto `job` as read. On a conflict (the job changed since
  // that read) it writes nothing: what was computed from an older read must
  // not land on a newer object; *stale is set, and the job is reconciled
  // again from the newer one.
  Status WriteStatus(const nlohmann::json& job, const api::TrainingJobStatus& status, bool* stale);
  void ReportStatusRefusal(const nlohmann::json& job, const Response& response);
  // WriteStatus, then the bookkeeping of a write that lands or is stale.
  Status Write(const nlohmann::json& job, const api::TrainingJobStatus& status,
               ReconcileResult* result);
  void RecordEvent(const nlohmann::json& job, const std::string& type, const std::string& reason,
                   const std::string& message);
  api::TrainingJobStatus BuildStatus(const nlohmann::json& job, const api::TrainingJobStatus& old,
                                     const api::TrainingJob& spec,
                                     const controller::JobStatus& observed) const;
  // The job cannot create its Services or Secret for exceeded quota: it
  // says so, and is reconciled again in kQuotaRecheck.
  // `object` ("Kind name") is said in an Event once.
  Status WaitForQuota(const nlohmann::json& job, const api::TrainingJobStatus& status,
                      const std::string& object, const std::string& message, JobState* state,
                      ReconcileResult* result);
  static constexpr std::chrono::milliseconds kQuotaRecheck{5000};
  // The job waits, before its pods, with `reason` and `message` in its
  // condition; it is reconciled again in `recheck` (the operator watches
  // neither quotas nor certificates).
  Status WaitBeforePods(const nlohmann::json& job, const api::TrainingJobStatus& status,
                        const std::string& reason, const std::string& message,
                        std::chrono::milliseconds recheck, ReconcileResult* result);
  static constexpr std::chrono::milliseconds kCertificateRecheck{1000};
  // A job waiting this long for its certificates says so in a Warning Event.
  static constexpr std::chrono::milliseconds kCertificateWaitWarning{30000};
  // Fails the job at once, with `reason` and `message` in its condition.
  Status FailJob(const nlohmann::json& job, const std::string& reason, const std::string& message,
                 ReconcileResult* result);

  KubeClient* client_;
  const JobObjectOptions options_;
  MetricsServer* metrics_;
  std::map<std::string, JobState> jobs_;  // by uid
  // Jobs whose terminal status this operator has written, by uid: until the
  // job cache shows it (a write's response can come before its watch event),
  // a reconcile of such a job does nothing. Terminal is terminal.
  std::set<std::string> finished_;
  std::set<std::string> workloads_finished_;  // uids of jobs whose Workload is marked Finished
  std::function<bool()> workloads_watched_;
  ProgressProbe probe_ = ProbeProgress;
  ComputingProbe computing_probe_ = ProbeComputingWorkers;
  std::function<int64_t()> now_ms_;  // ClockWith
  KueueApi kueue_api_{client_};
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_JOB_RECONCILER_H_
