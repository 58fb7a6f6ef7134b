#include "operator/kube/cert_manager_objects.h"

#include "common/certificate_authority.h"
#include "common/transport_security.h"
#include "operator/controller/replica_tls.h"
#include "operator/kube/tls_secrets.h"

namespace kubeps::kube {
namespace {

using nlohmann::json;

constexpr const char* kGroup = "cert-manager.io";
constexpr const char* kApiVersion = "cert-manager.io/v1";
// X.509 and cert-manager's webhook hold a common name to 64 characters; the
// URI SAN carries the full names.
constexpr size_t kMaxCommonName = 64;

std::string SelfSignedIssuerName(const JobIdentity& job) { return job.name + "-tls-selfsigned"; }

json IssuerRef(const std::string& name) {
  return {{"name", name}, {"kind", "Issuer"}, {"group", kGroup}};
}

json Object(const JobIdentity& job, const char* kind, const std::string& name, json spec) {
  return {{"apiVersion", kApiVersion},
          {"kind", kind},
          {"metadata", OwnedMetadata(job, name)},
          {"spec", std::move(spec)}};
}

// The Secret cert-manager writes carries the job's label, as every object
// of the job does, so `kubectl get secrets -l kubeps.io/job-name=JOB` finds it.
json SecretTemplate(const JobIdentity& job) { return {{"labels", JobLabels(job)}}; }

const json* Condition(const json& certificate, const char* type) {
  // Written by another controller: read with care, never trusted to be well formed.
  if (!certificate.is_object() || !certificate.contains("status")) return nullptr;
  const json& status = certificate["status"];
  if (!status.is_object() || !status.contains("conditions") || !status["conditions"].is_array())
    return nullptr;
  for (const json& condition : status["conditions"]) {
    if (condition.is_object() && condition.value("type", "") == type) return &condition;
  }
  return nullptr;
}

}  // namespace

bool ServesCertificatesAndIssuers(const json& resource_list) {
  bool certificates = false, issuers = false;
  for (const json& resource : resource_list.value("resources", json::array())) {
    const std::string name = resource.value("name", "");
    certificates |= name == kCertificates.plural;
    issuers |= name == kIssuers.plural;
  }
  return certificates && issuers;
}

std::vector<CertManagerObject> BuildCertManagerObjects(const JobIdentity& job,
                                                       const api::TrainingJob& spec) {
  const std::string certificates = CollectionPath(kCertificates, job.namespace_);
  const std::string issuers = CollectionPath(kIssuers, job.namespace_);
  std::vector<CertManagerObject> objects;
  objects.push_back({issuers, Object(job, "Issuer", SelfSignedIssuerName(job),
                                     {{"selfSigned", json::object()}})});
  // The CA keeps its key when it is renewed (rotationPolicy Never), so the
  // replicas' certificates it signed stay valid across its renewal.
  objects.push_back(
      {certificates,
       Object(job, "Certificate", CertManagerCaName(job),
              {{"isCA", true},
               {"commonName",
                ("kubeps " + job.namespace_ + "/" + job.name + " CA").substr(0, kMaxCommonName)},
               {"secretName", CertManagerCaName(job)},
               {"secretTemplate", SecretTemplate(job)},
               {"duration", std::to_string(controller::kTlsValidity.count() / 3600) + "h"},
               {"privateKey", {{"algorithm", "ECDSA"}, {"size", 256}, {"rotationPolicy", "Never"}}},
               {"usages", {"digital signature", "cert sign", "crl sign"}},
               {"issuerRef", IssuerRef(SelfSignedIssuerName(job))}})});
  objects.push_back({issuers, Object(job, "Issuer", CaSecretName(job),
                                     {{"ca", {{"secretName", CertManagerCaName(job)}}}})});
  for (const controller::ReplicaName& name : controller::AllReplicas(spec)) {
    const std::string secret = ReplicaTlsSecretName(job, name);
    ReplicaIdentity identity{job.namespace_, job.name, controller::ToString(name.role), name.index};
    std::vector<std::string> dns_names = ReplicaDnsNames(job, name);
    dns_names.push_back(TransportSecurity::kServerName);
    // cert-manager's defaults for duration and renewal (90 days, renewed a
    // third before): a new key each time, which the replicas' gRPC reads
    // from their volume within a minute, without a restart.
    objects.push_back(
        {certificates,
         Object(
             job, "Certificate", secret,
             {{"secretName", secret},
              {"secretTemplate", SecretTemplate(job)},
              {"commonName", ReplicaHostname(job, name).substr(0, kMaxCommonName)},
              {"uris", {ReplicaUri(identity)}},
              {"dnsNames", dns_names},
              {"usages", {"digital signature", "server auth", "client auth"}},
              {"privateKey", {{"algorithm", "ECDSA"}, {"size", 256}, {"rotationPolicy", "Always"}}},
              {"issuerRef", IssuerRef(CaSecretName(job))}})});
  }
  return objects;
}

std::string CertificateNotReadyMessage(const json& certificate) {
  auto message_of = [](const json* condition) -> std::string {
    if (condition == nullptr) return "";
    const auto message = condition->find("message");
    return message != condition->end() && message->is_string() ? message->get<std::string>() : "";
  };
  // A failed request (denied, refused by the issuer) is said in Issuing
  // (False, reason Failed); Ready then still says only that the Secret is
  // missing.
  const json* issuing = Condition(certificate, "Issuing");
  if (issuing != nullptr && issuing->value("status", "") == "False" && !message_of(issuing).empty())
    return message_of(issuing);
  const json* ready = Condition(certificate, "Ready");
  if (ready == nullptr || ready->value("status", "") == "True") return "";
  return message_of(ready);
}

std::string CertManagerCaName(const JobIdentity& job) { return job.name + "-tls-cm-ca"; }

json SecretOwnerReference(const JobIdentity& job) {
  json reference = OwnerReference(job);
  reference["controller"] = false;
  return reference;
}

bool SecretOwnedThroughJob(const json& secret, const JobIdentity& job,
                           const std::string& certificate_uid) {
  for (const json& ref : secret["metadata"].value("ownerReferences", json::array())) {
    const std::string uid = ref.value("uid", "");
    if (uid == job.uid || (!certificate_uid.empty() && uid == certificate_uid)) return true;
  }
  return false;
}

bool SecretOfAnotherJob(const json& secret, const JobIdentity& job,
                        const std::string& certificate_uid) {
  for (const json& ref : secret["metadata"].value("ownerReferences", json::array())) {
    const std::string kind = ref.value("kind", ""), uid = ref.value("uid", "");
    if ((kind == api::kKind || kind == "Certificate") && uid != job.uid && uid != certificate_uid)
      return true;
  }
  return false;
}

}  // namespace kubeps::kube
