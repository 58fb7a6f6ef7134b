#include "operator/kube/tls_secrets.h"

#include <cpprest/asyncrt_utils.h>

#include <vector>

#include "common/transport_security.h"
#include "operator/controller/replica_tls.h"

namespace kubeps::kube {
namespace {

using nlohmann::json;

constexpr const char* kCaCertificateKey = "ca.crt";
constexpr const char* kCaKeyKey = "ca.key";

}  // namespace

std::string CaSecretName(const JobIdentity& job) { return job.name + "-tls-ca"; }

json BuildCaSecret(const JobIdentity& job, const CertificateAndKey& ca) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"type", "Opaque"},
      {"metadata", OwnedMetadata(job, CaSecretName(job))},
      {"stringData", {{kCaCertificateKey, ca.certificate_pem}, {kCaKeyKey, ca.private_key_pem}}}};
}

Status CaFromSecret(const json& secret, CertificateAndKey* ca) {
  if (!SecretData(secret, kCaCertificateKey, &ca->certificate_pem) ||
      !SecretData(secret, kCaKeyKey, &ca->private_key_pem)) {
    return Status::InvalidArgument("Secret " + secret["metadata"].value("name", "") + " has no " +
                                   kCaCertificateKey + " and " + kCaKeyKey);
  }
  return Status::Ok();
}

bool CarriesCa(const json& replica_secret, const std::string& ca_pem) {
  auto trimmed = [](const std::string& pem) {
    const size_t end = pem.find_last_not_of(" \n\r\t");
    return end == std::string::npos ? std::string() : pem.substr(0, end + 1);
  };
  std::string pem;
  return SecretData(replica_secret, TransportSecurity::kCaFile, &pem) &&
         trimmed(pem) == trimmed(ca_pem);
}

std::vector<std::string> ReplicaDnsNames(const JobIdentity& job,
                                         const controller::ReplicaName& name) {
  const std::string host = ReplicaHostname(job, name);
  const std::string service = host + "." + job.name + "." + job.namespace_ + ".svc";
  return {host, service, service + ".cluster.local"};
}

Status BuildReplicaTlsSecret(const JobIdentity& job, const api::TrainingJob& spec,
                             const CertificateAndKey& ca, const controller::ReplicaName& name,
                             json* secret) {
  CertificateAndKey replica;
  if (Status s = controller::IssueFor(ca, spec, name, ReplicaDnsNames(job, name), &replica);
      !s.ok())
    return s;
  *secret = {{"apiVersion", "v1"},
             {"kind", "Secret"},
             {"type", "kubernetes.io/tls"},
             {"metadata", OwnedMetadata(job, ReplicaTlsSecretName(job, name))},
             {"stringData",
              {{TransportSecurity::kCaFile, ca.certificate_pem},
               {TransportSecurity::kCertificateFile, replica.certificate_pem},
               {TransportSecurity::kKeyFile, replica.private_key_pem}}}};
  return Status::Ok();
}

bool SecretData(const json& secret, const char* key, std::string* out) {
  const json data = secret.value("data", json::object());
  if (!data.contains(key) || !data[key].is_string()) return false;
  try {
    std::vector<unsigned char> bytes =
        utility::conversions::from_base64(data[key].get<std::string>());
    out->assign(bytes.begin(), bytes.end());
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace kubeps::kube
