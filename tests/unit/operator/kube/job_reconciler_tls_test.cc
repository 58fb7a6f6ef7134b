// The reconcile of a TrainingJob with mutual TLS (spec.security.tls, or the
// operator's --tls): the CA Secret and one TLS Secret per replica, mounted in
// that replica's pod only; a restarted operator keeps the CA, issues only what
// is missing, keeps the job's TLS decision, and replaces certificates of a CA
// the job no longer has. Where the cluster runs cert-manager, its Issuers and
// Certificates instead, and no pod before every Secret is issued.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

// After gtest: cpprest defines a macro U that gtest uses as a name.
#include <cpprest/asyncrt_utils.h>

#include <algorithm>

#include "operator/kube/cert_manager_objects.h"
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
  std::string TokenAnnotation(const char* key = kTlsAnnotation) {
    return fake_.Object(kSecretsPath + "/mnist-token")["metadata"]["annotations"].value(key, "");
  }
  // The API server serves cert-manager.io/v1 (its discovery document).
  void InstallCertManager() {
    fake_.ServeDiscovery(
        "/apis/cert-manager.io/v1",
        {{"kind", "APIResourceList"},
         {"groupVersion", "cert-manager.io/v1"},
         {"resources",
          {{{"name", "certificates"}, {"kind", "Certificate"}, {"namespaced", true}},
           {{"name", "issuers"}, {"kind", "Issuer"}, {"namespaced", true}}}}});
  }
  // What cert-manager writes for a Certificate: no ownerReferences; every
  // certificate's ca.crt is the CA's tls.crt ("ca", "Y2E=" in base64) unless
  // `signed_by` names another.
  void Issue(const std::string& secret_name, const std::string& signed_by = "Y2E=") {
    const bool ca = secret_name == "mnist-tls-cm-ca";
    fake_.Create(kSecretsPath,
                 {{"metadata",
                   {{"name", secret_name},
                    {"annotations", {{"cert-manager.io/certificate-name", secret_name}}}}},
                  {"type", "kubernetes.io/tls"},
                  {"data",
                   {{"ca.crt", ca ? "Y2E=" : signed_by},
                    {"tls.crt", ca ? "Y2E=" : "Y3J0"},
                    {"tls.key", "a2V5"}}}});
  }
  std::vector<std::string> CertificateSecrets() {
    std::vector<std::string> names = {"mnist-tls-cm-ca"};
    for (const auto& pod : kPodNames) names.push_back(pod + "-tls");
    return names;
  }
  // A condition False, as cert-manager writes it on a Certificate.
  static json CertificateCondition(const std::string& type, const std::string& reason,
                                   const std::string& message) {
    return {{"type", type}, {"status", "False"}, {"reason", reason}, {"message", message}};
  }
  static json TlsManifest() {
    json manifest = JobManifest();
    manifest["spec"]["security"] = {{"tls", "Enabled"}};
    return manifest;
  }
  const std::string kCertificatesPath = CollectionPath(kCertificates, kNamespace);
  const std::string kIssuersPath = CollectionPath(kIssuers, kNamespace);
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
  EXPECT_EQ(TokenAnnotation(kTlsIssuerAnnotation), "operator");
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

TEST_F(JobReconcilerTlsTest, WithCertManagerTheJobWaitsForItsCertificatesThenOwnsTheirSecrets) {
  InstallCertManager();
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(TokenAnnotation(kTlsIssuerAnnotation), "cert-manager");
  EXPECT_THAT(Names(fake_.List(kIssuersPath)),
              UnorderedElementsAre("mnist-tls-selfsigned", "mnist-tls-ca"));
  EXPECT_THAT(Names(fake_.List(kCertificatesPath)),
              UnorderedElementsAreArray(CertificateSecrets()));
  for (const json& object : fake_.List(kCertificatesPath))
    EXPECT_EQ(object["metadata"]["ownerReferences"][0]["uid"], uid_);
  const json worker = fake_.Object(kCertificatesPath + "/mnist-worker-1-tls");
  EXPECT_EQ(worker["spec"]["secretName"], "mnist-worker-1-tls");
  EXPECT_EQ(worker["spec"]["issuerRef"]["name"], "mnist-tls-ca");
  EXPECT_THAT(worker["spec"]["uris"], Contains("spiffe://kubeps.io/ns/team-a/job/mnist/worker/1"));
  EXPECT_THAT(worker["spec"]["usages"], Contains("client auth"));
  EXPECT_TRUE(fake_.Object(kCertificatesPath + "/mnist-tls-cm-ca")["spec"]["isCA"]);
  EXPECT_EQ(fake_.Object(kIssuersPath + "/mnist-tls-ca")["spec"]["ca"]["secretName"],
            "mnist-tls-cm-ca");
  // No pod before its Secret: it would wait on its volume, FailedMount.
  EXPECT_TRUE(fake_.List(kPodsPath).empty());
  EXPECT_THAT(StatusOfJob()["message"].get<std::string>(),
              ::testing::HasSubstr("waiting for cert-manager to issue the job's certificates "
                                   "(mnist-tls-cm-ca: no status yet: is cert-manager's "
                                   "controller running?"));
  EXPECT_EQ(result_.requeue_after, std::chrono::milliseconds(1000));

  // cert-manager says why it has not issued one yet: the job says it too,
  // a failed request's reason before Ready's.
  const json not_there =
      CertificateCondition("Ready", "DoesNotExist", "Issuing certificate as Secret does not exist");
  fake_.SetStatus(kCertificatesPath + "/mnist-tls-cm-ca",
                  {{"conditions", json::array({not_there})}});
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(StatusOfJob()["message"].get<std::string>(),
              ::testing::HasSubstr("(mnist-tls-cm-ca: Issuing certificate as Secret does not "
                                   "exist)"));
  fake_.SetStatus(
      kCertificatesPath + "/mnist-tls-cm-ca",
      {{"conditions",
        json::array({not_there, CertificateCondition("Issuing", "Failed",
                                                     "The certificate request has failed to "
                                                     "complete and will be retried: denied")})}});
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_THAT(StatusOfJob()["message"].get<std::string>(),
              ::testing::HasSubstr("(mnist-tls-cm-ca: The certificate request has failed to "
                                   "complete and will be retried: denied)"));
  EXPECT_TRUE(fake_.List(kPodsPath).empty());

  for (const auto& name : CertificateSecrets()) Issue(name);
  ASSERT_TRUE(Reconcile().ok());
  for (const auto& name : CertificateSecrets()) {
    const json owners = fake_.Object(kSecretsPath + "/" + name)["metadata"]["ownerReferences"];
    ASSERT_EQ(owners.size(), 1u) << name;
    EXPECT_EQ(owners[0]["uid"], uid_);
    // A plain owner: cert-manager may make its Certificate the controller.
    EXPECT_FALSE(owners[0]["controller"]);
  }
  EXPECT_THAT(Names(fake_.List(kPodsPath)), UnorderedElementsAreArray(kPodNames));
  const json pod = fake_.Object(kPodsPath + "/mnist-worker-0");
  EXPECT_THAT(
      pod["spec"]["volumes"],
      Contains(json({{"name", "kubeps-tls"},
                     {"secret", {{"secretName", "mnist-worker-0-tls"}, {"defaultMode", 0400}}}})));
  // The operator issued nothing itself.
  EXPECT_TRUE(fake_.Object(kSecretsPath + "/mnist-tls-ca").is_null());
}

TEST_F(JobReconcilerTlsTest, ASecretCertManagerOwnsThroughTheJobsCertificateIsLeftAsItIs) {
  InstallCertManager();
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  for (const auto& name : CertificateSecrets()) {
    Issue(name);
    // cert-manager's --enable-certificate-owner-ref: the Certificate controls it.
    const json certificate = fake_.Object(kCertificatesPath + "/" + name);
    fake_.Modify(kSecretsPath + "/" + name, {{"metadata",
                                              {{"ownerReferences",
                                                {{{"apiVersion", "cert-manager.io/v1"},
                                                  {"kind", "Certificate"},
                                                  {"name", name},
                                                  {"uid", certificate["metadata"]["uid"]},
                                                  {"controller", true}}}}}}});
  }
  fake_.ClearRequests();
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.RequestsTo("PATCH", kSecretsPath).empty());
  EXPECT_EQ(fake_.List(kPodsPath).size(), kPodNames.size());
}

TEST_F(JobReconcilerTlsTest, AnEarlierJobsIssuedSecretIsWaitedForNotAdopted) {
  InstallCertManager();
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  for (const auto& name : CertificateSecrets()) Issue(name);
  fake_.Modify(kSecretsPath + "/mnist-worker-0-tls", {{"metadata",
                                                       {{"ownerReferences",
                                                         {{{"apiVersion", "kubeps.io/v1alpha1"},
                                                           {"kind", "TrainingJob"},
                                                           {"name", "mnist"},
                                                           {"uid", "uid-of-an-earlier-mnist"},
                                                           {"controller", false}}}}}}});
  Status s = Reconcile();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("mnist-worker-0-tls is not owned by this job"));
  EXPECT_TRUE(fake_.List(kPodsPath).empty());
}

// cert-manager does not issue a certificate again when its CA changes: one
// signed by another CA (an earlier job's, the CA Secret made again) is
// deleted, so that it is, and no pod starts with it.
TEST_F(JobReconcilerTlsTest, ACertificateOfAnotherCaIsIssuedAgainBeforeAnyPod) {
  InstallCertManager();
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  for (const auto& name : CertificateSecrets())
    Issue(name, name == "mnist-server-0-tls" ? "b2xk" : "Y2E=");  // "old"
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.Object(kSecretsPath + "/mnist-server-0-tls").is_null());
  EXPECT_THAT(StatusOfJob()["message"].get<std::string>(),
              ::testing::HasSubstr("waiting for cert-manager to issue mnist-server-0-tls again: "
                                   "it was signed by another CA than the job's"));
  EXPECT_TRUE(fake_.List(kPodsPath).empty());
  Issue("mnist-server-0-tls");
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(fake_.List(kPodsPath).size(), kPodNames.size());
}

// Only a 404 says the job's decision is not recorded yet: a failed read of a
// running job's token Secret must not let the flags decide again (a switch
// of CA halfway through the job).
TEST_F(JobReconcilerTlsTest, AFailedReadOfTheTokenSecretDecidesNothing) {
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  InstallCertManager();
  UseOperator(false);  // restarted: it must read the job's decision again
  fake_.FailNext("GET", kSecretsPath + "/mnist-token", 1, 500);
  fake_.ClearRequests();
  Status s = Reconcile();
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("reading the job's token Secret"));
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.List(kCertificatesPath).empty());
  EXPECT_EQ(TokenAnnotation(kTlsIssuerAnnotation), "operator");
}

// A job keeps the issuer it was made with: one that started with the
// operator's CA does not get cert-manager's certificates halfway (its pods
// would not trust each other), nor the other way round.
TEST_F(JobReconcilerTlsTest, AJobKeepsItsIssuerWhenCertManagerComesOrTheFlagChanges) {
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  InstallCertManager();
  UseOperator(false);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.List(kCertificatesPath).empty());
  EXPECT_EQ(TokenAnnotation(kTlsIssuerAnnotation), "operator");

  JobObjectOptions options;
  options.tls_issuer = TlsIssuerChoice::kOperator;
  reconciler_ = std::make_unique<JobReconciler>(&fake_, options, metrics_.get());
  fake_.Remove(kJob);
  fake_.CollectGarbage();
  CreateJob(TlsManifest());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(fake_.List(kCertificatesPath).empty()) << "--tls-issuer=operator";
  EXPECT_EQ(TokenAnnotation(kTlsIssuerAnnotation), "operator");
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
