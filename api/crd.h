// What is generated from the TrainingJob's field table
// (training_job_schema.h): the CustomResourceDefinition that
// helm/kubeps/crds/ (and, rendered from the chart, deploy/crd/) holds, and
// the README's table of fields. scripts/generate-crd.sh writes both with
// kubeps-crdgen; tests/unit/api/crd_test.cc fails when the committed files
// differ from what these functions return.
//
// Pure functions: safe from any thread.
#ifndef KUBEPS_API_CRD_H_
#define KUBEPS_API_CRD_H_

#include <string>

#include <nlohmann/json.hpp>

namespace kubeps::api {

// The CRD object (apiextensions.k8s.io/v1), keys in the order they are
// written.
nlohmann::ordered_json TrainingJobCrd();

// The CRD as the YAML file that is committed, with its header comment.
std::string TrainingJobCrdYaml();

// A Markdown table with one row per field of the spec: its path, type,
// default, allowed values and description.
std::string TrainingJobFieldsMarkdown();

}  // namespace kubeps::api

#endif  // KUBEPS_API_CRD_H_
