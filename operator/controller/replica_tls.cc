#include "operator/controller/replica_tls.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/transport_security.h"

namespace kubeps::controller {
namespace {

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  const bool ok = fd >= 0 && ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ::close(fd);
  return ok ? Status::Ok() : Status::Error("cannot write " + path);
}

}  // namespace

std::vector<ReplicaName> AllReplicas(const api::TrainingJob& job) {
  std::vector<ReplicaName> names = {{ReplicaRole::kScheduler, 0}};
  for (int i = 0; i < job.spec.ps.replicas; ++i) names.push_back({ReplicaRole::kServer, i});
  const int workers = std::max(job.spec.worker.replicas, job.spec.elastic.max_replicas);
  for (int i = 0; i < workers; ++i) names.push_back({ReplicaRole::kWorker, i});
  return names;
}

Status CreateCaFor(const api::TrainingJob& job, CertificateAndKey* ca) {
  return CreateJobCa(job.namespace_, job.name, kTlsValidity, ca);
}

Status IssueFor(const CertificateAndKey& ca, const api::TrainingJob& job, const ReplicaName& name,
                const std::vector<std::string>& dns_names, CertificateAndKey* replica) {
  ReplicaIdentity id{job.namespace_, job.name, ToString(name.role), name.index};
  std::vector<std::string> names = dns_names;
  names.push_back(TransportSecurity::kServerName);
  return IssueReplicaCertificate(ca, id, names, kTlsValidity, replica);
}

Status WriteTlsDirectory(const std::string& dir, const std::string& ca_pem,
                         const CertificateAndKey& replica) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::Error("cannot create " + dir);
  if (Status s = WriteFile(dir + "/" + TransportSecurity::kCaFile, ca_pem, 0644); !s.ok()) return s;
  if (Status s =
          WriteFile(dir + "/" + TransportSecurity::kCertificateFile, replica.certificate_pem, 0644);
      !s.ok())
    return s;
  return WriteFile(dir + "/" + TransportSecurity::kKeyFile, replica.private_key_pem, 0600);
}

}  // namespace kubeps::controller
