// The reconcile of a TrainingJob with mutual TLS (spec.security.tls, or the
// operator's --tls): the CA Secret and one TLS Secret per replica, mounted in
// that replica's pod only; a restarted operator keeps the CA, issues only what
// is missing, keeps the job's TLS decision, and replaces certificates of a CA
// the job no longer has.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

// After gtest: cpprest defines a macro U that gtest uses as a name.
#include <cpprest/asyncrt_utils.h>

#include <algorithm>

#include "operator/kube/tls_secrets.h"
#include "tests/unit/operator/kube/job_reconciler_fixture.h"

namespace kubeps::kube {
namespace {

using namespace reconciler_test;
using ::testing::Contains;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

class JobReconcilerTlsTest : public JobReconcilerTest {
 protected:
  void UseOperator(bool tls_by_default) {
    JobObjectOptions options;
    options.tls_by_default = tls_by_default;
    reconciler_ = std::make_unique<JobReconciler>(&fake_, options, metrics_.get());
  }
  std::string TokenAnnotation() {
    return fake_.Object(kSecretsPath + "/mnist-token")["metadata"]["annotations"][kTlsAnnotation];
  }
};

TEST_F(JobReconcilerTlsTest, AJobWithTlsGetsACaAndACertificatePerReplicaMountedInItsPodOnly) {
  json manifest = JobManifest();
  manifest["spec"]["security"] = {{"tls", "Enabled"}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  std::vector<std::string> secrets = {"mnist-token", "mnist-tls-ca"};
  for (const auto& pod : kPodNames) secrets.push_back(pod + "-tls");
  EXPECT_THAT(Names(fake_.List(kSecretsPath)), UnorderedElementsAreArray(secrets));
  const json ca = fake_.Object(kSecretsPath + "/mnist-tls-ca");
  CertificateAndKey ca_pems;
  ASSERT_TRUE(CaFromSecret(ca, &ca_pems).ok());
  for (const auto& name : kPodNames) {
    const json secret = fake_.Object(kSecretsPath + "/" + name + "-tls");
    EXPECT_EQ(secret["type"], "kubernetes.io/tls");
    EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], uid_);
    const json pod = fake_.Object(kPodsPath + "/" + name);
    const json& volumes = pod["spec"]["volumes"];
    const auto tls = std::find_if(volumes.begin(), volumes.end(),
                                  [](const json& v) { return v["name"] == "kubeps-tls"; });
    ASSERT_NE(tls, volumes.end()) << name;
    EXPECT_EQ((*tls)["secret"]["secretName"], name + "-tls");
    EXPECT_EQ((*tls)["secret"]["defaultMode"], 0400);
    EXPECT_THAT(pod["spec"]["containers"][0]["env"],
                Contains(json({{"name", "KUBEPS_TLS_DIR"}, {"value", kTlsMountPath}})));
  }
  // Each certificate names its replica.
  const json worker = fake_.Object(kSecretsPath + "/mnist-worker-1-tls");
  std::vector<unsigned char> bytes =
      utility::conversions::from_base64(worker["data"]["tls.crt"].get<std::string>());
  std::vector<std::string> uris;
  ASSERT_TRUE(CertificateUris(std::string(bytes.begin(), bytes.end()), &uris).ok());
  EXPECT_THAT(uris, Contains("spiffe://kubeps.io/ns/team-a/job/mnist/worker/1"));
  EXPECT_EQ(TokenAnnotation(), "Enabled");
}

TEST_F(JobReconcilerTlsTest, ARestartedOperatorKeepsTheCaAndIssuesOnlyWhatIsMissing) {
  json manifest = JobManifest();
  manifest["spec"]["security"] = {{"tls", "Enabled"}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  const json ca = fake_.Object(kSecretsPath + "/mnist-tls-ca");
  const json server = fake_.Object(kSecretsPath + "/mnist-server-0-tls");
  fake_.Remove(kSecretsPath + "/mnist-worker-0-tls");
  UseOperator(false);
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(fake_.Object(kSecretsPath + "/mnist-tls-ca"), ca);
  EXPECT_EQ(fake_.Object(kSecretsPath + "/mnist-server-0-tls"), server);
  EXPECT_EQ(fake_.RequestsTo("POST", kSecretsPath).size(), 1u);  // worker 0's, again
  // Signed by the same CA as before.
  const json worker = fake_.Object(kSecretsPath + "/mnist-worker-0-tls");
  EXPECT_EQ(worker["data"]["ca.crt"], server["data"]["ca.crt"]);
}

// The operator's --tls decides for a job that does not say, once: the
// token Secret records it, and an operator restarted with another default
// does not mix pods with TLS and pods without in one job.
TEST_F(JobReconcilerTlsTest, TheOperatorsDefaultIsDecidedOnceAndKeptAcrossARestart) {
  UseOperator(true);
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(TokenAnnotation(), "Enabled");
  EXPECT_FALSE(fake_.Object(kSecretsPath + "/mnist-tls-ca").is_null());
  UseOperator(false);
  fake_.Remove(kPodsPath + "/mnist-worker-1");
  ASSERT_TRUE(Reconcile().ok());
  const json pod = fake_.Object(kPodsPath + "/mnist-worker-1");
  EXPECT_THAT(pod["spec"]["containers"][0]["env"],
              Contains(json({{"name", "KUBEPS_TLS_DIR"}, {"value", kTlsMountPath}})));
}

TEST_F(JobReconcilerTlsTest, ACaMadeAgainGetsEveryReplicaANewCertificate) {
  json manifest = JobManifest();
  manifest["spec"]["security"] = {{"tls", "Enabled"}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  const json old_ca = fake_.Object(kSecretsPath + "/mnist-tls-ca");
  fake_.Remove(kSecretsPath + "/mnist-tls-ca");
  UseOperator(false);  // a restarted operator: it remembers nothing
  ASSERT_TRUE(Reconcile().ok());
  const json ca = fake_.Object(kSecretsPath + "/mnist-tls-ca");
  ASSERT_NE(ca["data"]["ca.crt"], old_ca["data"]["ca.crt"]);
  for (const auto& name : kPodNames) {
    const json secret = fake_.Object(kSecretsPath + "/" + name + "-tls");
    EXPECT_EQ(secret["data"]["ca.crt"], ca["data"]["ca.crt"]) << name;
  }
}

// A worker taken in by a scale-up must find its certificate there: without
// it its pod waits on its volume forever, and locally it spoke plain TCP to
// servers that only speak TLS.
TEST_F(JobReconcilerTlsTest, AnElasticJobHasCertificatesForEveryWorkerItCanScaleTo) {
  json manifest = JobManifest();
  manifest["spec"]["security"] = {{"tls", "Enabled"}};
  manifest["spec"]["replicaSpecs"]["worker"]["elasticPolicy"] = {{"minReplicas", 1},
                                                                 {"maxReplicas", 4}};
  CreateJob(manifest);
  ASSERT_TRUE(Reconcile().ok());
  for (int i = 0; i < 4; ++i) {
    const std::string name = "mnist-worker-" + std::to_string(i) + "-tls";
    EXPECT_FALSE(fake_.Object(kSecretsPath + "/" + name).is_null()) << name;
  }
  EXPECT_TRUE(fake_.Object(kSecretsPath + "/mnist-worker-4-tls").is_null());
}

TEST_F(JobReconcilerTlsTest, WithoutTlsThereAreNoCertificates) {
  CreateJob();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(Names(fake_.List(kSecretsPath)), UnorderedElementsAre("mnist-token"));
  EXPECT_EQ(TokenAnnotation(), "Disabled");
  for (const auto& env :
       fake_.Object(kPodsPath + "/mnist-server-0")["spec"]["containers"][0]["env"])
    EXPECT_NE(env["name"], "KUBEPS_TLS_DIR");
}

}  // namespace
}  // namespace kubeps::kube
