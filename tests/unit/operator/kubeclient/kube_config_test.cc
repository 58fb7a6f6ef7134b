// Loading the API server's address and credentials
// (operator/kube/kube_config.cc): kubeconfig files, in-cluster service
// accounts, and which one wins.
#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/kubeclient/kube_client.h"
#include "tests/unit/operator/kubeclient/kube_test_util.h"

namespace kubeps::kube {
namespace internal {
// Defined in kube_config.cc: LoadInClusterConfig with the service-account
// folder as a parameter.
Status LoadInClusterConfigFrom(const std::string& service_account_dir, KubeConfig* config);
}  // namespace internal

namespace {

using ::testing::HasSubstr;
using namespace testing_util;

// ---------------------------------------------------------------------------
// kubeconfig.

class KubeconfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    WriteFile(path, text);
    return path;
  }
  std::string dir_;
};

TEST_F(KubeconfigTest, DataFieldsAndToken) {
  const std::string path =
      Write("config", Kubeconfig("    server: https://10.0.0.1:6443/\n"
                                 "    certificate-authority-data: " +
                                     Base64(kFakeCa) + "\n",
                                 "    client-certificate-data: " + Base64(kFakeCert) +
                                     "\n    client-key-data: " + Base64(kFakeKey) +
                                     "\n    token: abc.def\n"));
  KubeConfig c;
  Status s = LoadKubeconfig(path, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.server, "https://10.0.0.1:6443");
  EXPECT_EQ(c.ca_data, kFakeCa);
  EXPECT_EQ(c.client_cert_data, kFakeCert);
  EXPECT_EQ(c.client_key_data, kFakeKey);
  EXPECT_EQ(c.token, "abc.def");
  EXPECT_FALSE(c.insecure_skip_tls_verify);
  EXPECT_EQ(c.namespace_, "team-a");
}

TEST_F(KubeconfigTest, FilesRelativeToTheKubeconfigFolder) {
  Write("kube/certs/ca.crt", kFakeCa);
  Write("kube/certs/client.crt", kFakeCert);
  Write("kube/certs/client.key", kFakeKey);
  Write("kube/token", "  file-token\n");
  const std::string absolute_ca = Write("elsewhere/ca.crt", "absolute CA");
  const std::string path =
      Write("kube/config", Kubeconfig("    server: https://api.example:443\n"
                                      "    certificate-authority: certs/ca.crt\n",
                                      "    client-certificate: certs/client.crt\n"
                                      "    client-key: ./certs/client.key\n"
                                      "    tokenFile: token\n"));
  KubeConfig c;
  Status s = LoadKubeconfig(path, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(c.ca_data, kFakeCa);
  EXPECT_EQ(c.client_cert_data, kFakeCert);
  EXPECT_EQ(c.client_key_data, kFakeKey);
  EXPECT_EQ(c.token, "file-token");
  EXPECT_EQ(c.token_file, dir_ + "/kube/token") << "kept, so the client re-reads it as it rotates";

  // Absolute paths stay as they are; data beats the file.
  const std::string path2 = Write("kube/config2", Kubeconfig("    server: https://api.example:443\n"
                                                             "    certificate-authority: " +
                                                                 absolute_ca + "\n",
                                                             "    token: t\n"));
  ASSERT_TRUE(LoadKubeconfig(path2, &c).ok());
  EXPECT_EQ(c.ca_data, "absolute CA");
  const std::string path3 =
      Write("kube/config3", Kubeconfig("    server: https://api.example:443\n"
                                       "    certificate-authority: missing.crt\n"
                                       "    certificate-authority-data: " +
                                           Base64("from data") + "\n",
                                       "    token: t\n"));
  ASSERT_TRUE(LoadKubeconfig(path3, &c).ok());
  EXPECT_EQ(c.ca_data, "from data");
}

TEST_F(KubeconfigTest, InsecureAndDefaultNamespace) {
  const std::string path = Write("config",
                                 "current-context: bare\n"
                                 "clusters:\n- name: c\n  cluster:\n    server: https://h:1\n    "
                                 "insecure-skip-tls-verify: true\n"
                                 "contexts:\n- name: bare\n  context:\n    cluster: c\n");
  KubeConfig c;
  Status s = LoadKubeconfig(path, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(c.insecure_skip_tls_verify);
  EXPECT_EQ(c.namespace_, "default");
  EXPECT_TRUE(c.token.empty());
}

TEST_F(KubeconfigTest, ErrorsNameTheFileAndTheKey) {
  const std::string cluster = "    server: https://h:1\n";
  const std::string user = "    token: t\n";
  KubeConfig c;

  std::string path = Write("no-current", Kubeconfig(cluster, user, ""));
  Status s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("current-context"));

  path = Write("bad-current", Kubeconfig(cluster, user, "nope"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("context \"nope\""));

  path =
      Write("no-cluster",
            Kubeconfig(cluster, user, "ctx2",
                       "- name: ctx2\n  context:\n    cluster: missing-cluster\n    user: u1\n"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("cluster \"missing-cluster\""));

  path = Write("no-user",
               Kubeconfig(cluster, user, "ctx2",
                          "- name: ctx2\n  context:\n    cluster: c1\n    user: missing-user\n"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("user \"missing-user\""));

  path = Write("no-server", Kubeconfig("    insecure-skip-tls-verify: true\n", user));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("server"));

  path = Write("missing-file",
               Kubeconfig(cluster + "    certificate-authority: nowhere/ca.crt\n", user));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("certificate-authority"));
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/nowhere/ca.crt"));

  path = Write("missing-token", Kubeconfig(cluster, "    tokenFile: no-token\n"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("tokenFile"));

  path = Write("bad-base64", Kubeconfig(cluster + "    certificate-authority-data: '***'\n", user));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("certificate-authority-data"));

  path = Write("half-cert",
               Kubeconfig(cluster, "    client-certificate-data: " + Base64(kFakeCert) + "\n"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("client-key"));

  path = Write("exec", Kubeconfig(cluster, "    exec:\n      command: aws\n"));
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("exec"));

  s = LoadKubeconfig(dir_ + "/does-not-exist", &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/does-not-exist"));

  path = Write("not-yaml", "clusters: [\n");
  s = LoadKubeconfig(path, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(path));
}

TEST_F(KubeconfigTest, InCluster) {
  Write("sa/token", "sa-token\n");
  Write("sa/ca.crt", kFakeCa);
  Write("sa/namespace", "jobs\n");
  KubeConfig c;
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    Status s = internal::LoadInClusterConfigFrom(dir_ + "/sa", &c);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(c.server, "https://10.96.0.1:443");
    EXPECT_EQ(c.token, "sa-token");
    EXPECT_EQ(c.token_file, dir_ + "/sa/token");
    EXPECT_EQ(c.ca_data, kFakeCa);
    EXPECT_EQ(c.namespace_, "jobs");
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
    ASSERT_TRUE(internal::LoadInClusterConfigFrom(dir_ + "/sa", &c).ok());
    EXPECT_EQ(c.server, "https://[fd00:10:96::1]:6443");
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    Status s = internal::LoadInClusterConfigFrom(dir_ + "/sa", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("KUBERNETES_SERVICE_HOST"));
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", nullptr);
    Status s = internal::LoadInClusterConfigFrom(dir_ + "/sa", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("KUBERNETES_SERVICE_PORT"));
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    Status s = internal::LoadInClusterConfigFrom(dir_ + "/empty", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(dir_ + "/empty/token"));
    Write("only-token/token", "t");
    s = internal::LoadInClusterConfigFrom(dir_ + "/only-token", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr(dir_ + "/only-token/ca.crt"));
  }
}

TEST_F(KubeconfigTest, LoadConfigPrecedence) {
  const std::string flag =
      Write("flag", Kubeconfig("    server: https://from-flag:1\n", "    token: t\n"));
  const std::string env =
      Write("env", Kubeconfig("    server: https://from-env:1\n", "    token: t\n"));
  Write("home/.kube/config", Kubeconfig("    server: https://from-home:1\n", "    token: t\n"));
  ScopedEnv home("HOME", (dir_ + "/home").c_str());
  ScopedEnv service_host("KUBERNETES_SERVICE_HOST", nullptr);
  KubeConfig c;
  {
    ScopedEnv kubeconfig("KUBECONFIG", (dir_ + "/nope:" + env).c_str());
    ASSERT_TRUE(LoadConfig(flag, &c).ok());
    EXPECT_EQ(c.server, "https://from-flag:1");
    ASSERT_TRUE(LoadConfig("", &c).ok());
    EXPECT_EQ(c.server, "https://from-env:1");
  }
  {
    ScopedEnv kubeconfig("KUBECONFIG", nullptr);
    ASSERT_TRUE(LoadConfig("", &c).ok());
    EXPECT_EQ(c.server, "https://from-home:1");
    // In a pod the service account comes before ~/.kube/config; here its
    // files are missing, so the home config is used.
    ScopedEnv in_cluster("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv in_cluster_port("KUBERNETES_SERVICE_PORT", "443");
    ASSERT_TRUE(LoadConfig("", &c).ok());
    EXPECT_EQ(c.server, "https://from-home:1");
  }
  {
    ScopedEnv kubeconfig("KUBECONFIG", nullptr);
    ScopedEnv no_home("HOME", (dir_ + "/nobody").c_str());
    Status s = LoadConfig("", &c);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("no Kubernetes configuration"));
  }
  Status s = LoadConfig(dir_ + "/missing-flag", &c);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/missing-flag"));
}

}  // namespace
}  // namespace kubeps::kube
