// The Kubernetes objects the operator makes for a TrainingJob, and its work
// queue: pure code, tested without an API server.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <set>
#include <thread>

#include "api/training_job.h"
#include "common/time_format.h"
#include "operator/controller/replica_env.h"
#include "operator/kube/kube_cluster.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/work_queue.h"

namespace kubeps::kube {
namespace {

using controller::ReplicaName;
using controller::ReplicaRole;
using nlohmann::json;

api::TrainingJob Job(const std::string& extra = "") {
  auto parsed = api::ParseTrainingJob(R"(
apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mnist, namespace: team-a}
spec:
  dataset: {path: /data}
  gpusPerWorker: 2
  replicaSpecs:
    ps: {replicas: 2}
    worker:
      replicas: 3
      template:
        metadata: {labels: {team: vision}}
        spec:
          priorityClassName: high
          nodeSelector: {gpu: "a100"}
          containers:
            - name: worker
              image: registry.example/agent:1
              env: [{name: EXTRA, value: "1"}, {name: KUBEPS_ROLE, value: overridden}]
)" + extra);
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return *parsed.job;
}

const JobIdentity kId{"mnist", "team-a", "uid-1"};

json EnvValue(const json& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"] : e["valueFrom"];
  }
  return nullptr;
}

controller::ReplicaLaunch Launch(const api::TrainingJob& job, ReplicaName name) {
  return {name,
          controller::ReplicaBinary(name),
          {},
          controller::ReplicaEnv(job, name, SchedulerAddress(kId))};
}

TEST(PodBuilderTest, WorkerPodMergesTheTemplateAndOwnsNothingElse) {
  api::TrainingJob job = Job();
  json pod = BuildPod(kId, job, Launch(job, {ReplicaRole::kWorker, 1}), 0, ImageSet{});
  EXPECT_EQ(pod["metadata"]["name"], "mnist-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team-a");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(pod["metadata"]["labels"][kJobNameLabel], "mnist");
  EXPECT_EQ(pod["metadata"]["labels"][kReplicaTypeLabel], "worker");
  EXPECT_EQ(pod["metadata"]["labels"][kReplicaIndexLabel], "1");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  const json& spec = pod["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["hostname"], "mnist-worker-1");
  EXPECT_EQ(spec["subdomain"], "mnist");
  EXPECT_EQ(spec["priorityClassName"], "high");
  EXPECT_EQ(spec["nodeSelector"]["gpu"], "a100");
  ASSERT_EQ(spec["containers"].size(), 1u);
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["image"], "registry.example/agent:1");  // the template's image wins
  EXPECT_EQ(c["command"][0], "kubeps-agent");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 2);
  EXPECT_EQ(EnvValue(c, "EXTRA"), "1");
  EXPECT_EQ(EnvValue(c, "KUBEPS_ROLE"), "worker");  // kubeps' own env wins
  EXPECT_EQ(EnvValue(c, "KUBEPS_NODE_ID"), "worker-1");
  EXPECT_EQ(EnvValue(c, "KUBEPS_SCHEDULER_ADDR"), "mnist-scheduler.team-a.svc:7000");
  EXPECT_EQ(EnvValue(c, "KUBEPS_POD_IP")["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(EnvValue(c, "KUBEPS_NODE_NAME")["fieldRef"]["fieldPath"], "spec.nodeName");
  EXPECT_EQ(EnvValue(c, "KUBEPS_TOKEN_FILE"), "/var/run/secrets/kubeps/token");
  EXPECT_EQ(spec["volumes"].back()["secret"]["secretName"], "mnist-token");
}

// A worker training a built-in model learns the cores its container
// requested from the downward API, rounded up, also where its template asks
// for none: a LimitRange's default request, which admission adds later,
// counts too (the agent computes on one thread where there is none). The
// template's KUBEPS_BLAS_THREADS stays; servers compute nothing worth
// threads.
TEST(PodBuilderTest, WorkersAndServersAreToldTheCoresTheirContainerRequested) {
  api::TrainingJob job = Job();
  auto worker_env = [&](const char* name) {
    json pod = BuildPod(kId, job, Launch(job, {ReplicaRole::kWorker, 0}), 0, ImageSet{});
    return EnvValue(pod["spec"]["containers"][0], name);
  };
  auto expect_the_request = [&](const std::string& why) {
    const json request = worker_env("KUBEPS_CPU_REQUEST");
    EXPECT_EQ(request["resourceFieldRef"]["resource"], "requests.cpu") << why;
    EXPECT_EQ(request["resourceFieldRef"]["divisor"], "1") << why;
  };
  expect_the_request("no CPU asked for");
  EXPECT_EQ(worker_env("KUBEPS_BLAS_THREADS"), nullptr);
  // A server splits a big part's update over as many threads; the
  // scheduler computes nothing.
  json server = BuildPod(kId, job, Launch(job, {ReplicaRole::kServer, 0}), 0, ImageSet{});
  EXPECT_EQ(EnvValue(server["spec"]["containers"][0],
                     "KUBEPS_CPU_REQUEST")["resourceFieldRef"]["resource"],
            "requests.cpu");
  json scheduler = BuildPod(kId, job, Launch(job, {ReplicaRole::kScheduler, 0}), 0, ImageSet{});
  EXPECT_EQ(EnvValue(scheduler["spec"]["containers"][0], "KUBEPS_CPU_REQUEST"), nullptr);

  json& container = job.spec.worker.template_override["spec"]["containers"][0];
  for (const char* kind : {"requests", "limits"}) {
    container["resources"] = {{kind, {{"cpu", "1500m"}}}};
    expect_the_request(kind);
  }
  container["env"].push_back({{"name", "KUBEPS_BLAS_THREADS"}, {"value", "3"}});
  EXPECT_EQ(worker_env("KUBEPS_BLAS_THREADS"), "3");
}

TEST(PodBuilderTest, RestartedPodGetsANewNameButTheSameHostname) {
  api::TrainingJob job = Job();
  json pod = BuildPod(kId, job, Launch(job, {ReplicaRole::kServer, 0}), 2, ImageSet{});
  EXPECT_EQ(pod["metadata"]["name"], "mnist-server-0-r2");
  EXPECT_EQ(pod["metadata"]["annotations"][kRestartsAnnotation], "2");
  EXPECT_EQ(pod["spec"]["hostname"], "mnist-server-0");
  EXPECT_EQ(pod["spec"]["containers"][0]["image"], ImageSet{}.server);
  EXPECT_EQ(pod["spec"]["containers"][0]["command"][0], "kubeps-server");
}

TEST(PodBuilderTest, TheNetworkPolicyAdmitsTheJobsOwnPodsAndTheMetricsPeersToMetricsOnly) {
  const json prometheus = json::parse(
      R"([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])");
  json policy = BuildNetworkPolicy(kId, prometheus);
  EXPECT_EQ(policy["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(policy["metadata"]["name"], "mnist");
  EXPECT_EQ(policy["metadata"]["ownerReferences"][0]["uid"], kId.uid);
  const json own_pods = {{"matchLabels", {{kJobNameLabel, "mnist"}}}};
  EXPECT_EQ(policy["spec"]["podSelector"], own_pods);
  EXPECT_EQ(policy["spec"]["policyTypes"], json::array({"Ingress"}));
  const json& ingress = policy["spec"]["ingress"];
  ASSERT_EQ(ingress.size(), 2u);
  // The job's pods: every port, and only from this namespace (a podSelector
  // without a namespaceSelector), so a same-named job elsewhere is not let in.
  EXPECT_EQ(ingress[0], json({{"from", json::array({{{"podSelector", own_pods}}})}}));
  EXPECT_EQ(ingress[1]["from"], prometheus);
  EXPECT_EQ(ingress[1]["ports"], json::parse(R"([{"protocol": "TCP", "port": 9090}])"));
  // No peers: no metrics rule at all (an empty `from` would admit everyone).
  EXPECT_EQ(BuildNetworkPolicy(kId, json::array())["spec"]["ingress"].size(), 1u);
}

TEST(PodBuilderTest, MetricsPeersThatAreNotPeersAreErrorsNamingTheEntry) {
  json peers;
  ASSERT_TRUE(ParseNetworkPolicyPeers(
                  R"([{"podSelector": {}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}])", &peers)
                  .ok());
  EXPECT_EQ(peers.size(), 2u);
  const std::pair<const char*, const char*> errors[] = {
      {"{}", "must be a JSON array of NetworkPolicyPeers"},
      {"[{", "must be a JSON array of NetworkPolicyPeers"},
      {"[{}]", "metrics peer 0 must be an object with podSelector, namespaceSelector or ipBlock"},
      {R"([{"podSelector": {}}, {"podSelectr": {}}])",
       "metrics peer 1: unknown key \"podSelectr\""},
      {R"([{"namespaceSelector": "monitoring"}])",
       "metrics peer 0: namespaceSelector must be an object"},
  };
  for (const auto& [text, message] : errors) {
    Status s = ParseNetworkPolicyPeers(text, &peers);
    EXPECT_FALSE(s.ok()) << text;
    EXPECT_NE(s.message().find(message), std::string::npos) << text << ": " << s.message();
  }
  EXPECT_EQ(peers.size(), 2u);  // untouched by the errors
}

TEST(PodBuilderTest, ServicesSecretAndPodGroup) {
  EXPECT_EQ(BuildHeadlessService(kId)["spec"]["clusterIP"], "None");
  json scheduler = BuildSchedulerService(kId);
  EXPECT_EQ(scheduler["metadata"]["name"], "mnist-scheduler");
  EXPECT_EQ(scheduler["spec"]["selector"][kReplicaTypeLabel], "scheduler");
  json secret = BuildTokenSecret(kId, "abc", "Disabled", "");
  EXPECT_EQ(secret["stringData"]["token"], "abc");
  EXPECT_FALSE(secret.contains("data"));
  std::string path;
  EXPECT_TRUE(BuildPodGroup(kId, Job(), &path).is_null());
  api::TrainingJob gang = Job("  schedulingPolicy: {schedulerName: volcano, queue: research}\n");
  json group = BuildPodGroup(kId, gang, &path);
  EXPECT_EQ(path, "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups");
  EXPECT_EQ(group["spec"]["minMember"], 6);  // scheduler + 2 ps + 3 workers
  EXPECT_EQ(group["spec"]["queue"], "research");
  json pod = BuildPod(kId, gang, Launch(gang, {ReplicaRole::kWorker, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  // scheduler-plugins' PodGroup has neither field: its schema would refuse them.
  api::TrainingJob plugins =
      Job("  schedulingPolicy: {schedulerName: scheduler-plugins-scheduler, queue: research, "
          "priorityClass: high}\n");
  group = BuildPodGroup(kId, plugins, &path);
  EXPECT_EQ(path, "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups");
  EXPECT_EQ(group["spec"], json({{"minMember", 6}}));
}

// A scheduler of another name says which PodGroup API it reads; its pods
// carry only that API's key, and podGroup None makes no PodGroup at all.
TEST(PodBuilderTest, TheJobSaysWhichPodGroupApiItsSchedulerReads) {
  std::string path;
  api::TrainingJob volcano_named =
      Job("  schedulingPolicy: {schedulerName: gang-a, podGroup: Volcano}\n");
  EXPECT_FALSE(BuildPodGroup(kId, volcano_named, &path).is_null());
  EXPECT_EQ(path, "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups");
  json pod =
      BuildPod(kId, volcano_named, Launch(volcano_named, {ReplicaRole::kWorker, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["spec"]["schedulerName"], "gang-a");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "mnist");
  EXPECT_FALSE(pod["metadata"]["labels"].contains("scheduling.x-k8s.io/pod-group"));

  api::TrainingJob plugins_named =
      Job("  schedulingPolicy: {schedulerName: gang-b, podGroup: SchedulerPlugins}\n");
  EXPECT_FALSE(BuildPodGroup(kId, plugins_named, &path).is_null());
  EXPECT_EQ(path, "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/podgroups");
  pod =
      BuildPod(kId, plugins_named, Launch(plugins_named, {ReplicaRole::kWorker, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "mnist");
  EXPECT_FALSE(pod["metadata"]["annotations"].contains("scheduling.k8s.io/group-name"));

  api::TrainingJob none = Job("  schedulingPolicy: {schedulerName: gang-c, podGroup: None}\n");
  EXPECT_TRUE(BuildPodGroup(kId, none, &path).is_null());
  pod = BuildPod(kId, none, Launch(none, {ReplicaRole::kWorker, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["spec"]["schedulerName"], "gang-c");
}

// Hostnames and Service names are DNS labels (at most 63 characters, letters
// digits and '-', alphanumeric at both ends); a job's name may be 63 itself.
bool IsDnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63 || !std::isalnum(s.front()) || !std::isalnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(c) || c == '-'; });
}

TEST(PodBuilderTest, EveryNameIsADnsLabelWhateverTheJobsNameLength) {
  std::set<std::string> seen;
  for (size_t length : {1, 40, 51, 52, 53, 60, 62, 63}) {
    std::string name = "j" + std::string(length - 1, 'x');
    if (length > 10) name[length / 2] = '-';  // a '-' where the cut may fall
    const JobIdentity id{name, "ns", "uid"};
    const std::vector<std::string> names = {ReplicaHostname(id, {ReplicaRole::kWorker, 12}),
                                            ReplicaHostname(id, {ReplicaRole::kServer, 0}),
                                            ReplicaHostname(id, {ReplicaRole::kScheduler, 0}),
                                            SchedulerServiceName(id)};
    for (const std::string& n : names) {
      EXPECT_TRUE(IsDnsLabel(n)) << n << " (job name of " << length << ")";
      EXPECT_TRUE(seen.insert(n).second) << n << " is not unique";
    }
    EXPECT_EQ(BuildSchedulerService(id)["metadata"]["name"], SchedulerServiceName(id));
    EXPECT_EQ(SchedulerAddress(id), SchedulerServiceName(id) + ".ns.svc:7000");
  }
  // Short names stay readable; names of two long jobs differing only at the
  // end stay apart.
  EXPECT_EQ(ReplicaHostname(kId, {ReplicaRole::kWorker, 1}), "mnist-worker-1");
  const std::string stem(60, 'a');
  EXPECT_NE(DnsLabel(stem + "bc", "-worker-0"), DnsLabel(stem + "bd", "-worker-0"));
  EXPECT_EQ(DnsLabel(stem + "bc", "-worker-0"), DnsLabel(stem + "bc", "-worker-0"));
}

// The restricted Pod Security profile: what a namespace enforcing it asks of
// every container and of the pod.
void ExpectRestricted(const json& pod, const json& container) {
  SCOPED_TRACE(container.value("name", "?"));
  const json& context = container["securityContext"];
  EXPECT_EQ(context["allowPrivilegeEscalation"], false);
  EXPECT_EQ(context["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_EQ(context["runAsNonRoot"], true);
  EXPECT_EQ(pod["spec"]["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
}

TEST(PodBuilderTest, KubepsContainersPassTheRestrictedProfileByDefault) {
  const api::TrainingJob job = Job();
  for (ReplicaName name :
       {ReplicaName{ReplicaRole::kScheduler, 0}, ReplicaName{ReplicaRole::kServer, 1},
        ReplicaName{ReplicaRole::kWorker, 0}}) {
    const json pod = BuildPod(kId, job, Launch(job, name), 0, ImageSet{});
    ExpectRestricted(pod, pod["spec"]["containers"][0]);
  }
  // A template's own choice wins.
  api::TrainingJob own = Job(R"(
    scheduler:
      template:
        spec:
          securityContext: {seccompProfile: {type: Localhost, localhostProfile: s.json}}
          containers:
            - name: scheduler
              securityContext: {capabilities: {add: [NET_ADMIN]}}
)");
  const json pod = BuildPod(kId, own, Launch(own, {ReplicaRole::kScheduler, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["spec"]["securityContext"]["seccompProfile"]["type"], "Localhost");
  EXPECT_EQ(pod["spec"]["containers"][0]["securityContext"]["capabilities"],
            json({{"add", {"NET_ADMIN"}}}));
}

// The token's Secret is mounted 0400, which the processes accept, and every
// pod has an fsGroup, so that the kubelet gives the file that group and
// group read, and a container running as any user can read it (without an
// fsGroup the file is root's and only root could). A template's fsGroup wins.
TEST(PodBuilderTest, TheTokenFileIsPrivateAndReadableThroughTheFsGroup) {
  const api::TrainingJob job = Job();
  for (ReplicaName name :
       {ReplicaName{ReplicaRole::kScheduler, 0}, ReplicaName{ReplicaRole::kServer, 1},
        ReplicaName{ReplicaRole::kWorker, 0}}) {
    const json pod = BuildPod(kId, job, Launch(job, name), 0, ImageSet{});
    json token_volume;
    for (const json& v : pod["spec"]["volumes"]) {
      if (v.contains("secret") && v["secret"]["secretName"] == TokenSecretName(kId))
        token_volume = v;
    }
    ASSERT_FALSE(token_volume.is_null()) << pod["spec"]["volumes"].dump();
    EXPECT_EQ(token_volume["secret"]["defaultMode"], 0400);
    EXPECT_EQ(pod["spec"]["securityContext"]["fsGroup"], 10001);
  }
  api::TrainingJob own = Job(R"(
    scheduler:
      template:
        spec:
          securityContext: {fsGroup: 2000}
)");
  const json pod = BuildPod(kId, own, Launch(own, {ReplicaRole::kScheduler, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["spec"]["securityContext"]["fsGroup"], 2000);
}

// The scheduler takes a template like the other roles: a namespace with a
// quota or node restrictions can then admit it.
TEST(PodBuilderTest, TheSchedulersTemplateIsMergedIntoItsPod) {
  api::TrainingJob job = Job(R"(
    scheduler:
      template:
        metadata: {labels: {tier: control}}
        spec:
          nodeSelector: {pool: cpu}
          tolerations: [{key: dedicated, operator: Exists}]
          containers:
            - name: scheduler
              resources: {requests: {cpu: 100m, memory: 64Mi}, limits: {memory: 128Mi}}
)");
  const json pod = BuildPod(kId, job, Launch(job, {ReplicaRole::kScheduler, 0}), 0, ImageSet{});
  EXPECT_EQ(pod["metadata"]["labels"]["tier"], "control");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "dedicated");
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  const json& main = pod["spec"]["containers"][0];
  EXPECT_EQ(main["resources"]["requests"]["cpu"], "100m");
  EXPECT_EQ(main["command"][0], "kubeps-server");
  ExpectRestricted(pod, main);
}

TEST(KubeClusterTest, PodStatusMapsToReplicaStatus) {
  json pod = {
      {"metadata",
       {{"name", "mnist-worker-0-r1"},
        {"labels", {{kReplicaTypeLabel, "worker"}, {kReplicaIndexLabel, "0"}}},
        {"annotations", {{kRestartsAnnotation, "1"}}}}},
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses", json::array({{{"state", {{"terminated", {{"exitCode", 143}}}}}}})}}}};
  controller::ReplicaStatus status = KubeCluster::StatusOf(pod);
  EXPECT_EQ(status.name.ToString(), "worker-0");
  EXPECT_EQ(status.phase, controller::ReplicaPhase::kFailed);
  EXPECT_EQ(status.exit_code, 143);
  EXPECT_EQ(status.restarts, 1);
}

TEST(TimeFormatTest, RoundTrips) {
  auto t = ParseTime("2026-11-22T01:02:03Z");
  EXPECT_EQ(Rfc3339(t), "2026-11-22T01:02:03Z");
  EXPECT_EQ(MicroTime(ParseTime("2026-11-22T01:02:03.250000Z")), "2026-11-22T01:02:03.250000Z");
  EXPECT_EQ(ParseTime("not a time").time_since_epoch().count(), 0);
}

TEST(WorkQueueTest, AKeyIsQueuedOnceAndNeverProcessedTwiceAtOnce) {
  WorkQueue queue;
  queue.Add("a");
  queue.Add("a");
  queue.Add("b");
  EXPECT_EQ(queue.Depth(), 2u);
  auto first = queue.Get();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "a");
  queue.Add("a");  // changed while being processed: again afterwards, not now
  EXPECT_EQ(*queue.Get(), "b");
  EXPECT_EQ(queue.Depth(), 0u);
  queue.Done("a");
  EXPECT_EQ(*queue.Get(), "a");
}

TEST(WorkQueueTest, DelaysAndRateLimitedRetries) {
  WorkQueue queue;
  const auto start = std::chrono::steady_clock::now();
  queue.AddRateLimited("job");  // first failure: 100 ms
  EXPECT_EQ(*queue.Get(), "job");
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  queue.Done("job");
  queue.AddRateLimited("job");  // second failure: 200 ms
  const auto second = std::chrono::steady_clock::now();
  EXPECT_EQ(*queue.Get(), "job");
  EXPECT_GE(std::chrono::steady_clock::now() - second, std::chrono::milliseconds(190));
  queue.Done("job");
  queue.Forget("job");
  queue.AddRateLimited("job");  // forgotten: 100 ms again, not a third failure's 400 ms
  // Due before a key due in 250 ms: an order, which a loaded machine keeps,
  // where a bound on the wall time would not hold.
  queue.AddAfter("later", std::chrono::milliseconds(250));
  EXPECT_EQ(*queue.Get(), "job");
  EXPECT_EQ(*queue.Get(), "later");
}

TEST(WorkQueueTest, ShutDownReleasesWaiters) {
  WorkQueue queue;
  std::thread waiter([&] { EXPECT_FALSE(queue.Get().has_value()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  queue.ShutDown();
  waiter.join();
}

}  // namespace
}  // namespace kubeps::kube
