// How a node of a job reads the job it belongs to: the canonical manifest
// in KUBEPS_JOB, parsed by the one parser, and its optimizer settings in
// the form the shared optimizer code takes.
#ifndef KUBEPS_OPERATOR_API_JOB_ENVIRONMENT_H_
#define KUBEPS_OPERATOR_API_JOB_ENVIRONMENT_H_

#include <string>

#include "common/optimizer.h"
#include "common/status.h"
#include "operator/api/training_job.h"

namespace kubeps::api {

inline Status ParseJobFromEnvironment(const std::string& job_json, TrainingJob* job) {
  ParseResult parsed = ParseTrainingJob(job_json);
  if (!parsed.ok()) return Status::Error(parsed.ErrorReport("KUBEPS_JOB"));
  *job = *parsed.job;
  return Status::Ok();
}

inline OptimizerConfig ToOptimizerConfig(const OptimizerSpec& o) {
  return OptimizerConfig{o.name,           static_cast<float>(o.learning_rate), static_cast<float>(o.momentum),
                         static_cast<float>(o.beta1), static_cast<float>(o.beta2),
                         static_cast<float>(o.epsilon), static_cast<float>(o.weight_decay)};
}

}  // namespace kubeps::api

#endif  // KUBEPS_OPERATOR_API_JOB_ENVIRONMENT_H_
