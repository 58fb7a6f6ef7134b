// Mutual TLS between a job's processes (common/transport_security.h),
// against the real scheduler service: who gets in and who is refused.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/certificate_authority.h"
#include "common/metrics.h"
#include "common/resend.h"
#include "common/transport_security.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/scheduler_service.h"

namespace kubeps {
namespace {

using namespace std::chrono_literals;
constexpr std::chrono::seconds kYear{365 * 24 * 3600};
const char* kToken = "job-token";

// A folder holding ca.crt, tls.crt and tls.key as a TLS Secret would.
class TlsFolder {
 public:
  TlsFolder(const std::string& root, const std::string& name, const std::string& ca_pem,
            const CertificateAndKey& replica)
      : dir_(root + "/" + name) {
    std::filesystem::create_directories(dir_);
    Write(TransportSecurity::kCaFile, ca_pem, 0644);
    Write(TransportSecurity::kCertificateFile, replica.certificate_pem, 0644);
    Write(TransportSecurity::kKeyFile, replica.private_key_pem, 0600);
  }
  const std::string& dir() const { return dir_; }
  void Write(const char* file, const std::string& text, mode_t mode) const {
    const std::string path = dir_ + "/" + file;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
  }

 private:
  std::string dir_;
};

CertificateAndKey Issue(const CertificateAndKey& ca, const std::string& job,
                        const std::string& role) {
  CertificateAndKey out;
  Status s = IssueReplicaCertificate(ca, {"team-a", job, role, 0}, {TransportSecurity::kServerName},
                                     kYear, &out);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

std::shared_ptr<const TransportSecurity> Security(const TlsFolder& folder) {
  std::shared_ptr<const TransportSecurity> security;
  Status s = TransportSecurity::FromDirectory(folder.dir(), &security);
  EXPECT_TRUE(s.ok()) << s.message();
  return security;
}

class MutualTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kubeps-tls-XXXXXX";
    root_ = ::mkdtemp(pattern);
    ASSERT_TRUE(CreateJobCa("team-a", "mnist", kYear, &ca_).ok());
    ASSERT_TRUE(CreateJobCa("team-a", "other", kYear, &other_ca_).ok());
    scheduler_dir_ = std::make_unique<TlsFolder>(root_, "scheduler", ca_.certificate_pem,
                                                 Issue(ca_, "mnist", "scheduler"));
    SchedulerOptions options;
    options.num_servers = 1;
    options.num_workers = 1;
    options.token = JobToken::Fixed(kToken);
    service_ = std::make_unique<SchedulerService>(options, &NullMetrics());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", Security(*scheduler_dir_)->ServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + 1s);
    std::filesystem::remove_all(root_);
  }

  // One Register through `security` (null: plain TCP), with the token.
  grpc::Status Register(const TransportSecurity* security) {
    return Register(OpenChannel(address_, security));
  }
  grpc::Status Register(std::shared_ptr<grpc::Channel> channel) {
    auto stub = v1::Scheduler::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 5s);
    context.AddMetadata(kTokenMetadataKey, kToken);
    v1::RegisterRequest request;
    request.mutable_node()->set_node_id("worker-0");
    request.mutable_node()->set_role(v1::WORKER);
    v1::RegisterResponse response;
    return stub->Register(&context, request, &response);
  }

  std::string root_;
  CertificateAndKey ca_, other_ca_;
  std::unique_ptr<TlsFolder> scheduler_dir_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(MutualTlsTest, AReplicaOfTheJobWithTheTokenGetsIn) {
  TlsFolder worker(root_, "worker", ca_.certificate_pem, Issue(ca_, "mnist", "worker"));
  grpc::Status status = Register(Security(worker).get());
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// A handshake the server refuses never reaches a handler: the client sees
// the connection fail (UNAVAILABLE), never an answer.
TEST_F(MutualTlsTest, TheTokenWithoutACertificateIsRefused) {
  grpc::Status status = Register(nullptr);  // plain TCP to a TLS port
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MutualTlsTest, ATlsClientWithoutACertificateIsRefused) {
  // It trusts the job's CA (the server's certificate verifies) but has no
  // certificate of its own to show.
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca_.certificate_pem;
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride(TransportSecurity::kServerName);
  grpc::Status status =
      Register(grpc::CreateCustomChannel(address_, grpc::SslCredentials(options), args));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MutualTlsTest, AClientWithAnotherCasCertificateIsRefused) {
  // TLS that trusts the job's CA, but presents another job's certificate:
  // the server does not know its CA.
  TlsFolder stranger(root_, "stranger", ca_.certificate_pem, Issue(other_ca_, "other", "worker"));
  std::shared_ptr<const TransportSecurity> security;
  ASSERT_TRUE(TransportSecurity::FromDirectory(stranger.dir(), &security).ok());
  grpc::Status status = Register(security.get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MutualTlsTest, AnotherJobsCertificateIsRefusedAndItsClientRefusesTheServer) {
  // Another job's replica, all of its own: it does not trust this job's
  // CA either, so neither end accepts the other.
  TlsFolder other(root_, "other", other_ca_.certificate_pem, Issue(other_ca_, "other", "worker"));
  grpc::Status status = Register(Security(other).get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MutualTlsTest, AnotherJobsCertificateUnderTheSameCaIsRefused) {
  // A CA shared between jobs (a cluster-wide issuer): the chain verifies,
  // the certificate's URI names job "other", and the server refuses it.
  TlsFolder other(root_, "shared", ca_.certificate_pem, Issue(ca_, "other", "worker"));
  grpc::Status status = Register(Security(other).get());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MutualTlsTest, TheCertificateWithoutTheTokenIsStillUnauthenticated) {
  TlsFolder worker(root_, "worker", ca_.certificate_pem, Issue(ca_, "mnist", "worker"));
  auto stub = v1::Scheduler::NewStub(OpenChannel(address_, Security(worker).get()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 5s);
  v1::RegisterRequest request;
  request.mutable_node()->set_node_id("worker-0");
  v1::RegisterResponse response;
  grpc::Status status = stub->Register(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
}

TEST_F(MutualTlsTest, ABadTlsFolderIsAnErrorNamingTheFile) {
  TlsFolder worker(root_, "worker", ca_.certificate_pem, Issue(ca_, "mnist", "worker"));
  std::shared_ptr<const TransportSecurity> security;
  worker.Write(TransportSecurity::kKeyFile, Issue(ca_, "mnist", "worker").private_key_pem, 0644);
  Status s = TransportSecurity::FromDirectory(worker.dir(), &security);
  EXPECT_EQ(s.message(), "TLS key " + worker.dir() +
                             "/tls.key: mode 0644 lets other users read or change this "
                             "replica's private key; make it 0600 or 0400 (a Secret volume: "
                             "defaultMode 0400)");
  worker.Write(TransportSecurity::kKeyFile, "", 0600);
  worker.Write(TransportSecurity::kCertificateFile, "not a certificate", 0644);
  s = TransportSecurity::FromDirectory(worker.dir(), &security);
  EXPECT_NE(s.message().find("TLS certificate " + worker.dir() + "/tls.crt: "), std::string::npos)
      << s.message();
  std::filesystem::remove(worker.dir() + "/ca.crt");
  s = TransportSecurity::FromDirectory(worker.dir(), &security);
  EXPECT_EQ(s.message(), "TLS file " + worker.dir() + "/ca.crt: cannot read it");
}

}  // namespace
}  // namespace kubeps
