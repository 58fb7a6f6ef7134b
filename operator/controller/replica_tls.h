// The TLS material of a job with spec.security.tls (common/transport_security.h):
// a CA of the job's own, and for each replica a certificate that names the
// job, the role and the index, signed by it. The operator keeps the CA in a
// Secret and gives each replica's pod a Secret of its own; `kubeps run`
// writes the same files into its run folder. Both backends issue them here.
//
// Pure functions of their arguments (plus fresh keys): safe from any thread.
#ifndef KUBEPS_OPERATOR_CONTROLLER_REPLICA_TLS_H_
#define KUBEPS_OPERATOR_CONTROLLER_REPLICA_TLS_H_

#include <chrono>
#include <string>
#include <vector>

#include "api/training_job.h"
#include "common/certificate_authority.h"
#include "common/status.h"
#include "operator/controller/cluster.h"

namespace kubeps::controller {

// A year: the operator does not rotate a job's certificates yet, so they
// must outlast the longest job. The CA lives as long.
inline constexpr std::chrono::seconds kTlsValidity{365 * 24 * 3600};

// Every replica `job` can have, in a stable order: the scheduler, the
// servers, the workers; an elastic job's workers up to maxReplicas, so that
// a worker taken in by a scale-up finds its certificate already issued.
std::vector<ReplicaName> AllReplicas(const api::TrainingJob& job);

Status CreateCaFor(const api::TrainingJob& job, CertificateAndKey* ca);

// The certificate of replica `name`; `dns_names` are its stable names
// (on Kubernetes its hostname under the job's Service).
Status IssueFor(const CertificateAndKey& ca, const api::TrainingJob& job, const ReplicaName& name,
                const std::vector<std::string>& dns_names, CertificateAndKey* replica);

// Writes ca.crt, tls.crt and tls.key (mode 0600, as the replicas demand)
// into `dir`, which is made (0700) if missing.
Status WriteTlsDirectory(const std::string& dir, const std::string& ca_pem,
                         const CertificateAndKey& replica);

}  // namespace kubeps::controller

#endif  // KUBEPS_OPERATOR_CONTROLLER_REPLICA_TLS_H_
