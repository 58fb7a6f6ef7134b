#include "common/transport_security.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "common/certificate_authority.h"
#include "common/private_file.h"

namespace kubeps {
namespace {

namespace tls = grpc::experimental;

// How often gRPC looks at the files again: a rotated Secret reaches the
// pod's volume within the kubelet's sync period (about a minute) anyway.
constexpr unsigned kRefreshSeconds = 60;

// Refuses a peer whose certificate does not name a replica of this job:
// the chain's signature is checked by gRPC against the job's CA first.
class SameJobVerifier : public tls::ExternalCertificateVerifier {
 public:
  explicit SameJobVerifier(std::string job_uri_prefix) : prefix_(std::move(job_uri_prefix)) {}

  bool Verify(tls::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    std::string named;
    for (const grpc::string_ref& uri : request->uri_names()) {
      const std::string text(uri.data(), uri.size());
      if (JobUriPrefixOf(text) == prefix_) {
        *sync_status = grpc::Status::OK;
        return true;
      }
      named += (named.empty() ? "" : ", ") + text;
    }
    *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                "the peer's certificate names " +
                                    (named.empty() ? std::string("no kubeps replica") : named) +
                                    ", not a replica of " + prefix_);
    return true;
  }

  void Cancel(tls::TlsCustomVerificationCheckRequest* /*request*/) override {}

 private:
  const std::string prefix_;
};

Status ReadPem(const std::string& path, std::string* text) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (!in) return Status::InvalidArgument("TLS file " + path + ": cannot read it");
  *text = buffer.str();
  return Status::Ok();
}

}  // namespace

TransportSecurity::TransportSecurity(std::string dir, std::string job_uri_prefix)
    : dir_(std::move(dir)), job_uri_prefix_(std::move(job_uri_prefix)) {
  if (dir_.empty()) return;
  provider_ = std::make_shared<tls::FileWatcherCertificateProvider>(
      dir_ + "/" + kKeyFile, dir_ + "/" + kCertificateFile, dir_ + "/" + kCaFile, kRefreshSeconds);
  verifier_ = tls::ExternalCertificateVerifier::Create<SameJobVerifier>(job_uri_prefix_);
}

std::shared_ptr<const TransportSecurity> TransportSecurity::Insecure() {
  static const std::shared_ptr<const TransportSecurity> insecure(new TransportSecurity("", ""));
  return insecure;
}

Status TransportSecurity::FromDirectory(const std::string& dir,
                                        std::shared_ptr<const TransportSecurity>* out) {
  // Read here once so that a missing or wrong file is an error at start,
  // naming it, not a handshake that fails with a log line at every call.
  std::string ca, certificate, key;
  if (Status s = ReadPem(dir + "/" + kCaFile, &ca); !s.ok()) return s;
  if (Status s = ReadPem(dir + "/" + kCertificateFile, &certificate); !s.ok()) return s;
  if (Status s = ReadPrivateFile(dir + "/" + kKeyFile, "TLS key", "this replica's private key",
                                 64 << 10, &key);
      !s.ok())
    return s;
  std::vector<std::string> uris;
  if (Status s = CertificateUris(certificate, &uris); !s.ok())
    return Status::InvalidArgument("TLS certificate " + dir + "/" + kCertificateFile + ": " +
                                   s.message());
  for (const std::string& uri : uris) {
    const std::string job = JobUriPrefixOf(uri);
    if (job.empty()) continue;
    out->reset(new TransportSecurity(dir, job));
    return Status::Ok();
  }
  return Status::InvalidArgument("TLS certificate " + dir + "/" + kCertificateFile +
                                 ": names no kubeps replica (a URI " + JobUriPrefix("NS", "JOB") +
                                 "ROLE/INDEX)");
}

std::shared_ptr<grpc::ChannelCredentials> TransportSecurity::ChannelCredentials() const {
  if (!tls()) return grpc::InsecureChannelCredentials();
  tls::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider_);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_check_call_host(false);
  options.set_certificate_verifier(verifier_);
  return grpc::experimental::TlsCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> TransportSecurity::ServerCredentials() const {
  if (!tls()) return grpc::InsecureServerCredentials();
  tls::TlsServerCredentialsOptions options(provider_);
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.set_certificate_verifier(verifier_);
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace kubeps
