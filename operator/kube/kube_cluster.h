// The Kubernetes backend of the cluster interface, for one TrainingJob:
// replicas are pods. It works from a snapshot of the job's pods (the
// operator's pod cache) plus what it created during this reconcile, so a
// reconcile never waits for the watch to catch up; creating a pod that
// already exists (an earlier operator made it) is not an error, so no
// restart of the operator ever duplicates a pod. Only pods the job owns (by
// uid) are its replicas: a pod of the same name left by a deleted job of the
// same name is waited for, never adopted.
//
// Not thread-safe: made for one reconcile of one job and dropped after it.
#ifndef KUBEPS_OPERATOR_KUBE_KUBE_CLUSTER_H_
#define KUBEPS_OPERATOR_KUBE_KUBE_CLUSTER_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/controller/cluster.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

// A 403 of ResourceQuota admission that more free quota would turn into a
// success ("exceeded quota: NAME, requested: ..."), as opposed to one no
// amount of quota helps ("failed quota: NAME: must specify ...").
bool ExceededQuota(const Response& response);

// The pod's condition DisruptionTarget when it is True (an eviction, the
// taint manager, a preemption, the kubelet ending it), else null.
const nlohmann::json* DisruptionOf(const nlohmann::json& pod);

// Whether a Failed pod was ended by its node, not by itself (DisruptionTarget
// TerminationByKubelet: a graceful node shutdown, a critical pod's
// preemption; or DeletionByPodGC), a node-pressure eviction aside: made
// again without counting as a restart.
bool EndedByItsNode(const nlohmann::json& pod);

// Whether the kubelet refused the pod, before any of it ran, because its
// node is shutting down (reason NodeShutdown; the scheduler may bind a pod
// there before the node's not-ready taint lands): the node's doing, made
// again without counting, as a pod the shutdown ended, but after the
// rejection back-off.
bool RefusedByItsNodeShuttingDown(const nlohmann::json& pod);

// Whether the kubelet evicted the pod for node pressure (its reason
// "Evicted"): it picks the pods using most over their requests, so the pod
// is often the pressure's own cause, and the eviction counts as a failure.
bool IsNodePressureEviction(const nlohmann::json& pod);

class KubeCluster : public controller::Cluster {
 public:
  // `known_restarts`: each replica's restarts as the job's status recorded
  // them, for a replica whose pod was deleted from outside.
  KubeCluster(KubeClient* client, JobIdentity job, const api::TrainingJob& spec, ImageSet images,
              std::vector<nlohmann::json> pods, std::map<std::string, int> known_restarts = {});

  Status Create(const controller::ReplicaLaunch& launch) override;
  // Deletes each replica's pods in the order given; the API server's
  // deletions are asynchronous already, so the pods stop together. Each
  // pod keeps its own terminationGracePeriodSeconds: `grace_ms` is not
  // passed on (the operator never asks for a shorter one).
  Status DeleteAll(const std::vector<controller::ReplicaName>& names, int grace_ms) override;
  std::vector<controller::ReplicaStatus> List() override;
  std::string SchedulerAddress() override { return kube::SchedulerAddress(job_); }

  // Pods created or deleted by this reconcile, for events and metrics.
  const std::vector<std::string>& created() const { return created_; }
  // The pods created by this reconcile, as the API server answered.
  std::vector<nlohmann::json> CreatedPods() const;
  const std::vector<std::string>& deleted() const { return deleted_; }
  // Pods the API server refused for a namespace ResourceQuota this
  // reconcile ("exceeded quota: ..."): not an error of the job, which waits
  // for quota to free (other jobs finish, an administrator raises it).
  struct QuotaRefusal {
    std::string pod;      // the pod's name
    std::string replica;  // e.g. "worker-1"
    std::string message;  // the server's, which names the quota
  };
  const std::vector<QuotaRefusal>& quota_refusals() const { return quota_refusals_; }

  // The FailedMount messages of pods that wait in ContainerCreating, by pod
  // uid (mount_failures.h): List() reports such a pod's replica as unable
  // to start, start_problem "FailedMount".
  void set_mount_failures(std::map<std::string, std::string> by_uid) {
    mount_failures_ = std::move(by_uid);
  }

  // The replica a pod belongs to, from its labels; false for a stranger.
  static bool ReplicaOf(const nlohmann::json& pod, controller::ReplicaName* name);
  // The replica's status from its pod's: phase, exit code, termination
  // message; while Pending, what keeps it from starting (Unschedulable, a
  // container waiting in ErrImagePull...); the pod's name and creation time
  // (epoch ms, the clock the reconciler's now_ms reads).
  static controller::ReplicaStatus StatusOf(const nlohmann::json& pod);

 private:
  // The newest pod of every replica (highest restart count).
  std::map<controller::ReplicaName, nlohmann::json> Newest() const;
  std::string PodsPath() const;

  KubeClient* client_;
  JobIdentity job_;
  const api::TrainingJob& spec_;
  ImageSet images_;
  std::vector<nlohmann::json> pods_;
  std::map<std::string, int> known_restarts_;
  std::vector<std::string> created_, deleted_;
  std::vector<QuotaRefusal> quota_refusals_;
  std::map<std::string, std::string> mount_failures_;
};

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_KUBE_CLUSTER_H_
