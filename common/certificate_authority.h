// A certificate authority of one training job, for mutual TLS between its
// pods (common/transport_security.h): the operator makes one CA per job and
// issues every replica a certificate whose URI SAN names the job, the role
// and the index, so that a peer can be checked to belong to the same job.
//
// Everything is returned as PEM text, ready for a Kubernetes TLS Secret
// (ca.crt, tls.crt, tls.key): certificates as "BEGIN CERTIFICATE", private
// keys unencrypted in PKCS#8 ("BEGIN PRIVATE KEY"). Keys are ECDSA P-256,
// signatures ECDSA with SHA-256. Validity starts five minutes in the past,
// for clock skew between nodes, and a replica's certificate never outlives
// its CA. Nothing is kept between calls: rotating a CA or a certificate is
// the caller's business (issue a new one before the old one ends).
//
// Stateless: safe to call from any thread (OpenSSL 3's error queue is per
// thread, and each call clears what it leaves there).
#ifndef KUBEPS_COMMON_CERTIFICATE_AUTHORITY_H_
#define KUBEPS_COMMON_CERTIFICATE_AUTHORITY_H_

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubeps {

// PEM text of a certificate and its private key.
struct CertificateAndKey {
  std::string certificate_pem;
  std::string private_key_pem;
};

// What a replica's certificate names: its job (namespace and name), its role
// ("scheduler", "server", "worker") and its index.
struct ReplicaIdentity {
  std::string namespace_;
  std::string job;
  std::string role;
  int index = 0;
};

// The URI SAN that names a replica: "spiffe://kubeps.io/ns/<namespace>/job/<job>/<role>/<index>".
std::string ReplicaUri(const ReplicaIdentity& id);
// The job part every replica's URI starts with: "spiffe://kubeps.io/ns/<namespace>/job/<job>/".
std::string JobUriPrefix(const std::string& namespace_, const std::string& job);
// The job part of a replica's URI ("spiffe://kubeps.io/ns/N/job/J/R/I" gives
// JobUriPrefix(N, J)); "" for a URI that names no kubeps replica.
std::string JobUriPrefixOf(const std::string& uri);

// A new self-signed CA for one job: ECDSA P-256 key, X.509 v3, basicConstraints
// CA:TRUE pathlen 0 (critical), keyUsage keyCertSign+cRLSign (critical), subject
// CN "kubeps <namespace>/<job> CA", random 128-bit serial, notBefore = now - 5 min
// (clock skew between nodes), notAfter = now + validity.
// The CN is cut at X.509's 64 characters; the URIs carry the full names.
// InvalidArgument for an empty name, a name with a character outside RFC
// 3986's unreserved ones (letters, digits, "-._~": those of every Kubernetes
// name, so a URI needs no escaping) or a validity that is not positive.
Status CreateJobCa(const std::string& namespace_, const std::string& job,
                   std::chrono::seconds validity, CertificateAndKey* ca);

// A certificate for one replica signed by `ca`: fresh P-256 key, CN
// "<job>-<role>-<index>", SANs: the URI above plus every entry of `dns_names`
// (the replica's stable DNS names), basicConstraints CA:FALSE (critical), keyUsage
// digitalSignature (critical), extendedKeyUsage serverAuth+clientAuth (every
// replica is both a server and a client), authority/subject key identifiers,
// the same notBefore rule, notAfter = now + validity but never after the CA's.
// InvalidArgument when `ca` does not parse, its key is not its certificate's,
// it is not a CA, or an identity field or DNS name is unusable;
// FailedPrecondition when the CA has expired.
Status IssueReplicaCertificate(const CertificateAndKey& ca, const ReplicaIdentity& id,
                               const std::vector<std::string>& dns_names,
                               std::chrono::seconds validity, CertificateAndKey* out);

// The URI SANs of a PEM certificate (the first certificate in the text), in
// the certificate's order; none when it has no subjectAltName. InvalidArgument
// when the text holds no certificate that parses.
Status CertificateUris(const std::string& certificate_pem, std::vector<std::string>* uris);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_CERTIFICATE_AUTHORITY_H_
