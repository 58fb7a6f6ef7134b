// The TrainingJob's spec as one table of FieldSpecs (field_spec.h): names,
// types, ranges, enums, descriptions, and which member of TrainingJobSpec
// holds each value (and so its default). ParseTrainingJob, ToJson, the CRD
// and the README's field table all come from it.
#ifndef KUBEPS_API_TRAINING_JOB_SCHEMA_H_
#define KUBEPS_API_TRAINING_JOB_SCHEMA_H_

#include <vector>

#include "api/field_spec.h"

namespace kubeps::api {

// The fields of `spec`, in reading order (the order of errors). Built on
// first use; thread-safe.
const std::vector<FieldSpec>& TrainingJobSpecFields();

}  // namespace kubeps::api

#endif  // KUBEPS_API_TRAINING_JOB_SCHEMA_H_
