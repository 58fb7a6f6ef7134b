// The worker pod of a job that brings its own program: the user's container
// as the main container, kubeps' agent as a native sidecar beside it.
#include <gtest/gtest.h>

#include <string>

#include "api/training_job.h"
#include "operator/controller/replica_env.h"
#include "operator/kube/pod_builder.h"

namespace kubeps::kube {
namespace {

using controller::ReplicaName;
using controller::ReplicaRole;
using nlohmann::json;

const JobIdentity kId{"mlp", "team-a", "uid-1"};

api::TrainingJob Job(const std::string& pod_spec_extra = "",
                     const std::string& container_extra = "") {
  auto parsed = api::ParseTrainingJob(R"yaml(
apiVersion: kubeps.io/v1alpha1
kind: TrainingJob
metadata: {name: mlp, namespace: team-a}
spec:
  replicaSpecs:
    ps: {replicas: 1}
    worker:
      replicas: 2
      template:
        spec:
)yaml" + pod_spec_extra + R"yaml(
          containers:
            - name: trainer
              image: registry.example/mlp:1
              command: [python3, train.py]
              args: ["--steps", "$(STEPS)"]
              env: [{name: STEPS, value: "30"}, {name: KUBEPS_SOCKET_DIR, value: /elsewhere}]
              volumeMounts: [{name: data, mountPath: /data}]
)yaml" + container_extra + R"yaml(
          volumes: [{name: data, emptyDir: {}}]
)yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.ErrorReport("job");
  return *parsed.job;
}

controller::ReplicaLaunch Launch(const api::TrainingJob& job, ReplicaName name) {
  return {name, controller::ReplicaBinary(name), controller::ReplicaArgs(job, name),
          controller::ReplicaEnv(job, name, SchedulerAddress(kId))};
}

json Worker(const api::TrainingJob& job) {
  return BuildPod(kId, job, Launch(job, {ReplicaRole::kWorker, 1}), 0, ImageSet{});
}

json EnvValue(const json& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"] : e["valueFrom"];
  }
  return nullptr;
}

json MountOf(const json& container, const std::string& volume) {
  for (const auto& m : container["volumeMounts"]) {
    if (m["name"] == volume) return m;
  }
  return nullptr;
}

TEST(UserCodePodTest, TheUsersContainerStaysTheMainContainerAsWritten) {
  json pod = Worker(Job());
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["name"], "trainer");
  EXPECT_EQ(c["image"], "registry.example/mlp:1");
  EXPECT_EQ(c["command"], json::array({"python3", "train.py"}));
  EXPECT_EQ(c["args"], json::array({"--steps", "$(STEPS)"}));  // Kubernetes expands it
  EXPECT_EQ(EnvValue(c, "STEPS"), "30");
  // kubeps' one variable wins; rank and size come from the agent.
  EXPECT_EQ(EnvValue(c, "KUBEPS_SOCKET_DIR"), "/var/run/kubeps");
  EXPECT_EQ(EnvValue(c, "KUBEPS_ROLE"), nullptr);
  EXPECT_EQ(EnvValue(c, "KUBEPS_TOKEN_FILE"), nullptr);
  EXPECT_FALSE(c.contains("ports"));
  EXPECT_EQ(MountOf(c, "data")["mountPath"], "/data");
  EXPECT_EQ(MountOf(c, "kubeps-socket")["mountPath"], "/var/run/kubeps");
  EXPECT_EQ(MountOf(c, "kubeps-token"), nullptr);
}

TEST(UserCodePodTest, TheAgentIsANativeSidecarSharingAMemoryVolume) {
  json pod = Worker(Job());
  const json& spec = pod["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  ASSERT_EQ(spec["initContainers"].size(), 1u);
  const json& agent = spec["initContainers"][0];
  EXPECT_EQ(agent["name"], "kubeps-agent");
  EXPECT_EQ(agent["image"], ImageSet{}.agent);
  EXPECT_EQ(agent["restartPolicy"], "Always");
  EXPECT_EQ(agent["command"], json::array({"kubeps-agent", "--serve"}));
  // The node environment the built-in worker gets.
  EXPECT_EQ(EnvValue(agent, "KUBEPS_ROLE"), "worker");
  EXPECT_EQ(EnvValue(agent, "KUBEPS_NODE_ID"), "worker-1");
  EXPECT_EQ(EnvValue(agent, "KUBEPS_SCHEDULER_ADDR"), "mlp-scheduler.team-a.svc:7000");
  EXPECT_EQ(EnvValue(agent, "KUBEPS_POD_IP")["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(EnvValue(agent, "KUBEPS_TOKEN_FILE"), "/var/run/secrets/kubeps/token");
  EXPECT_EQ(EnvValue(agent, "KUBEPS_SOCKET_DIR"), "/var/run/kubeps");
  EXPECT_EQ(agent["ports"][0]["containerPort"], kGrpcPort);
  EXPECT_EQ(MountOf(agent, "kubeps-socket")["mountPath"], "/var/run/kubeps");
  EXPECT_EQ(MountOf(agent, "kubeps-token")["mountPath"], "/var/run/secrets/kubeps");
  EXPECT_EQ(agent["startupProbe"]["exec"]["command"],
            json::array({"test", "-f", "/var/run/kubeps/agent.json"}));

  json socket, token;
  for (const auto& v : spec["volumes"]) {
    if (v["name"] == "kubeps-socket") socket = v;
    if (v["name"] == "kubeps-token") token = v;
  }
  EXPECT_EQ(socket["emptyDir"]["medium"], "Memory");
  EXPECT_EQ(token["secret"]["secretName"], "mlp-token");
  EXPECT_EQ(spec["volumes"].size(), 3u);  // the template's data volume stays
}

TEST(UserCodePodTest, BothContainersRunAsOneUser) {
  // Nobody names a user: the pod runs as the agent image's.
  json pod = Worker(Job());
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsUser"], 10001);
  EXPECT_EQ(pod["spec"]["securityContext"]["fsGroup"], 10001);
  EXPECT_FALSE(pod["spec"]["initContainers"][0]["securityContext"].contains("runAsUser"));

  // The pod names one: both inherit it, no user added (only the restricted
  // profile's seccomp default and the fsGroup that lets it read the token).
  pod = Worker(Job("          securityContext: {runAsUser: 2000}\n"));
  EXPECT_EQ(pod["spec"]["securityContext"],
            json({{"runAsUser", 2000},
                  {"fsGroup", 10001},
                  {"seccompProfile", {{"type", "RuntimeDefault"}}}}));

  // The user's container names one: the sidecar takes it.
  pod = Worker(Job("", "              securityContext: {runAsUser: 3000, runAsGroup: 30}\n"));
  EXPECT_FALSE(pod["spec"]["securityContext"].contains("runAsUser"));
  EXPECT_EQ(pod["spec"]["initContainers"][0]["securityContext"]["runAsUser"], 3000);
  EXPECT_EQ(pod["spec"]["initContainers"][0]["securityContext"]["runAsGroup"], 30);
}

TEST(UserCodePodTest, TheTemplatesOwnInitContainersRunFirst) {
  json pod = Worker(
      Job("          initContainers: [{name: fetch, image: busybox, command: [\"true\"]}]\n"));
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 2u);
  EXPECT_EQ(pod["spec"]["initContainers"][0]["name"], "fetch");
  EXPECT_EQ(pod["spec"]["initContainers"][1]["name"], "kubeps-agent");
}

// A namespace whose ResourceQuota counts requests refuses a container
// without them: the agent asks for a little by default, and the template's
// own entry for it sets its image and resources (before: none, and no way
// to give it any).
TEST(UserCodePodTest, TheAgentHasResourcesTheTemplateMaySet) {
  json agent = Worker(Job())["spec"]["initContainers"][0];
  ASSERT_EQ(agent["name"], "kubeps-agent");
  EXPECT_EQ(agent["resources"], json::parse(R"({"requests": {"cpu": "100m", "memory": "128Mi"}})"));
  json pod = Worker(
      Job("          initContainers: [{name: fetch, image: busybox, command: [\"true\"]},\n"
          "            {name: kubeps-agent, image: mirror.example/agent:1,\n"
          "             resources: {requests: {cpu: 1}, limits: {cpu: 2, memory: 1Gi}}}]\n"));
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 2u) << "the entry is the sidecar, not another";
  EXPECT_EQ(pod["spec"]["initContainers"][0]["name"], "fetch");
  agent = pod["spec"]["initContainers"][1];
  EXPECT_EQ(agent["name"], "kubeps-agent");
  EXPECT_EQ(agent["image"], "mirror.example/agent:1");
  EXPECT_EQ(agent["restartPolicy"], "Always");
  EXPECT_EQ(agent["command"], json::array({"kubeps-agent", "--serve"}));
  EXPECT_EQ(agent["resources"]["limits"]["memory"], "1Gi");
  EXPECT_EQ(agent["resources"]["requests"]["cpu"], 1);
}

TEST(UserCodePodTest, ServersAndSchedulerAreUnchanged) {
  api::TrainingJob job = Job();
  json pod = BuildPod(kId, job, Launch(job, {ReplicaRole::kServer, 0}), 0, ImageSet{});
  EXPECT_FALSE(pod["spec"].contains("initContainers"));
  EXPECT_EQ(pod["spec"]["containers"][0]["command"], json::array({"kubeps-server"}));
}

}  // namespace
}  // namespace kubeps::kube
