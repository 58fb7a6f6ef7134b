// The checks across fields of a TrainingJob's spec, said once for the two
// places that make them: the parser (training_job_parse.cc), which kubeps
// validate, kubeps run and the operator run, and the CRD's CEL rules
// (x-kubernetes-validations), which the API server runs at `kubectl apply`
// and `kubectl scale`. The words of an error are these constants in both;
// where an error names numbers, each builds it its own way, and
// tests/k8s/test_emulator_cel.py holds the two to the same text.
#ifndef KUBEPS_API_SPEC_RULES_H_
#define KUBEPS_API_SPEC_RULES_H_

#include <string>

#include <nlohmann/json.hpp>

namespace kubeps::api {

// Said of minReplicas given alone, and of maxReplicas given alone.
inline constexpr char kRequiredWithMaxReplicas[] = "required with maxReplicas";
inline constexpr char kRequiredWithMinReplicas[] = "required with minReplicas";
inline constexpr char kPerWorkerUnsupported[] =
    "perWorker is not supported yet: use global (the global batch stays and is cut over each "
    "step's workers)";
inline constexpr char kDecayNoneButGiven[] =
    "none, but decaySteps or minLearningRate is given: say how to decay (cosine or linear)";
inline constexpr char kNoRateToSchedule[] =
    "optimizer none has no learning rate to schedule (the program's optimizer steps: schedule it "
    "there)";

// The CEL rules of `spec`, in the order the parser makes its checks.
nlohmann::ordered_json TrainingJobSpecRules();

// The worker template's schema: a pod template whose spec.containers are
// typed (a list of at most kMaxTemplateContainers, each with a name), so
// that the rules above can read them, and whose each main container is
// refused the agent's name. Everything else of the template is kept as
// written (x-kubernetes-preserve-unknown-fields).
inline constexpr int kMaxTemplateContainers = 64;
nlohmann::ordered_json WorkerTemplateSchema(const std::string& description);

}  // namespace kubeps::api

#endif  // KUBEPS_API_SPEC_RULES_H_
