// How the processes of one job reach each other: plain TCP, where the job's
// token is the only check, or mutual TLS with the job's own certificates.
//
// With TLS every replica holds a certificate signed by its job's CA
// (common/certificate_authority.h) whose URI names the job, the role and the
// index. Both ends of every connection present one, and both refuse a peer
// whose certificate is not signed by the job's CA or does not name the same
// job: a pod of another job (another CA), a client with the token but no
// certificate, or a certificate of another job under a CA shared between
// jobs (cert-manager's ClusterIssuer) are all refused at the handshake.
// Host names are not checked: replicas reach each other by pod IP, which no
// certificate can know when it is issued; the job check stands in for it.
//
// The three files are a Kubernetes TLS Secret's keys: ca.crt, tls.crt and
// tls.key in one directory. gRPC reads them again every minute, so a Secret
// rotated in place (the kubelet swaps the files atomically) is picked up by
// new connections without a restart.
//
//   std::shared_ptr<const TransportSecurity> security;
//   if (Status s = TransportSecurity::FromDirectory(dir, &security); !s.ok()) ...
//   builder.AddListeningPort(address, security->ServerCredentials());
//
// Immutable after creation: safe to share between threads.
#ifndef KUBEPS_COMMON_TRANSPORT_SECURITY_H_
#define KUBEPS_COMMON_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>

#include "common/status.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
namespace experimental {
class CertificateProviderInterface;
class CertificateVerifier;
}  // namespace experimental
}  // namespace grpc

namespace kubeps {

class TransportSecurity {
 public:
  // The file names inside a TLS directory (a kubernetes.io/tls Secret's keys).
  static constexpr const char* kCaFile = "ca.crt";
  static constexpr const char* kCertificateFile = "tls.crt";
  static constexpr const char* kKeyFile = "tls.key";
  // The name clients send in the TLS handshake (SNI), which every replica's
  // certificate carries. Replicas are reached by IP, which names no
  // certificate; a fixed name keeps the server from looking for one.
  static constexpr const char* kServerName = "replica.kubeps.invalid";

  // Plain TCP.
  static std::shared_ptr<const TransportSecurity> Insecure();
  // Mutual TLS with the files in `dir`. Reads this replica's certificate once
  // to learn its job; an error names the file and what is wrong with it.
  static Status FromDirectory(const std::string& dir,
                              std::shared_ptr<const TransportSecurity>* out);

  bool tls() const { return !dir_.empty(); }
  // "spiffe://kubeps.io/ns/<namespace>/job/<job>/": what a peer's
  // certificate must start with. Empty without TLS.
  const std::string& job_uri_prefix() const { return job_uri_prefix_; }

  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;

 private:
  TransportSecurity(std::string dir, std::string job_uri_prefix);

  const std::string dir_;
  const std::string job_uri_prefix_;
  // One of each per process, whatever the number of channels: the provider
  // holds the thread that reads the files again.
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::shared_ptr<grpc::experimental::CertificateVerifier> verifier_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_TRANSPORT_SECURITY_H_
