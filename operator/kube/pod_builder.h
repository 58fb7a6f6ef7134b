// The Kubernetes objects of one TrainingJob, as JSON: its pods, its
// services, its token Secret and its PodGroup. Pure functions of the job
// (and the replica), so they are unit-tested without an API server.
//
// Naming: the job's headless Service is "<job>"; replica R of role X runs
// in a pod with hostname "<job>-X-R" under that subdomain, so it has a
// stable DNS name whatever its pod name; the pod name adds "-r<N>" after
// N restarts (the operator re-creates failed pods instead of letting the
// kubelet restart them, so the restart policy is decided by the same code
// as in `kubeps run`). The scheduler also gets a ClusterIP Service
// "<job>-scheduler", the address every node is given. Hostnames and
// Service names are DNS labels, at most 63 characters: where the job's name
// (itself at most 63) and the suffix are longer, the name is cut and a hash
// of the whole added (DnsLabel), so every legal job name works and two jobs
// never share a name.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBE_POD_BUILDER_H_
#define KUBEPS_OPERATOR_KUBE_POD_BUILDER_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/training_job.h"
#include "common/status.h"
#include "operator/controller/cluster.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

// The TrainingJob resource (api::kApiVersion's group and version).
inline const Resource kTrainingJobs{"kubeps.io", "v1alpha1", "trainingjobs"};

inline constexpr const char* kJobNameLabel = "kubeps.io/job-name";
inline constexpr const char* kReplicaTypeLabel = "kubeps.io/replica-type";
inline constexpr const char* kReplicaIndexLabel = "kubeps.io/replica-index";
// The replica's restarts (failures re-created), which backoffLimit counts,
// and its pod's place among the replica's pods: a worker scaled away and
// taken in again gets a new pod that is not a restart.
inline constexpr const char* kRestartsAnnotation = "kubeps.io/restarts";
inline constexpr const char* kGenerationAnnotation = "kubeps.io/pod-generation";
// How many of the replica's pods in a row, before this one, a node shutting
// down refused: the back-off before the next doubles with each.
inline constexpr const char* kNodeRefusalsAnnotation = "kubeps.io/node-refusals";
inline constexpr int kGrpcPort = 7000;
inline constexpr int kMetricsPort = 9090;
inline constexpr const char* kTokenMountPath = "/var/run/secrets/kubeps";
// A replica's TLS Secret (tls_secrets.h), where the job has mutual TLS.
inline constexpr const char* kTlsMountPath = "/var/run/secrets/kubeps-tls";
// On the token Secret: whether the job runs with TLS, decided once when the
// Secret is made, so that an operator restarted with another --tls default
// does not mix pods with TLS and without in one job.
inline constexpr const char* kTlsAnnotation = "kubeps.io/tls";
// A worker pod's socket directory (docs/sidecar-protocol.md): an emptyDir
// with medium Memory that the user's container and the agent sidecar mount.
inline constexpr const char* kSocketDir = "/var/run/kubeps";
// An elastic job's scheduler pod: how many workers the job should have (the
// spec's replicas, which kubectl scale sets), an annotation the operator
// keeps up to date and the pod reads through a downwardAPI volume, which
// the kubelet rewrites when the annotation changes.
inline constexpr const char* kDesiredWorkersAnnotation = "kubeps.io/desired-workers";
inline constexpr const char* kElasticMountPath = "/etc/kubeps/elastic";

struct JobIdentity {
  std::string name;
  std::string namespace_;
  std::string uid;  // owner of everything below: deleting the job deletes them
};

struct ImageSet {
  std::string server = "kubeps/server:0.1.0";
  std::string agent = "kubeps/agent:0.1.0";
};

// A NetworkPolicy per job (BuildNetworkPolicy), where the cluster's network
// plugin enforces them: off by default in the binary, on in the Helm chart.
struct NetworkPolicyOptions {
  bool enabled = false;
  // NetworkPolicyPeers (podSelector, namespaceSelector, ipBlock) admitted
  // to the metrics port: Prometheus, and the operator's own progress probe.
  nlohmann::json metrics_from = nlohmann::json::array();
};

// What the operator's flags say about the objects of every job.
// kAuto: cert-manager where the cluster serves its Certificates and Issuers
// when a job is made, the operator's own CA otherwise.
enum class TlsIssuerChoice { kAuto, kOperator, kCertManager };
// "auto", "operator", "cert-manager"; false for anything else.
bool ParseTlsIssuerChoice(const std::string& text, TlsIssuerChoice* choice);
// Who issued a TLS job's certificates, recorded on its token Secret when it
// is made, so that a job keeps its issuer for its life (an operator
// restarted with another --tls-issuer, cert-manager installed later).
inline constexpr const char* kTlsIssuerAnnotation = "kubeps.io/tls-issuer";
inline constexpr const char* kOperatorIssuer = "operator";
inline constexpr const char* kCertManagerIssuer = "cert-manager";

struct JobObjectOptions {
  ImageSet images;
  NetworkPolicyOptions network_policy;
  // Mutual TLS for jobs whose spec.security.tls is unset.
  bool tls_by_default = false;
  // Who issues a TLS job's certificates (--tls-issuer).
  TlsIssuerChoice tls_issuer = TlsIssuerChoice::kAuto;
  // How often a running job's Services, NetworkPolicy and PodGroup are
  // looked at again, made anew where deleted since.
  std::chrono::milliseconds owned_objects_recheck{60000};
};

// `text` as NetworkPolicyOptions::metrics_from: a JSON array of peers, each
// an object of only podSelector, namespaceSelector and ipBlock. An error
// names the entry and the key at fault.
Status ParseNetworkPolicyPeers(const std::string& text, nlohmann::json* peers);

// `base` + `suffix` if that is a DNS label's length (63), else `base` cut,
// "-", 8 hex digits of a hash of `base` + `suffix`, then `suffix`. The hash is
// FNV-1a, stable across builds: an operator restarted with a new build must
// derive the same names.
std::string DnsLabel(const std::string& base, const std::string& suffix);

// "<job>-scheduler": the scheduler's ClusterIP Service.
std::string SchedulerServiceName(const JobIdentity& job);
// "<scheduler service>.<namespace>.svc:7000"
std::string SchedulerAddress(const JobIdentity& job);
std::string ReplicaHostname(const JobIdentity& job, const controller::ReplicaName& name);
// "<hostname>" for a replica's first pod, "<hostname>-rN" for its N-th after.
std::string PodName(const JobIdentity& job, const controller::ReplicaName& name, int generation);

nlohmann::json OwnerReference(const JobIdentity& job);
// The label every object of the job carries (kJobNameLabel: its name).
nlohmann::json JobLabels(const JobIdentity& job);
// name, namespace, the job's label and its controller ownerReference: the
// metadata of every object the job owns but its pods.
nlohmann::json OwnedMetadata(const JobIdentity& job, const std::string& name);
// Whether `object`'s controller ownerReference names the job's uid. Objects
// are matched to a job by uid, never by name or label alone: after a job is
// deleted and applied again, its predecessor's objects (same names, same
// labels) live on until the garbage collector gets to them.
bool OwnedBy(const nlohmann::json& object, const JobIdentity& job);

// A label's, annotation's or variable's value as a positive int32 ("3"),
// none for anything else ("", "0", "1h").
std::optional<int> PositiveNumber(const std::string& text);

// The pod for `launch` (binary and KUBEPS_* environment from the job
// logic), merged into the role's pod template override: the template's
// image, resources, nodeSelector, tolerations, env, volumes and
// priorityClassName are kept; kubeps' own env wins over a same-named one.
//
// A worker of a job that brings its own program keeps the template's main
// container (api::MainContainerIndex) as written, with KUBEPS_SOCKET_DIR
// added, and gets kubeps-agent --serve as a native sidecar (Kubernetes
// 1.29+): an init container with restartPolicy Always and a startupProbe
// on agent.json, both sharing an emptyDir (medium Memory) at kSocketDir.
// The two run as one user (the agent's files are mode 0600): the sidecar
// takes the main container's runAsUser/runAsGroup; when neither it nor the
// pod names a user, the pod's securityContext gets the agent image's
// (10001: runAsUser, runAsGroup, fsGroup).
//
// Every container gets terminationMessagePolicy FallbackToLogsOnError
// unless the template set one: a replica that dies without writing its
// termination message is still explained, by its log's last lines.
// `generation` names the pod (PodName); -1: the same as `restarts`.
nlohmann::json BuildPod(const JobIdentity& job, const api::TrainingJob& spec,
                        const controller::ReplicaLaunch& launch, int restarts,
                        const ImageSet& images, int generation = -1);

nlohmann::json BuildHeadlessService(const JobIdentity& job);
nlohmann::json BuildSchedulerService(const JobIdentity& job);
// Admits to every port of the job's pods only the pods of the same job (same
// namespace, the job's name label) and, to the metrics port, `metrics_from`.
// A Kubernetes NetworkPolicy allows the union of every policy that selects
// a pod, so a user's own policy can open more (a TensorBoard port) but
// nothing can close what this one needs.
nlohmann::json BuildNetworkPolicy(const JobIdentity& job, const nlohmann::json& metrics_from);
// `tls` ("Enabled" or "Disabled") is recorded on it (kTlsAnnotation), and
// for a TLS job who issues its certificates (kTlsIssuerAnnotation).
nlohmann::json BuildTokenSecret(const JobIdentity& job, const std::string& token,
                                const std::string& tls, const std::string& tls_issuer);
std::string TokenSecretName(const JobIdentity& job);
// "<hostname>-tls": replica `name`'s certificate (tls_secrets.h).
std::string ReplicaTlsSecretName(const JobIdentity& job, const controller::ReplicaName& name);
// A PodGroup for gang scheduling when spec.schedulingPolicy.schedulerName
// is set ("volcano": scheduling.volcano.sh; otherwise scheduler-plugins'
// scheduling.x-k8s.io); null otherwise. *api_path gets its collection path.
nlohmann::json BuildPodGroup(const JobIdentity& job, const api::TrainingJob& spec,
                             std::string* api_path);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_POD_BUILDER_H_
