// `kubeps scale JOB --workers=N`: how a running `kubeps run` of an elastic
// job learns its new number of workers. The runner keeps in its run folder
// the job's manifest (job.json) and its process id (runner.pid); `kubeps
// scale` finds that folder (the one given, or the live run of JOB under
// $TMPDIR), checks N against the job's elasticPolicy and writes N into the
// folder's desired-workers file, which the runner (to start or stop worker
// processes) and the job's scheduler (to change who computes which step)
// both follow.
#ifndef KUBEPS_OPERATOR_LOCAL_LOCAL_SCALE_H_
#define KUBEPS_OPERATOR_LOCAL_LOCAL_SCALE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "api/training_job.h"
#include "common/status.h"

namespace kubeps::local {

inline constexpr const char* kDesiredWorkersName = "desired-workers";

// Written by the runner when it starts, which also removes an earlier run's
// desired-workers file.
Status WriteRunFiles(const std::string& run_dir, const api::TrainingJob& job);

// Sets the number of workers of the running local job `job_name` (its run
// folder `run_dir`, or "" to look under $TMPDIR); *run_dir_used says where.
// Errors name what is wrong: no such run, several, a job without
// elasticPolicy, a number outside its bounds.
// `at_step`: the change at that step exactly (the job waits there for
// workers that are not up yet); none: as soon as it can.
Status ScaleLocalJob(const std::string& job_name, int workers, std::optional<uint64_t> at_step,
                     const std::string& run_dir, std::string* run_dir_used);

}  // namespace kubeps::local

#endif  // KUBEPS_OPERATOR_LOCAL_LOCAL_SCALE_H_
