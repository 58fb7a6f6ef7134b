// The mutual TLS half of JobReconciler (job_reconciler.h): whether a job has
// TLS and who issues its certificates, decided once and recorded on its
// token Secret; then the operator's own CA and certificates
// (tls_secrets.h), or cert-manager's Issuers and Certificates
// (cert_manager_objects.h) and the Secrets cert-manager writes from them.
#include <optional>
#include <string>

#include "common/logging.h"
#include "common/transport_security.h"
#include "operator/controller/replica_tls.h"
#include "operator/kube/cert_manager_objects.h"
#include "operator/kube/job_reconciler.h"
#include "operator/kube/tls_secrets.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;

namespace {

// A job's TLS decision as its token Secret records it; `found` is false
// while the Secret does not exist (a 404: nothing else means "not yet").
struct RecordedTls {
  bool found = false;
  std::optional<bool> tls;
  std::string issuer;
};

Status ReadRecordedTls(KubeClient* client, const JobIdentity& id, RecordedTls* recorded) {
  Response secret;
  if (Status s = client->Get(ObjectPath(kSecrets, id.namespace_, TokenSecretName(id)), &secret);
      !s.ok())
    return s;
  // A job deciding again on a refused or failed read could switch CA halfway.
  if (!secret.ok() && secret.code != 404)
    return Status::Unavailable("reading the job's token Secret: " + secret.Describe());
  if (!secret.ok() || !OwnedBy(secret.body, id)) return Status::Ok();
  const json annotations = secret.body["metadata"].value("annotations", json::object());
  recorded->found = true;
  if (annotations.contains(kTlsAnnotation))
    recorded->tls = annotations.value(kTlsAnnotation, "") == "Enabled";
  // A job made before the operator could choose had the operator's CA.
  recorded->issuer = annotations.value(kTlsIssuerAnnotation, kOperatorIssuer);
  return Status::Ok();
}

// Deletes the Secret at `path`, one already gone included.
Status DeleteSecret(KubeClient* client, const std::string& path, const std::string& why) {
  Response deleted;
  if (Status s = client->Delete(path, &deleted); !s.ok()) return s;
  if (!deleted.ok() && deleted.code != 404)
    return Status::Error("deleting Secret " + path.substr(path.rfind('/') + 1) + " (" + why +
                         "): " + deleted.Describe());
  return Status::Ok();
}

}  // namespace

Status JobReconciler::ResolveTls(const JobIdentity& id, api::TrainingJob* spec, JobState* state) {
  if (!state->tls) {
    RecordedTls recorded;
    if (Status s = ReadRecordedTls(client_, id, &recorded); !s.ok()) return s;
    state->tls = recorded.tls.value_or(options_.tls_by_default);
    state->tls_issuer = recorded.issuer;
  }
  if (spec->spec.tls.empty()) spec->spec.tls = *state->tls ? "Enabled" : "Disabled";
  if (spec->spec.TlsEnabled(false) && state->tls_issuer.empty()) {
    bool cert_manager = options_.tls_issuer == TlsIssuerChoice::kCertManager;
    if (options_.tls_issuer == TlsIssuerChoice::kAuto) {
      if (Status s = ServesCertManager(&cert_manager); !s.ok()) return s;
    }
    state->tls_issuer = cert_manager ? kCertManagerIssuer : kOperatorIssuer;
  }
  return Status::Ok();
}

Status JobReconciler::ServesCertManager(bool* served) {
  Response resources;
  if (Status s = client_->Get(GroupVersionPath(kCertificates), &resources); !s.ok()) return s;
  // 403: a cluster that hides its APIs from the operator; it cannot use
  // what it cannot see.
  if (!resources.ok() && resources.code != 404 && resources.code != 403)
    return Status::Unavailable("asking whether the cluster serves cert-manager: " +
                               resources.Describe());
  *served = resources.ok() && ServesCertificatesAndIssuers(resources.body);
  return Status::Ok();
}

Status JobReconciler::CheckRecordedTls(const JobIdentity& id, const api::TrainingJob& spec,
                                       JobState* state) {
  RecordedTls recorded;
  if (Status s = ReadRecordedTls(client_, id, &recorded); !s.ok()) return s;
  if (!recorded.found) return Status::Ok();  // looked at next time
  const bool tls = recorded.tls.value_or(false);
  if (tls == spec.spec.TlsEnabled(false) && (!tls || recorded.issuer == state->tls_issuer))
    return Status::Ok();
  state->tls.reset();
  state->tls_issuer.clear();
  return Status::Unavailable(
      "the job's token Secret records another TLS decision than this operator made (another "
      "replica made it first): reading it again");
}

Status JobReconciler::EnsureTls(const JobIdentity& id, const api::TrainingJob& spec,
                                JobState* state, std::string* over_quota, std::string* pending) {
  if (!spec.spec.TlsEnabled(false)) return Status::Ok();
  if (state->tls_issuer == kCertManagerIssuer)
    return EnsureIssuedCertificates(id, spec, state, over_quota, pending);
  return EnsureTlsSecrets(id, spec, over_quota);
}

Status JobReconciler::EnsureTlsSecrets(const JobIdentity& id, const api::TrainingJob& spec,
                                       std::string* over_quota) {
  const std::string secrets = CollectionPath(kSecrets, id.namespace_);
  Response existing;
  if (Status s = client_->Get(secrets + "/" + CaSecretName(id), &existing); !s.ok()) return s;
  if (!existing.ok()) {
    CertificateAndKey made;
    if (Status s = controller::CreateCaFor(spec, &made); !s.ok()) return s;
    if (Status s = EnsureObject(id, secrets, BuildCaSecret(id, made), over_quota); !s.ok())
      return s;
    // Read back: where another writer made it first, its CA is the job's.
    if (Status s = client_->Get(secrets + "/" + CaSecretName(id), &existing); !s.ok()) return s;
    if (!existing.ok())
      return Status::Unavailable("Secret " + CaSecretName(id) + ": " + existing.Describe());
  }
  if (!OwnedBy(existing.body, id)) return WaitForPredecessor("Secret", existing.body);
  CertificateAndKey ca;
  if (Status s = CaFromSecret(existing.body, &ca); !s.ok())
    return Status::FailedPrecondition(s.message());
  for (const controller::ReplicaName& name : controller::AllReplicas(spec)) {
    Response replica;
    if (Status s = client_->Get(secrets + "/" + ReplicaTlsSecretName(id, name), &replica); !s.ok())
      return s;
    if (replica.ok() && OwnedBy(replica.body, id)) {
      if (CarriesCa(replica.body, ca.certificate_pem)) continue;
      // The job's CA was made again (its Secret deleted): no peer would
      // accept this certificate of the old one. Replaced; the pod's volume
      // follows within the kubelet's sync, and gRPC reads it again.
      if (Status s = DeleteSecret(client_, secrets + "/" + ReplicaTlsSecretName(id, name),
                                  "of a CA the job no longer has");
          !s.ok())
        return s;
    }
    json secret;
    if (Status s = BuildReplicaTlsSecret(id, spec, ca, name, &secret); !s.ok()) return s;
    if (Status s = EnsureObject(id, secrets, secret, over_quota); !s.ok()) return s;
  }
  return Status::Ok();
}

Status JobReconciler::EnsureIssuedCertificates(const JobIdentity& id, const api::TrainingJob& spec,
                                               JobState* state, std::string* over_quota,
                                               std::string* pending) {
  const std::vector<CertManagerObject> objects = BuildCertManagerObjects(id, spec);
  if (state->cert_manager_objects_made != objects.size()) {
    for (const CertManagerObject& made : objects) {
      if (Status s = EnsureObject(id, made.collection, made.object, over_quota); !s.ok()) return s;
    }
    state->cert_manager_objects_made = objects.size();
  }
  std::string ca_pem;  // the job's CA certificate, from the first Certificate's Secret
  for (const CertManagerObject& made : objects) {
    if (made.object["kind"] != "Certificate") continue;
    const std::string name = made.object["spec"]["secretName"];
    const std::string path = ObjectPath(kSecrets, id.namespace_, name);
    const std::string certificate_path = made.collection + "/" + name;
    Response secret;
    if (Status s = client_->Get(path, &secret); !s.ok()) return s;
    if (secret.code == 404) {
      Response certificate;
      if (Status s = client_->Get(certificate_path, &certificate); !s.ok()) return s;
      const std::string why = CertificateNotReadyMessage(certificate.body);
      *pending = "waiting for cert-manager to issue the job's certificates (" + name + ": " +
                 (why.empty() ? "no status yet: is cert-manager's controller running? "
                                "--tls-issuer=operator, the chart's tls.issuer, has the "
                                "operator issue them instead"
                              : why) +
                 ")";
      return Status::Ok();
    }
    if (!secret.ok()) return Status::Error("reading Secret " + name + ": " + secret.Describe());
    if (Status s = OwnIssuedSecret(id, certificate_path, secret.body); !s.ok()) return s;
    if (made.object["spec"].value("isCA", false)) {
      (void)SecretData(secret.body, TransportSecurity::kCertificateFile, &ca_pem);
      continue;
    }
    // cert-manager does not issue a certificate again when its CA changes
    // (the CA Secret made again, one an earlier job of this name left):
    // one signed by another CA is deleted, and cert-manager issues it again.
    if (!CarriesCa(secret.body, ca_pem)) {
      if (Status s = DeleteSecret(client_, path, "signed by another CA than the job's"); !s.ok())
        return s;
      *pending = "waiting for cert-manager to issue " + name +
                 " again: it was signed by another CA than the job's";
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status JobReconciler::OwnIssuedSecret(const JobIdentity& id, const std::string& certificate_path,
                                      const json& secret) {
  if (SecretOwnedThroughJob(secret, id, "")) return Status::Ok();
  // cert-manager with --enable-certificate-owner-ref: owned by the
  // Certificate, which the job owns.
  Response certificate;
  if (Status s = client_->Get(certificate_path, &certificate); !s.ok()) return s;
  const std::string certificate_uid =
      certificate.ok() ? certificate.body["metadata"].value("uid", "") : "";
  if (SecretOwnedThroughJob(secret, id, certificate_uid)) return Status::Ok();
  if (SecretOfAnotherJob(secret, id, certificate_uid)) return WaitForPredecessor("Secret", secret);
  // The job as one more owner: the merge patch names the list whole, and the
  // resourceVersion makes it fail (409) rather than drop an owner written
  // since the read.
  const std::string name = secret["metadata"].value("name", "");
  const std::string version = secret["metadata"].value("resourceVersion", "");
  if (version.empty())  // a merge patch without it would not be conditional
    return Status::Unavailable("Secret " + name + " has no resourceVersion");
  json owners = secret["metadata"].value("ownerReferences", json::array());
  owners.push_back(SecretOwnerReference(id));
  const json patch = {{"metadata", {{"ownerReferences", owners}, {"resourceVersion", version}}}};
  Response patched;
  if (Status s = client_->Patch(ObjectPath(kSecrets, id.namespace_, name), patch, &patched);
      !s.ok())
    return s;
  if (patched.ok()) return Status::Ok();
  const std::string message =
      "making Secret " + name + " (issued by cert-manager) the job's: " + patched.Describe();
  if (patched.code == 403 || patched.code == 422) return Status::FailedPrecondition(message);
  return Status::Unavailable(message);  // changed since the read, or gone: looked at again
}

}  // namespace kubeps::kube
