#include "operator/kube/pod_builder.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "api/pod_env_codec.h"
#include "api/user_container.h"
#include "common/host_port.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {
namespace {

using nlohmann::json;

constexpr const char* kTokenVolume = "kubeps-token";
constexpr const char* kElasticVolume = "kubeps-elastic";
constexpr const char* kTlsVolume = "kubeps-tls";
constexpr const char* kSocketVolume = "kubeps-socket";
// The agent image's user (docker/agent.Dockerfile).
constexpr int kAgentUser = 10001;

const char* RoleName(controller::ReplicaRole role) { return controller::ToString(role); }

// Which of two variables of one name a container keeps.
enum class SameName { kOursWin, kTemplateWins };

// A variable's name; "" for an entry without one (which merging drops).
std::string NameOf(const json& variable) {
  return variable.is_object() ? variable.value("name", "") : "";
}

// Merges kubeps' env into a container's env: of two of one name, `rule` says
// which stays.
void MergeEnv(json& container, const json& ours, SameName rule = SameName::kOursWin) {
  json theirs = json::array();
  if (container.contains("env") && container["env"].is_array()) {
    for (const auto& e : container["env"]) {
      if (!NameOf(e).empty()) theirs.push_back(e);
    }
  }
  std::set<std::string> taken;
  for (const auto& e : rule == SameName::kOursWin ? ours : theirs) taken.insert(NameOf(e));
  json merged = json::array();
  for (const auto& e : theirs) {
    if (rule == SameName::kTemplateWins || !taken.count(NameOf(e))) merged.push_back(e);
  }
  for (const auto& e : ours) {
    if (rule == SameName::kOursWin || !taken.count(NameOf(e))) merged.push_back(e);
  }
  container["env"] = merged;
}

// kubeps' own process in `container`: the binary with its arguments, the
// node's environment (kubeps' own variables win over the template's), its
// ports, the job's token and, with TLS, the replica's certificate.
void SetKubepsProcess(json& container, const controller::ReplicaLaunch& launch, bool tls) {
  json command = json::array({launch.binary});
  for (const std::string& arg : launch.args) command.push_back(arg);
  container["command"] = command;
  json env = json::array();
  for (const auto& [key, value] : launch.env) env.push_back({{"name", key}, {"value", value}});
  env.push_back(
      {{"name", api::env::kPodIp}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}});
  env.push_back({{"name", api::env::kNodeName},
                 {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}});
  env.push_back({{"name", api::env::kPort}, {"value", std::to_string(kGrpcPort)}});
  env.push_back({{"name", api::env::kMetricsPort}, {"value", std::to_string(kMetricsPort)}});
  env.push_back(
      {{"name", api::env::kTokenFile}, {"value", std::string(kTokenMountPath) + "/token"}});
  if (tls) env.push_back({{"name", api::env::kTlsDir}, {"value", kTlsMountPath}});
  MergeEnv(container, env);
  container["ports"] = json::array({{{"name", "grpc"}, {"containerPort", kGrpcPort}},
                                    {{"name", "metrics"}, {"containerPort", kMetricsPort}}});
  json mounts = container.value("volumeMounts", json::array());
  mounts.push_back({{"name", kTokenVolume}, {"mountPath", kTokenMountPath}, {"readOnly", true}});
  if (tls)
    mounts.push_back({{"name", kTlsVolume}, {"mountPath", kTlsMountPath}, {"readOnly", true}});
  container["volumeMounts"] = mounts;
}

// A worker that trains a built-in model computes on as many threads as
// its container requested cores, as a pod's neighbours on the node expect
// of it, and a server splits a big part's update over as many. The request
// is what admission left: the template's, the limit where it set only a
// limit, or a LimitRange's default, which the template does not show; so
// the kubelet passes it on (the downward API rounds it up, and gives 0
// where there is none), and the replica decides (api/compute_threads.h).
void ComputeOnTheRequestedCores(json& container) {
  const json request = {
      {"name", api::env::kCpuRequest},
      {"valueFrom", {{"resourceFieldRef", {{"resource", "requests.cpu"}, {"divisor", "1"}}}}}};
  MergeEnv(container, json::array({request}), SameName::kTemplateWins);
}

// An elastic job's scheduler follows the desired number of workers in a
// file of the downwardAPI volume that shows its pod's annotation.
void FollowDesiredWorkers(const api::TrainingJob& spec, json& meta, json& container,
                          json& volumes) {
  meta["annotations"][kDesiredWorkersAnnotation] = std::to_string(spec.spec.worker.replicas);
  MergeEnv(container, json::array({{{"name", api::env::kDesiredWorkersFile},
                                    {"value", std::string(kElasticMountPath) + "/workers"}}}));
  json mounts = container.value("volumeMounts", json::array());
  mounts.push_back(
      {{"name", kElasticVolume}, {"mountPath", kElasticMountPath}, {"readOnly", true}});
  container["volumeMounts"] = mounts;
  const std::string field =
      std::string("metadata.annotations['") + kDesiredWorkersAnnotation + "']";
  volumes.push_back(
      {{"name", kElasticVolume},
       {"downwardAPI",
        {{"items", json::array({{{"path", "workers"}, {"fieldRef", {{"fieldPath", field}}}}})}}}});
}

// What the restricted Pod Security profile asks of a container, where the
// template has not said otherwise: kubeps' own processes need no privilege,
// no capability and no root (its images run as kAgentUser).
void RestrictedByDefault(json& container) {
  json& context = container["securityContext"];
  if (context.is_null()) context = json::object();
  if (!context.contains("allowPrivilegeEscalation")) context["allowPrivilegeEscalation"] = false;
  if (!context.contains("capabilities")) context["capabilities"] = {{"drop", json::array({"ALL"})}};
  // Not where the user's program runs as root and the agent with it (SameUser).
  if (!context.contains("runAsNonRoot") && context.value("runAsUser", 1) != 0)
    context["runAsNonRoot"] = true;
}

// The pod's socket directory in `container`: the shared volume, and
// KUBEPS_SOCKET_DIR naming it.
void AddSocketDir(json& container) {
  MergeEnv(container, json::array({{{"name", api::env::kSocketDir}, {"value", kSocketDir}}}));
  json mounts = container.value("volumeMounts", json::array());
  mounts.push_back({{"name", kSocketVolume}, {"mountPath", kSocketDir}});
  container["volumeMounts"] = mounts;
}

// The agent's socket and shared-memory files are mode 0600, so the agent
// runs as the user's program does: as the user the main container names,
// else the pod's; when neither names one, the pod runs as the agent
// image's user (kAgentUser), whose files the program can then open.
void SameUser(const json& main, json* sidecar, json* pod_spec) {
  const json user_context = main.value("securityContext", json::object());
  if (user_context.contains("runAsUser")) {
    for (const char* field : {"runAsUser", "runAsGroup", "runAsNonRoot"}) {
      if (user_context.contains(field)) (*sidecar)["securityContext"][field] = user_context[field];
    }
    return;
  }
  json& pod_context = (*pod_spec)["securityContext"];
  if (pod_context.is_null()) pod_context = json::object();
  if (pod_context.contains("runAsUser")) return;
  pod_context["runAsUser"] = kAgentUser;
  if (!pod_context.contains("runAsGroup")) pod_context["runAsGroup"] = kAgentUser;
  if (!pod_context.contains("fsGroup")) pod_context["fsGroup"] = kAgentUser;
}

// Every container of the pod, kubeps' own and the user's, tells why it
// failed even when it wrote no termination message (a crash, a Python
// traceback): the kubelet then takes the tail of its log. A template that
// chose a policy keeps it.
void FallBackToLogsOnError(json* pod_spec) {
  for (const char* list : {"initContainers", "containers"}) {
    if (!pod_spec->contains(list)) continue;
    for (json& container : (*pod_spec)[list]) {
      if (!container.contains("terminationMessagePolicy"))
        container["terminationMessagePolicy"] = "FallbackToLogsOnError";
    }
  }
}

}  // namespace

std::string DnsLabel(const std::string& base, const std::string& suffix) {
  constexpr size_t kMaxLabel = 63, kHashDigits = 8;
  std::string whole = base + suffix;
  if (whole.size() <= kMaxLabel) return whole;
  uint32_t hash = 2166136261u;  // FNV-1a, 32 bits
  for (unsigned char c : whole) hash = (hash ^ c) * 16777619u;
  char hex[kHashDigits + 1];
  std::snprintf(hex, sizeof hex, "%08x", hash);
  std::string cut = base.substr(0, kMaxLabel - suffix.size() - kHashDigits - 1);
  while (!cut.empty() && cut.back() == '-') cut.pop_back();  // no "--" before the hash
  return cut + "-" + hex + suffix;
}

std::string SchedulerServiceName(const JobIdentity& job) {
  return DnsLabel(job.name, "-scheduler");
}

std::string SchedulerAddress(const JobIdentity& job) {
  return JoinHostPort(SchedulerServiceName(job) + "." + job.namespace_ + ".svc", kGrpcPort);
}

std::string ReplicaHostname(const JobIdentity& job, const controller::ReplicaName& name) {
  return DnsLabel(job.name, "-" + name.ToString());
}

std::string PodName(const JobIdentity& job, const controller::ReplicaName& name, int generation) {
  std::string pod = ReplicaHostname(job, name);
  return generation > 0 ? pod + "-r" + std::to_string(generation) : pod;
}

std::optional<int> PositiveNumber(const std::string& text) {
  char* end = nullptr;
  const long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n <= 0 || n > INT32_MAX) return std::nullopt;
  return static_cast<int>(n);
}

bool OwnedBy(const json& object, const JobIdentity& job) {
  for (const auto& ref : object["metadata"].value("ownerReferences", json::array())) {
    if (ref.value("controller", false)) return ref.value("uid", "") == job.uid;
  }
  return false;
}

json OwnerReference(const JobIdentity& job) {
  return {{"apiVersion", api::kApiVersion},
          {"kind", api::kKind},
          {"name", job.name},
          {"uid", job.uid},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

json JobLabels(const JobIdentity& job) { return {{kJobNameLabel, job.name}}; }

json OwnedMetadata(const JobIdentity& job, const std::string& name) {
  return {{"name", name},
          {"namespace", job.namespace_},
          {"labels", JobLabels(job)},
          {"ownerReferences", json::array({OwnerReference(job)})}};
}

json BuildPod(const JobIdentity& job, const api::TrainingJob& spec,
              const controller::ReplicaLaunch& launch, int restarts, const ImageSet& images,
              int generation) {
  if (generation < 0) generation = restarts;
  const controller::ReplicaName& name = launch.name;
  const std::string role = RoleName(name.role);
  const bool tls = spec.spec.TlsEnabled(/*by_default=*/false);  // the reconciler resolved it
  const api::ReplicaSpec& replica = name.role == controller::ReplicaRole::kWorker ? spec.spec.worker
                                    : name.role == controller::ReplicaRole::kServer
                                        ? spec.spec.ps
                                        : spec.spec.scheduler;
  json pod_template =
      replica.template_override.is_null() ? json::object() : replica.template_override;
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}};
  pod["metadata"] = pod_template.value("metadata", json::object());
  json& meta = pod["metadata"];
  meta["name"] = PodName(job, name, generation);
  meta["namespace"] = job.namespace_;
  meta["labels"] = meta.value("labels", json::object());
  meta["labels"][kJobNameLabel] = job.name;
  meta["labels"][kReplicaTypeLabel] = role;
  meta["labels"][kReplicaIndexLabel] = std::to_string(name.index);
  meta["annotations"] = meta.value("annotations", json::object());
  meta["annotations"][kRestartsAnnotation] = std::to_string(restarts);
  meta["annotations"][kGenerationAnnotation] = std::to_string(generation);
  meta["ownerReferences"] = json::array({OwnerReference(job)});

  json spec_json = pod_template.value("spec", json::object());
  json containers = spec_json.value("containers", json::array());
  // kubeps runs in the container named after the role, or the only one
  // (for workers, the rule that also finds a job's own program).
  int target = api::MainContainerIndex(pod_template, role);
  if (target < 0) {
    containers.push_back(json::object());
    target = static_cast<int>(containers.size()) - 1;
  }
  json& main = containers[target];
  if (name.role == controller::ReplicaRole::kWorker && spec.spec.brings_own_program()) {
    // The job's own program stays the main container as written (Kubernetes
    // expands its $(VAR) references); kubeps' agent serves it from a native
    // sidecar (an init container with restartPolicy Always).
    AddSocketDir(main);
    // The template's own entry for the agent (its image, its resources) is
    // what the sidecar is built on.
    json inits = spec_json.value("initContainers", json::array());
    json sidecar = json::object();
    for (auto it = inits.begin(); it != inits.end(); ++it) {
      if (it->value("name", "") == api::kAgentContainerName) {
        sidecar = *it;
        inits.erase(it);
        break;
      }
    }
    sidecar["name"] = api::kAgentContainerName;
    if (!sidecar.contains("image")) sidecar["image"] = images.agent;
    sidecar["restartPolicy"] = "Always";
    // Requested by default, as service meshes do for theirs: a namespace
    // whose ResourceQuota counts requests refuses a container without them.
    if (!sidecar.contains("resources")) {
      sidecar["resources"] = {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}};
    }
    SetKubepsProcess(sidecar, launch, tls);
    AddSocketDir(sidecar);
    // Kubernetes starts the main containers once this probe passed: the
    // agent writes agent.json when it is registered and serving.
    sidecar["startupProbe"] = {
        {"exec",
         {{"command", json::array({"test", "-f", std::string(kSocketDir) + "/agent.json"})}}},
        {"periodSeconds", 1},
        {"failureThreshold", 600}};
    SameUser(main, &sidecar, &spec_json);
    RestrictedByDefault(sidecar);
    inits.push_back(sidecar);
    spec_json["initContainers"] = inits;
    json volumes = spec_json.value("volumes", json::array());
    volumes.push_back({{"name", kSocketVolume}, {"emptyDir", {{"medium", "Memory"}}}});
    spec_json["volumes"] = volumes;
  } else {
    main["name"] = main.value("name", role);
    if (!main.contains("image")) {
      main["image"] = name.role == controller::ReplicaRole::kWorker ? images.agent : images.server;
    }
    SetKubepsProcess(main, launch, tls);
    if (name.role != controller::ReplicaRole::kScheduler) ComputeOnTheRequestedCores(main);
    RestrictedByDefault(main);
  }
  if (name.role == controller::ReplicaRole::kWorker && spec.spec.gpus_per_worker > 0) {
    json& limits = main["resources"]["limits"];
    if (!limits.contains("nvidia.com/gpu")) limits["nvidia.com/gpu"] = spec.spec.gpus_per_worker;
  }
  json volumes = spec_json.value("volumes", json::array());
  if (name.role == controller::ReplicaRole::kScheduler && spec.spec.elastic.enabled())
    FollowDesiredWorkers(spec, meta, main, volumes);
  spec_json["containers"] = containers;

  // 0400: the processes refuse a token file others can read. The kubelet
  // gives the file the pod's fsGroup and adds group read (0440), and puts
  // every container's processes in that group, so whatever user a
  // container runs as can read it.
  volumes.push_back({{"name", kTokenVolume},
                     {"secret", {{"secretName", TokenSecretName(job)}, {"defaultMode", 0400}}}});
  // Only this replica's key: a pod of the job holds no other replica's.
  if (tls) {
    const json secret = {{"secretName", ReplicaTlsSecretName(job, name)}, {"defaultMode", 0400}};
    volumes.push_back({{"name", kTlsVolume}, {"secret", secret}});
  }
  spec_json["volumes"] = volumes;
  // The operator decides about restarts (restart policy, backoffLimit).
  spec_json["restartPolicy"] = "Never";
  json& pod_context = spec_json["securityContext"];
  if (pod_context.is_null()) pod_context = json::object();
  if (!pod_context.contains("seccompProfile"))
    pod_context["seccompProfile"] = {{"type", "RuntimeDefault"}};
  if (!pod_context.contains("fsGroup")) pod_context["fsGroup"] = kAgentUser;
  spec_json["hostname"] = ReplicaHostname(job, name);
  spec_json["subdomain"] = job.name;
  const api::SchedulingPolicy& scheduling = spec.spec.scheduling_policy;
  if (!scheduling.scheduler_name.empty()) {
    spec_json["schedulerName"] = scheduling.scheduler_name;
    // Each PodGroup API finds its pods by its own key.
    const std::string pod_group_api = api::PodGroupApi(scheduling);
    if (pod_group_api == "Volcano") {
      meta["annotations"]["scheduling.k8s.io/group-name"] = job.name;
    } else if (pod_group_api == "SchedulerPlugins") {
      meta["labels"]["scheduling.x-k8s.io/pod-group"] = job.name;
    }
    if (!scheduling.priority_class.empty() && !spec_json.contains("priorityClassName")) {
      spec_json["priorityClassName"] = scheduling.priority_class;
    }
  }
  FallBackToLogsOnError(&spec_json);
  pod["spec"] = spec_json;
  return pod;
}

json BuildHeadlessService(const JobIdentity& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", OwnedMetadata(job, job.name)},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", JobLabels(job)},
            {"ports",
             json::array({{{"name", "grpc"}, {"port", kGrpcPort}, {"targetPort", kGrpcPort}}})}}}};
}

Status ParseNetworkPolicyPeers(const std::string& text, json* peers) {
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array())
    return Status::InvalidArgument(
        "metrics peers must be a JSON array of NetworkPolicyPeers, "
        "such as [{\"namespaceSelector\": {\"matchLabels\": "
        "{\"kubernetes.io/metadata.name\": \"monitoring\"}}}], not " +
        text);
  for (size_t i = 0; i < parsed.size(); ++i) {
    const json& peer = parsed[i];
    const std::string where = "metrics peer " + std::to_string(i);
    if (!peer.is_object() || peer.empty())
      return Status::InvalidArgument(where +
                                     " must be an object with podSelector, "
                                     "namespaceSelector or ipBlock");
    for (const auto& [key, value] : peer.items()) {
      if (key != "podSelector" && key != "namespaceSelector" && key != "ipBlock")
        return Status::InvalidArgument(where + ": unknown key \"" + key +
                                       "\" (a peer has podSelector, namespaceSelector, ipBlock)");
      if (!value.is_object())
        return Status::InvalidArgument(where + ": " + key + " must be an object");
    }
  }
  *peers = std::move(parsed);
  return Status::Ok();
}

json BuildNetworkPolicy(const JobIdentity& job, const json& metrics_from) {
  const json own_pods = {{"podSelector", {{"matchLabels", JobLabels(job)}}}};
  json ingress = json::array({{{"from", json::array({own_pods})}}});
  // An empty `from` would admit every source: no peers, no rule.
  if (!metrics_from.empty()) {
    ingress.push_back({{"from", metrics_from},
                       {"ports", json::array({{{"protocol", "TCP"}, {"port", kMetricsPort}}})}});
  }
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", OwnedMetadata(job, job.name)},
          {"spec",
           {{"podSelector", {{"matchLabels", JobLabels(job)}}},
            {"policyTypes", json::array({"Ingress"})},
            {"ingress", ingress}}}};
}

json BuildSchedulerService(const JobIdentity& job) {
  json selector = JobLabels(job);
  selector[kReplicaTypeLabel] = "scheduler";
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", OwnedMetadata(job, SchedulerServiceName(job))},
          {"spec",
           {{"selector", selector},
            {"ports",
             json::array({{{"name", "grpc"}, {"port", kGrpcPort}, {"targetPort", kGrpcPort}}})}}}};
}

std::string TokenSecretName(const JobIdentity& job) { return job.name + "-token"; }

std::string ReplicaTlsSecretName(const JobIdentity& job, const controller::ReplicaName& name) {
  return ReplicaHostname(job, name) + "-tls";
}

bool ParseTlsIssuerChoice(const std::string& text, TlsIssuerChoice* choice) {
  static const std::map<std::string, TlsIssuerChoice> kChoices = {
      {"auto", TlsIssuerChoice::kAuto},
      {kOperatorIssuer, TlsIssuerChoice::kOperator},
      {kCertManagerIssuer, TlsIssuerChoice::kCertManager}};
  auto found = kChoices.find(text);
  if (found == kChoices.end()) return false;
  *choice = found->second;
  return true;
}

json BuildTokenSecret(const JobIdentity& job, const std::string& token, const std::string& tls,
                      const std::string& tls_issuer) {
  json metadata = OwnedMetadata(job, TokenSecretName(job));
  metadata["annotations"] = {{kTlsAnnotation, tls}};
  if (tls == "Enabled") metadata["annotations"][kTlsIssuerAnnotation] = tls_issuer;
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"type", "Opaque"},
          {"metadata", metadata},
          // The API server encodes stringData into data, as it does for kubectl.
          {"stringData", {{"token", token}}}};
}

json BuildPodGroup(const JobIdentity& job, const api::TrainingJob& spec, std::string* api_path) {
  const api::SchedulingPolicy& policy = spec.spec.scheduling_policy;
  const std::string api = api::PodGroupApi(policy);
  if (policy.scheduler_name.empty() || api == "None" || api.empty()) return nullptr;
  const int total = 1 + spec.spec.ps.replicas + spec.spec.worker.replicas;
  const int min_member = policy.min_available > 0 ? policy.min_available : total;
  const bool volcano = api == "Volcano";
  const Resource podgroups = volcano ? Resource{"scheduling.volcano.sh", "v1beta1", "podgroups"}
                                     : Resource{"scheduling.x-k8s.io", "v1alpha1", "podgroups"};
  const std::string group_version = podgroups.group + "/" + podgroups.version;
  *api_path = CollectionPath(podgroups, job.namespace_);
  json spec_json = {{"minMember", min_member}};
  // Only Volcano's PodGroup has these; scheduler-plugins' schema would
  // refuse them (or drop them, where pruning is on).
  if (volcano && !policy.queue.empty()) spec_json["queue"] = policy.queue;
  if (volcano && !policy.priority_class.empty())
    spec_json["priorityClassName"] = policy.priority_class;
  return {{"apiVersion", group_version},
          {"kind", "PodGroup"},
          {"metadata", OwnedMetadata(job, job.name)},
          {"spec", spec_json}};
}

}  // namespace kubeps::kube
