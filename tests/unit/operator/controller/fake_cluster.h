// A fake cluster for the job logic's tests: it records every Create and
// Delete and lets the test decide each replica's phase (and what a pending
// one says) and when the scheduler's address is known.
#ifndef KUBEPS_TESTS_UNIT_OPERATOR_CONTROLLER_FAKE_CLUSTER_H_
#define KUBEPS_TESTS_UNIT_OPERATOR_CONTROLLER_FAKE_CLUSTER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "operator/controller/job_controller.h"

namespace kubeps::controller {

inline ReplicaName Scheduler() { return {ReplicaRole::kScheduler, 0}; }
inline ReplicaName Server(int i) { return {ReplicaRole::kServer, i}; }
inline ReplicaName Worker(int i) { return {ReplicaRole::kWorker, i}; }

class FakeCluster : public Cluster {
 public:
  Status Create(const ReplicaLaunch& launch) override {
    created.push_back(launch.name.ToString());
    launches.push_back(launch);
    if (fail_create.count(launch.name.ToString())) return Status::Error("no room on any node");
    if (unavailable.count(launch.name.ToString())) return Status::Unavailable("API unreachable");
    auto it = replicas.find(launch.name);
    if (it != replicas.end()) {
      // Replaces an ended replica, as a real backend does.
      it->second.phase = ReplicaPhase::kPending;
      it->second.exit_code = 0;
      it->second.start_problem.clear();
      ++it->second.restarts;
    } else {
      ReplicaStatus status;
      status.name = launch.name;
      replicas[launch.name] = status;
    }
    return Status::Ok();
  }
  Status DeleteAll(const std::vector<ReplicaName>& names, int grace_ms) override {
    std::vector<std::string> batch;
    for (const ReplicaName& name : names) {
      deleted.push_back(name.ToString());
      batch.push_back(name.ToString());
      replicas.erase(name);
    }
    batches.push_back(batch);
    graces.push_back(grace_ms);
    return Status::Ok();
  }
  std::vector<ReplicaStatus> List() override {
    std::vector<ReplicaStatus> out;
    for (auto& [name, status] : replicas) out.push_back(status);
    return out;
  }
  std::string SchedulerAddress() override { return address; }

  void Set(const ReplicaName& name, ReplicaPhase phase, int exit_code = 0) {
    ASSERT_TRUE(replicas.count(name)) << name.ToString() << " does not exist";
    replicas[name].phase = phase;
    replicas[name].exit_code = exit_code;
  }
  void SetAll(ReplicaPhase phase) {
    for (auto& [name, status] : replicas) status.phase = phase;
  }

  std::map<ReplicaName, ReplicaStatus> replicas;
  std::vector<std::string> created, deleted;
  std::vector<std::vector<std::string>> batches;  // one per DeleteAll, in its order
  std::vector<int> graces;                        // each DeleteAll's grace_ms
  std::vector<ReplicaLaunch> launches;
  std::set<std::string> fail_create, unavailable;
  std::string address;
};

inline api::TrainingJob Job(api::RestartPolicy policy = api::RestartPolicy::kOnFailure,
                            int backoff_limit = 3) {
  api::TrainingJob job;
  job.name = "mnist";
  job.spec.ps.replicas = 2;
  job.spec.worker.replicas = 2;
  job.spec.run_policy.restart_policy = policy;
  job.spec.run_policy.backoff_limit = backoff_limit;
  // Most tests check that a finished job leaves nothing behind.
  job.spec.run_policy.clean_pod_policy = api::CleanPodPolicy::kAll;
  return job;
}

}  // namespace kubeps::controller

#endif  // KUBEPS_TESTS_UNIT_OPERATOR_CONTROLLER_FAKE_CLUSTER_H_
