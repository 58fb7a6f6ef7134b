// The Secrets of a job with mutual TLS (spec.security.tls): "<job>-tls-ca"
// holds the job's CA, certificate and key (only the operator reads it: no
// pod mounts it), and each replica's "<hostname>-tls" is a kubernetes.io/tls
// Secret with ca.crt, tls.crt and tls.key, mounted into that replica's pod
// only, so a pod holds no key but its own.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBE_TLS_SECRETS_H_
#define KUBEPS_OPERATOR_KUBE_TLS_SECRETS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/certificate_authority.h"
#include "common/status.h"
#include "operator/kube/pod_builder.h"

namespace kubeps::kube {

std::string CaSecretName(const JobIdentity& job);

nlohmann::json BuildCaSecret(const JobIdentity& job, const CertificateAndKey& ca);
// The CA back from its Secret as the API server returns it (base64 data).
Status CaFromSecret(const nlohmann::json& secret, CertificateAndKey* ca);

// Whether a replica's Secret (as the API server returns it) carries the CA
// certificate `ca_pem` as its ca.crt (whatever whitespace ends either text):
// one that does not was issued by a CA the job no longer has.
bool CarriesCa(const nlohmann::json& replica_secret, const std::string& ca_pem);
// The decoded value of `key` in a Secret as the API server returns it
// (base64 data); false when it has none.
bool SecretData(const nlohmann::json& secret, const char* key, std::string* out);

// The DNS names a replica's certificate carries: its hostname and its names
// under the job's headless Service (it is reached by pod IP, so no peer
// checks them; they say which replica it is to a person reading it).
std::vector<std::string> ReplicaDnsNames(const JobIdentity& job,
                                         const controller::ReplicaName& name);

// Replica `name`'s Secret, with a new certificate from `ca` naming the
// replica and carrying its DNS names under the job's headless Service.
Status BuildReplicaTlsSecret(const JobIdentity& job, const api::TrainingJob& spec,
                             const CertificateAndKey& ca, const controller::ReplicaName& name,
                             nlohmann::json* secret);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_TLS_SECRETS_H_
