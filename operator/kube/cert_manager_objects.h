// The cert-manager objects of a job with mutual TLS, where the cluster runs
// cert-manager (--tls-issuer): cert-manager issues and renews the job's
// certificates instead of the operator, into Secrets of the same names and
// keys (ca.crt, tls.crt, tls.key) that the pods mount either way.
//
// Per job, each owned by the TrainingJob (deleted with it):
//   Issuer      <job>-tls-selfsigned   selfSigned: the CA's signer
//   Certificate <job>-tls-cm-ca        isCA, into Secret <job>-tls-cm-ca
//   Issuer      <job>-tls-ca           ca: {secretName: <job>-tls-cm-ca}
//   Certificate <hostname>-tls         per replica, from the CA Issuer
// A CA per job, as with the operator's own issuer: a certificate of another
// job never leads to this job's CA. cert-manager leaves a Secret behind when
// its Certificate is deleted (unless it runs with
// --enable-certificate-owner-ref): the reconciler adds the job as an owner
// of each Secret it finds, so that the garbage collector deletes it too.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_OPERATOR_KUBE_CERT_MANAGER_OBJECTS_H_
#define KUBEPS_OPERATOR_KUBE_CERT_MANAGER_OBJECTS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/training_job.h"
#include "operator/kube/pod_builder.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

inline const Resource kCertificates{"cert-manager.io", "v1", "certificates"};
inline const Resource kIssuers{"cert-manager.io", "v1", "issuers"};

// Whether an APIResourceList (GET /apis/cert-manager.io/v1) serves both
// Certificates and Issuers.
bool ServesCertificatesAndIssuers(const nlohmann::json& resource_list);

// The job's Issuers and Certificates in the order they are made (each
// Issuer before the Certificates that name it), with the collection each
// is POSTed to.
struct CertManagerObject {
  std::string collection;
  nlohmann::json object;
};
std::vector<CertManagerObject> BuildCertManagerObjects(const JobIdentity& job,
                                                       const api::TrainingJob& spec);

// The CA's Certificate and Secret: not the operator's own CA Secret's name
// (<job>-tls-ca, an Opaque Secret of another layout), so that a job can never
// have both written into one Secret.
std::string CertManagerCaName(const JobIdentity& job);

// Why a Certificate is not issued yet: a failed issuance's message, else its
// Ready condition's; "" when it has no status, as before cert-manager's
// controller first looked at it.
std::string CertificateNotReadyMessage(const nlohmann::json& certificate);

// The job as a plain (not controller) owner: cert-manager, started with
// --enable-certificate-owner-ref, makes its Certificate the Secret's
// controller, and an object has one controller at most.
nlohmann::json SecretOwnerReference(const JobIdentity& job);
// Whether `secret` (as cert-manager wrote it) names the job among its owners
// directly, or its Certificate (uid `certificate_uid`, owned by the job) as
// its controller.
bool SecretOwnedThroughJob(const nlohmann::json& secret, const JobIdentity& job,
                           const std::string& certificate_uid);
// Whether `secret` names a TrainingJob or Certificate of another uid as an
// owner: an earlier job of this name's, which the garbage collector is about
// to delete.
bool SecretOfAnotherJob(const nlohmann::json& secret, const JobIdentity& job,
                        const std::string& certificate_uid);

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBE_CERT_MANAGER_OBJECTS_H_
