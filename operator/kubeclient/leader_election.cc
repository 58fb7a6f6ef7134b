#include "operator/kubeclient/leader_election.h"

#include <chrono>
#include <ctime>
#include <thread>

#include "common/logging.h"
#include "common/time_format.h"
#include "operator/kubeclient/api_path.h"

namespace kubeps::kube {

using nlohmann::json;

std::string LeaderElector::Path() const { return CollectionPath(kLeases, config_.namespace_); }

bool LeaderElector::TryAcquireOrRenew() {
  const std::string now = MicroTime(std::chrono::system_clock::now());
  Response current;
  if (!client_->Get(Path() + "/" + config_.name, &current).ok()) return false;
  if (current.code == 404) {
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", config_.name}, {"namespace", config_.namespace_}}},
                  {"spec",
                   {{"holderIdentity", config_.identity},
                    {"leaseDurationSeconds", config_.lease_duration_s},
                    {"acquireTime", now},
                    {"renewTime", now},
                    {"leaseTransitions", 0}}}};
    Response created;
    return client_->Post(Path(), lease, &created).ok() && created.ok();
  }
  if (!current.ok()) return false;
  json lease = current.body;
  json& spec = lease["spec"];
  const std::string holder = spec.value("holderIdentity", "");
  const bool ours = holder == config_.identity;
  if (!ours && !holder.empty() && !ExpiredByOurClock(spec)) return false;
  if (!ours) {
    spec["holderIdentity"] = config_.identity;
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  spec["renewTime"] = now;
  spec["leaseDurationSeconds"] = config_.lease_duration_s;
  Response updated;  // carries metadata.resourceVersion: 409 if someone was faster
  return client_->Put(Path() + "/" + config_.name, lease, &updated).ok() && updated.ok();
}

bool LeaderElector::ExpiredByOurClock(const json& spec) {
  const auto now = clock_();
  if (spec != observed_spec_) {  // renewed (or changed hands) since we looked
    observed_spec_ = spec;
    observed_at_ = now;
    return false;
  }
  const int duration = spec.value("leaseDurationSeconds", config_.lease_duration_s);
  return now >= observed_at_ + std::chrono::seconds(duration);
}

bool LeaderElector::AwaitLeadership(const std::atomic<bool>& stop) {
  while (!stop) {
    if (TryAcquireOrRenew()) {
      KLOG_INFO << "leading as " << config_.identity << " (lease " << config_.namespace_ << "/"
                << config_.name << ")";
      return true;
    }
    for (int waited = 0; waited < config_.renew_interval_ms / 2 && !stop; waited += 100) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return false;
}

bool LeaderElector::KeepLeading(const std::atomic<bool>& stop) {
  auto last_renewal = std::chrono::steady_clock::now();
  // Checked while waiting too: past the deadline a standby may soon lead, so
  // stop acting at once rather than at the next renewal.
  auto past_deadline = [&] {
    return std::chrono::steady_clock::now() - last_renewal >
           std::chrono::milliseconds(config_.renew_deadline_ms);
  };
  while (!stop) {
    for (int waited = 0; waited < config_.renew_interval_ms && !stop; waited += 100) {
      if (past_deadline()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (stop) break;
    if (TryAcquireOrRenew()) {
      last_renewal = std::chrono::steady_clock::now();
    } else if (past_deadline()) {
      return false;
    }
  }
  return true;
}

void LeaderElector::Release() {
  Response current;
  if (!client_->Get(Path() + "/" + config_.name, &current).ok() || !current.ok()) return;
  json lease = current.body;
  if (lease["spec"].value("holderIdentity", "") != config_.identity) return;
  lease["spec"]["holderIdentity"] = "";
  Response updated;
  // Best effort: if the release is lost, the next leader waits out the lease.
  if (Status s = client_->Put(Path() + "/" + config_.name, lease, &updated); !s.ok()) {
    KLOG_INFO << "releasing the lease: " << s.message();
  }
}

}  // namespace kubeps::kube
