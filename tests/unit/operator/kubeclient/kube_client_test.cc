// The Kubernetes REST client (operator/kubeclient/kube_client.h): real HTTPS
// requests against a small Python server of the Kubernetes emulator
// (tests/k8s/emulator/tls_echo_server.py) whose CA, server and client
// certificates are made with the openssl command at test time.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/host_port.h"
#include "operator/kubeclient/kube_client.h"
#include "tests/unit/operator/kubeclient/kube_test_util.h"

namespace kubeps::kube {
namespace internal {
// kube_config.cc: the in-cluster loader with its service-account folder.
Status LoadInClusterConfigFrom(const std::string& service_account_dir, KubeConfig* config);
}  // namespace internal
namespace {

using ::testing::HasSubstr;
using namespace testing_util;
using Clock = std::chrono::steady_clock;

TEST(ResponseTest, Describe) {
  Response r;
  r.code = 409;
  r.reason = "Conflict";  // as the server sends it
  r.body = {{"kind", "Status"}, {"message", "trainingjobs \"x\" already exists"}};
  EXPECT_EQ(r.Describe(), "409 Conflict: trainingjobs \"x\" already exists");
  EXPECT_FALSE(r.ok());
  r.code = 410;
  r.reason = "Gone";
  r.body = nullptr;
  EXPECT_EQ(r.Describe(), "410 Gone");
  r.code = 201;
  EXPECT_TRUE(r.ok());
}

TEST(KubeClientCreateTest, RejectsBadConfig) {
  std::unique_ptr<KubeClient> client;
  KubeConfig c;
  EXPECT_FALSE(KubeClient::Create(c, &client).ok());
  c.server = "ftp://h:1";
  EXPECT_FALSE(KubeClient::Create(c, &client).ok());
  c.server = "https://[::1]:6443";
  Status v6 = KubeClient::Create(c, &client);
  EXPECT_TRUE(v6.ok()) << "an IPv6 literal is a server like any other: " << v6.message();
  c.server = "https://127.0.0.1:1";
  c.ca_data = "not a certificate";
  Status s = KubeClient::Create(c, &client);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("certificate-authority"));
}

// ---------------------------------------------------------------------------
// HTTPS against tls_echo_server.py.

// Runs a shell command; true when it exits 0.
bool Sh(const std::string& command) { return std::system(command.c_str()) == 0; }

struct TestCerts {
  std::string dir;
  std::string error;  // set when the certificates could not be made
  std::string Path(const std::string& name) const { return dir + "/" + name; }
  std::string Pem(const std::string& name) const { return ReadFile(Path(name)); }
};

// Made once per process: a CA, a second unrelated CA, a server certificate
// for 127.0.0.1, ::1 and localhost, one for another host, and a client
// certificate, all signed by the first CA. EC P-256 keys: fast to make.
TestCerts* g_certs = nullptr;  // removed at the end of the process

const TestCerts& Certs() {
  static const TestCerts* certs = [] {
    auto* c = g_certs = new TestCerts;
    c->dir = MakeTempDir();
    if (!Sh("command -v openssl >/dev/null 2>&1")) {
      c->error = "the openssl command is not installed";
      return c;
    }
    const std::string d = c->dir;
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto ca = [&](const std::string& name) {
      return Sh("openssl req -x509" + key + " -keyout " + d + "/" + name + ".key -out " + d + "/" +
                name + ".crt -days 2 -subj /CN=" + name + " >/dev/null 2>&1");
    };
    auto leaf = [&](const std::string& name, const std::string& ext) {
      WriteFile(d + "/" + name + ".ext", ext);
      return Sh("openssl req -new" + key + " -keyout " + d + "/" + name + ".key -out " + d + "/" +
                name + ".csr -subj /CN=" + name + " >/dev/null 2>&1") &&
             Sh("openssl x509 -req -in " + d + "/" + name + ".csr -CA " + d + "/ca.crt -CAkey " +
                d + "/ca.key -CAcreateserial -days 2 -extfile " + d + "/" + name + ".ext -out " +
                d + "/" + name + ".crt >/dev/null 2>&1");
    };
    const bool ok =
        ca("ca") && ca("wrong-ca") &&
        leaf("server",
             "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth\n") &&
        leaf("wrong-host",
             "subjectAltName=DNS:other.example,IP:10.1.2.3\nextendedKeyUsage=serverAuth\n") &&
        leaf("kubeps-test-client", "extendedKeyUsage=clientAuth\n");
    if (!ok) c->error = "openssl failed to make the test certificates in " + d;
    return c;
  }();
  return *certs;
}

// One tls_echo_server.py process.
class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }

  // Starts the server; "" or why not.
  std::string Start(const std::vector<std::string>& args) {
    // A module of the emulator's package: python3 -m with tests/k8s on PYTHONPATH.
    const std::string python =
        access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    std::vector<std::string> argv_s = {python, "-m", "emulator.tls_echo_server"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::string python_path = std::string(KUBEPS_SOURCE_DIR) + "/tests/k8s";
    if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
      python_path += std::string(":") + old;
    }
    std::vector<std::string> env_s = {"PYTHONPATH=" + python_path};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("PYTHONPATH=", 0) != 0) env_s.emplace_back(*e);
    }
    // The argument and environment arrays are made before fork().
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    pid_ = fork();
    if (pid_ < 0) return "fork failed";
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, even a crashed one
      int null_fd = open("/dev/null", O_RDWR);
      dup2(null_fd, 0);
      dup2(null_fd, 2);
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
      execvpe(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    std::string out;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (out.find('\n') == std::string::npos && Clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    if (out.rfind("PORT ", 0) != 0) {
      return "tls_echo_server.py did not start (is python3 installed?)";
    }
    port_ = std::atoi(out.c_str() + 5);
    return "";
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  int port() const { return port_; }
  std::string url(const std::string& host = "127.0.0.1") const {
    return "https://" + JoinHostPort(host, port_);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Servers are started on first use and live until the end of the process.
std::map<std::string, std::unique_ptr<ServerProcess>>& Servers() {
  static auto* servers = new std::map<std::string, std::unique_ptr<ServerProcess>>;
  return *servers;
}

class StopServers : public ::testing::Environment {
 public:
  void TearDown() override {
    Servers().clear();
    if (g_certs != nullptr && !g_certs->dir.empty()) std::filesystem::remove_all(g_certs->dir);
  }
};
[[maybe_unused]] ::testing::Environment* const kStopServers =
    ::testing::AddGlobalTestEnvironment(new StopServers);

class KubeClientHttpsTest : public ::testing::Test {
 protected:
  static ServerProcess* Server(const std::string& which) {
    auto& slot = Servers()[which];
    if (slot) return slot.get();
    const TestCerts& c = Certs();
    std::vector<std::string> args;
    if (which == "wrong-host" || which == "wrong-host-v6") {
      args = {"--cert", c.Path("wrong-host.crt"), "--key", c.Path("wrong-host.key")};
    } else {
      args = {"--cert", c.Path("server.crt"), "--key", c.Path("server.key")};
    }
    if (which == "mtls") args.insert(args.end(), {"--client-ca", c.Path("ca.crt")});
    if (which == "v6" || which == "wrong-host-v6") args.insert(args.end(), {"--host", "::1"});
    auto server = std::make_unique<ServerProcess>();
    const std::string error = server->Start(args);
    if (!error.empty()) {
      ADD_FAILURE() << error;
      return nullptr;
    }
    slot = std::move(server);
    return slot.get();
  }

  void SetUp() override {
    if (!Certs().error.empty()) GTEST_SKIP() << Certs().error;
    if (!Sh("command -v python3 >/dev/null 2>&1") && access("/usr/bin/python3", X_OK) != 0) {
      GTEST_SKIP() << "python3 is not installed";
    }
  }

  // A config for `server` trusting the test CA.
  static KubeConfig Config(ServerProcess* server, const std::string& host = "127.0.0.1") {
    KubeConfig c;
    c.server = server->url(host);
    c.ca_data = Certs().Pem("ca.crt");
    c.token = "secret-token";
    return c;
  }

  static std::unique_ptr<KubeClient> Client(const KubeConfig& config) {
    std::unique_ptr<KubeClient> client;
    Status s = KubeClient::Create(config, &client);
    EXPECT_TRUE(s.ok()) << s.message();
    return client;
  }
};

TEST_F(KubeClientHttpsTest, VerbsBodiesAndHeaders) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  ASSERT_NE(client, nullptr);

  Response r;
  Status s = client->Get("/echo/api/v1/pods?labelSelector=app%3Dx", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(r.code, 200) << r.Describe();
  EXPECT_EQ(r.body["method"], "GET");
  EXPECT_EQ(r.body["path"], "/echo/api/v1/pods?labelSelector=app%3Dx");
  EXPECT_EQ(r.body["headers"]["authorization"], "Bearer secret-token");
  EXPECT_EQ(r.body["headers"]["accept"], "application/json");
  EXPECT_EQ(r.body["body"], "");

  const nlohmann::json body = {{"metadata", {{"name", "demo"}}}, {"spec", {{"replicas", 3}}}};
  struct Case {
    const char* method;
    const char* content_type;
  };
  for (const Case& c : {Case{"POST", "application/json"}, Case{"PUT", "application/json"},
                        Case{"PATCH", "application/merge-patch+json"}}) {
    SCOPED_TRACE(c.method);
    const std::string path = std::string("/echo/") + c.method;
    if (std::string(c.method) == "POST") s = client->Post(path, body, &r);
    if (std::string(c.method) == "PUT") s = client->Put(path, body, &r);
    if (std::string(c.method) == "PATCH") s = client->Patch(path, body, &r);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(r.code, 200);
    EXPECT_EQ(r.body["method"], c.method);
    EXPECT_EQ(r.body["path"], path);
    EXPECT_EQ(r.body["headers"]["content-type"], c.content_type);
    EXPECT_EQ(r.body["headers"]["authorization"], "Bearer secret-token");
    EXPECT_EQ(nlohmann::json::parse(r.body["body"].get<std::string>()), body);
  }

  s = client->Delete("/echo/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs/demo", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.body["method"], "DELETE");
  EXPECT_EQ(r.body["path"], "/echo/apis/kubeps.io/v1alpha1/namespaces/default/trainingjobs/demo");

  // HTTP errors are responses, with the Status message in Describe().
  s = client->Post("/status/409", body, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(r.Describe(), "409 Conflict: trainingjobs.kubeps.io \"demo\" already exists");
  s = client->Get("/notjson", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200);
  EXPECT_TRUE(r.body.is_null());

  // No token, no Authorization header.
  KubeConfig anonymous = Config(server);
  anonymous.token.clear();
  auto anonymous_client = Client(anonymous);
  ASSERT_TRUE(anonymous_client->Get("/echo", &r).ok());
  EXPECT_FALSE(r.body["headers"].contains("authorization"));
}

TEST_F(KubeClientHttpsTest, FromKubeconfigWithFilesAndDnsName) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/pki/ca.crt", Certs().Pem("ca.crt"));
  WriteFile(dir + "/token", "file-token\n");
  WriteFile(dir + "/config", Kubeconfig("    server: " + server->url("localhost") +
                                            "\n    certificate-authority: pki/ca.crt\n",
                                        "    tokenFile: token\n"));
  KubeConfig config;
  Status s = LoadConfig(dir + "/config", &config);
  ASSERT_TRUE(s.ok()) << s.message();
  auto client = Client(config);
  Response r;
  s = client->Get("/echo", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.body["headers"]["authorization"], "Bearer file-token");
  std::filesystem::remove_all(dir);
}

TEST_F(KubeClientHttpsTest, ServerVerification) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  Response r;

  // Signed by another CA: a clear error.
  KubeConfig wrong = Config(server);
  wrong.ca_data = Certs().Pem("wrong-ca.crt");
  Status s = Client(wrong)->Get("/echo", &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("certificate verify failed"));
  EXPECT_THAT(s.message(), HasSubstr(server->url()));

  // The system trust store does not know the test CA either.
  KubeConfig system_store = Config(server);
  system_store.ca_data.clear();
  EXPECT_FALSE(Client(system_store)->Get("/echo", &r).ok());

  // insecure-skip-tls-verify accepts anything.
  wrong.insecure_skip_tls_verify = true;
  s = Client(wrong)->Get("/echo", &r);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200);

  // A certificate for other names is refused for 127.0.0.1.
  ServerProcess* wrong_host = Server("wrong-host");
  ASSERT_NE(wrong_host, nullptr);
  s = Client(Config(wrong_host))->Get("/echo", &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("not valid for host 127.0.0.1"));
}

// A single-stack IPv6 cluster: the operator's pod sees
// KUBERNETES_SERVICE_HOST=fd00::1 (here ::1), the in-cluster config makes
// https://[::1]:PORT of it, and the client reaches that server, checks its
// certificate against the address, and sends its requests and watches.
TEST_F(KubeClientHttpsTest, InClusterOnAnIpv6Service) {
  ServerProcess* server = Server("v6");
  ASSERT_NE(server, nullptr);
  const std::string sa = MakeTempDir();
  WriteFile(sa + "/token", "sa-token\n");
  WriteFile(sa + "/ca.crt", Certs().Pem("ca.crt"));
  KubeConfig config;
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "::1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", std::to_string(server->port()).c_str());
    Status s = internal::LoadInClusterConfigFrom(sa, &config);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  std::filesystem::remove_all(sa);
  EXPECT_EQ(config.server, server->url("::1"));
  auto client = Client(config);
  ASSERT_NE(client, nullptr);

  Response r;
  Status s = client->Get("/echo/api/v1/namespaces/jobs/pods", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(r.code, 200) << r.Describe();
  EXPECT_EQ(r.body["path"], "/echo/api/v1/namespaces/jobs/pods");
  EXPECT_EQ(r.body["headers"]["authorization"], "Bearer sa-token");
  s = client->Post("/echo/create", {{"kind", "Pod"}}, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.body["method"], "POST");

  std::vector<WatchEvent> events;
  std::atomic<bool> stop{false};
  s = client->Watch(
      "/watch/echo", "",
      [&](const WatchEvent& e) {
        events.push_back(e);
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].object["headers"]["authorization"], "Bearer sa-token");

  // The certificate is still checked, against the IPv6 address.
  ServerProcess* wrong_host = Server("wrong-host-v6");
  ASSERT_NE(wrong_host, nullptr);
  KubeConfig wrong = config;
  wrong.server = wrong_host->url("::1");
  s = Client(wrong)->Get("/echo", &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("not valid for host ::1"));
  EXPECT_THAT(s.message(), HasSubstr(wrong.server)) << "the server as configured";
}

TEST_F(KubeClientHttpsTest, ClientCertificate) {
  ServerProcess* server = Server("mtls");
  ASSERT_NE(server, nullptr);
  KubeConfig config = Config(server);
  config.token.clear();
  config.client_cert_data = Certs().Pem("kubeps-test-client.crt");
  config.client_key_data = Certs().Pem("kubeps-test-client.key");
  Response r;
  Status s = Client(config)->Get("/echo", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.body["client_cert"], "kubeps-test-client");

  config.client_cert_data.clear();
  config.client_key_data.clear();
  EXPECT_FALSE(Client(config)->Get("/echo", &r).ok());

  // A key that does not belong to the certificate is caught at Create.
  config.client_cert_data = Certs().Pem("kubeps-test-client.crt");
  config.client_key_data = Certs().Pem("server.key");
  std::unique_ptr<KubeClient> client;
  s = KubeClient::Create(config, &client);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("client-key"));
}

TEST_F(KubeClientHttpsTest, ConnectionRefused) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);  // nobody listens there now
  KubeConfig config;
  config.server = "https://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  Response r;
  Status s = Client(config)->Get("/api", &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(config.server + "/api"));
}

TEST_F(KubeClientHttpsTest, WatchQueryAndHeaders) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  std::vector<WatchEvent> events;
  std::atomic<bool> stop{false};
  Response r;
  Status s = client->Watch(
      "/watch/echo?labelSelector=app%3Dx", "12/3",
      [&](const WatchEvent& e) {
        events.push_back(e);
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "ADDED");
  EXPECT_EQ(events[0].object["path"],
            "/watch/echo?labelSelector=app%3Dx&watch=1&allowWatchBookmarks=true&timeoutSeconds=300"
            "&resourceVersion=12%2F3");
  EXPECT_EQ(events[0].object["headers"]["authorization"], "Bearer secret-token");
  EXPECT_EQ(events[0].object["headers"]["accept"], "application/json");

  events.clear();
  s = client->Watch(
      "/watch/echo", "",
      [&](const WatchEvent& e) {
        events.push_back(e);
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].object["path"],
            "/watch/echo?watch=1&allowWatchBookmarks=true&timeoutSeconds=300");
}

// The first event arrives while the server is still holding the rest: the
// callback itself opens the server's gate.
TEST_F(KubeClientHttpsTest, WatchDeliversEventsAsTheyArrive) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  std::vector<WatchEvent> events;
  std::atomic<bool> stop{false};
  Response r;
  Status s = client->Watch(
      "/watch/gated", "",
      [&](const WatchEvent& e) {
        events.push_back(e);
        if (e.object["n"] == 1) {
          Response released;
          Status rs = client->Get("/release", &released);
          EXPECT_TRUE(rs.ok()) << rs.message();
        }
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, "ADDED");
  EXPECT_EQ(events[1].type, "MODIFIED");
  EXPECT_EQ(events[2].type, "DELETED");
  EXPECT_EQ(events[0].object["released"], false);
  // The server holds the stream open (up to 5 s) until the first event's
  // callback releases it: a client that delivered events only when the
  // stream ended would see the later ones unreleased. (No wall-clock bound:
  // it would fail on a loaded machine, not on a buffering client.)
  EXPECT_EQ(events[1].object["released"], true)
      << "the first event came only after the stream ended";
  EXPECT_EQ(events[2].object["released"], true);
}

TEST_F(KubeClientHttpsTest, WatchLinesSplitAcrossChunks) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  std::vector<WatchEvent> events;
  std::atomic<bool> stop{false};
  Response r;
  Status s = client->Watch(
      "/watch/split", "",
      [&](const WatchEvent& e) {
        events.push_back(e);
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, "ADDED");
  EXPECT_EQ(events[1].type, "MODIFIED");
  EXPECT_EQ(events[2].type, "BOOKMARK");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(events[i].object["n"], i + 1);

  s = client->Watch(
      "/watch/garbage", "", [&](const WatchEvent&) { return true; }, stop, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("not a watch event"));
}

TEST_F(KubeClientHttpsTest, StopAbortsAHangingWatch) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  std::atomic<bool> stop{false};
  Clock::time_point stopped_at;
  std::thread stopper;
  int events = 0;
  Response r;
  Status s = client->Watch(
      "/watch/hang", "",
      [&](const WatchEvent&) {
        ++events;
        stopper = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          stopped_at = Clock::now();
          stop = true;
        });
        return true;
      },
      stop, &r);
  const auto returned_at = Clock::now();
  if (stopper.joinable()) stopper.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(events, 1);
  EXPECT_LT(std::chrono::duration<double>(returned_at - stopped_at).count(), 1.0);

  // on_event returning false ends the watch at once.
  const auto start = Clock::now();
  stop = false;
  s = client->Watch(
      "/watch/hang", "", [&](const WatchEvent&) { return false; }, stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);

  // The client still works afterwards.
  s = client->Get("/echo", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200);
}

TEST_F(KubeClientHttpsTest, WatchHttpErrorAtStart) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  std::atomic<bool> stop{false};
  int events = 0;
  Response r;
  Status s = client->Watch(
      "/watch/gone", "1",
      [&](const WatchEvent&) {
        ++events;
        return true;
      },
      stop, &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 410);
  EXPECT_EQ(events, 0);
  EXPECT_EQ(r.Describe(), "410 Gone: too old resource version: 1 (42)");
}

// 429 Too Many Requests: the request (a write too) is sent again after the
// server's Retry-After, and the caller sees only the answer that came through.
TEST_F(KubeClientHttpsTest, ThrottledRequestWaitsRetryAfterThenRetries) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  Response r;
  const auto start = Clock::now();
  Status s = client->Post("/throttled/2/post?retryAfter=1", nlohmann::json::object(), &r);
  const auto waited = Clock::now() - start;
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200) << r.Describe();
  EXPECT_EQ(r.body["attempts"], 3);
  EXPECT_GE(waited, std::chrono::seconds(2));  // twice Retry-After
  EXPECT_LT(waited, std::chrono::seconds(10));
}

// A 5xx that says when to come back (a starting or overloaded API server
// answers 503 with Retry-After) is retried as client-go does; one without
// Retry-After is the caller's to handle, at once.
TEST_F(KubeClientHttpsTest, ServerErrorWithRetryAfterIsRetriedAndWithoutItIsNot) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  Response r;
  Status s =
      client->Post("/throttled/1/unavailable?retryAfter=1&code=503", nlohmann::json::object(), &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 200) << r.Describe();
  EXPECT_EQ(r.body["attempts"], 2);

  s = client->Get("/throttled/1/broken?code=500", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(r.body["details"]["attempts"], 1);
}

// A server that never lets up: the client gives up after client-go's 10
// retries, each after a pause even when Retry-After says 0, and returns it.
TEST_F(KubeClientHttpsTest, ThrottledWithoutEndGivesUpAfterTenRetriesWithoutSpinning) {
  ServerProcess* server = Server("main");
  ASSERT_NE(server, nullptr);
  auto client = Client(Config(server));
  Response r;
  const auto start = Clock::now();
  Status s = client->Get("/throttled/1000/get?retryAfter=0", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.code, 429);
  EXPECT_EQ(r.retry_after_seconds, 0);
  EXPECT_EQ(r.body["details"]["attempts"], 1 + kMaxThrottledRetries);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(kMaxThrottledRetries * 200));
  EXPECT_EQ(r.Describe(), "429 Too Many Requests: Too many requests, please try again later.");
}

}  // namespace
}  // namespace kubeps::kube
