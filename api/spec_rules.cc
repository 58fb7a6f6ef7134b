// The CRD's CEL rules of `spec` (spec_rules.h). Each is the parser's check
// turned around: it holds unless the parser would refuse the spec. The API
// server has applied the schema's defaults before it runs them, so a field
// with a default is always there; one without is tested with has() first.
#include "api/spec_rules.h"

#include <string>

#include "api/user_container.h"

namespace kubeps::api {
namespace {

using Json = nlohmann::ordered_json;

// One entry of x-kubernetes-validations. `at`: the field the error names,
// from spec; `reason`: "" for FieldValueInvalid.
Json Rule(const std::string& rule, const std::string& at, const std::string& message,
          const std::string& message_expression = "", const std::string& reason = "") {
  Json out = {{"rule", rule}, {"fieldPath", at}, {"message", message}};
  if (!message_expression.empty()) out["messageExpression"] = message_expression;
  if (!reason.empty()) out["reason"] = reason;
  return out;
}

std::string Has(const std::string& field) { return "has(" + field + ")"; }

}  // namespace

Json TrainingJobSpecRules() {
  const std::string worker = "self.replicaSpecs.worker", was = "oldSelf.replicaSpecs.worker";
  const std::string policy = worker + ".elasticPolicy";
  const std::string min = policy + ".minReplicas", max = policy + ".maxReplicas";
  const std::string at_policy = ".replicaSpecs.worker.elasticPolicy";
  // As api::ElasticPolicy::enabled: a bound given.
  auto elastic = [](const std::string& of) {
    const std::string p = of + ".replicaSpecs.worker.elasticPolicy";
    return "(" + Has(p) + " && (" + Has(p + ".minReplicas") + " || " + Has(p + ".maxReplicas") +
           "))";
  };
  const std::string bounded = "(" + Has(policy) + " && " + Has(min) + " && " + Has(max) + ")";
  auto suspended = [](const std::string& of) {
    return "(" + Has(of + ".runPolicy.suspend") + " && " + of + ".runPolicy.suspend)";
  };
  const std::string schedule = "self.optimizer.schedule";
  const std::string decays =
      "(" + Has(schedule + ".decay") + " && " + schedule + ".decay != 'none')";
  // As api::LearningRateScheduleSpec::enabled.
  const std::string scheduled = "(" + Has(schedule + ".warmupSteps") + " && " + schedule +
                                ".warmupSteps > 0 || " + decays + ")";
  auto given = [&](const std::string& field, const char* zero) {
    return "(" + Has(schedule + "." + field) + " && " + schedule + "." + field + " != " + zero +
           ")";
  };
  // What the job trains (ReadTrainingProgram): a built-in model, or the
  // worker's own program. The worker template's containers are typed in
  // the CRD (WorkerTemplateSchema), so these can read them; the rest of
  // the program's checks need to know which container is the main one,
  // which a rule's fixed field path cannot say, and stay the parser's.
  const std::string pod = "self.replicaSpecs.worker.template";
  const std::string containers = pod + ".spec.containers";
  const std::string has_containers =
      "(" + Has(pod) + " && " + Has(pod + ".spec") + " && " + Has(containers) + ")";
  const std::string built_in = "(" + Has("self.model") + " || " + Has("self.dataset") + ")";
  return Json::array({
      // CheckElasticPolicy
      Rule("!" + Has(policy) + " || !" + Has(max) + " || " + Has(min), at_policy + ".minReplicas",
           kRequiredWithMaxReplicas, "", "FieldValueRequired"),
      Rule("!" + Has(policy) + " || !" + Has(min) + " || " + Has(max), at_policy + ".maxReplicas",
           kRequiredWithMinReplicas, "", "FieldValueRequired"),
      Rule("!" + bounded + " || " + min + " <= " + max, at_policy,
           "minReplicas is above maxReplicas",
           "'minReplicas (' + string(" + min + ") + ') is above maxReplicas (' + string(" + max +
               ") + ')'"),
      Rule("!" + bounded + " || " + min + " > " + max + " || (" + worker + ".replicas >= " + min +
               " && " + worker + ".replicas <= " + max + ")",
           ".replicaSpecs.worker.replicas",
           "the workers are outside elasticPolicy's [minReplicas, maxReplicas]",
           "string(" + worker + ".replicas) + ' is outside elasticPolicy\\'s [' + string(" + min +
               ") + ', ' + string(" + max + ") + ']'"),
      Rule("!" + elastic("self") + " || !" + Has(policy + ".batch") + " || " + policy +
               ".batch != 'perWorker'",
           at_policy + ".batch", kPerWorkerUnsupported),
      // The global batch is batchSize x minReplicas, cut over the workers.
      Rule("!" + bounded + " || " + max + " <= self.batchSize * " + min, at_policy + ".maxReplicas",
           "more workers than the global batch (batchSize x minReplicas) has examples",
           "string(" + max + ") + ' workers cannot share a global batch of ' + string(" +
               "self.batchSize * " + min + ") + ' (batchSize x minReplicas)'"),
      // A job's scheduler and servers are made for its number of workers
      // unless it is elastic; a suspended one starts again with the new one.
      Rule("(" + elastic("self") + " && " + elastic("oldSelf") + ") || " + worker +
               ".replicas == " + was + ".replicas || " + suspended("self") + " || " +
               suspended("oldSelf"),
           ".replicaSpecs.worker.replicas",
           "cannot change while the job runs: it has no elasticPolicy; suspend it first "
           "(spec.runPolicy.suspend: true), or give it an elasticPolicy",
           "'cannot change from ' + string(" + was + ".replicas) + ' to ' + string(" + worker +
               ".replicas) + ' while the job runs: it has no elasticPolicy, and its scheduler and "
               "servers are made for its number of workers; suspend it first "
               "(spec.runPolicy.suspend: true), or give it an elasticPolicy'"),
      // CheckSchedule
      Rule("!" + Has(schedule) + " || " + decays + " || !(" + given("decaySteps", "0") + " || " +
               given("minLearningRate", "0.0") + ")",
           ".optimizer.schedule.decay", kDecayNoneButGiven),
      Rule("!" + Has(schedule) + " || !" + scheduled + " || self.optimizer.name != 'none'",
           ".optimizer.schedule", kNoRateToSchedule),
      Rule("!" + Has(schedule) + " || !" + decays + " || " + given("decaySteps", "0"),
           ".optimizer.schedule.decaySteps", "required with a decay",
           "'required with decay \"' + " + schedule + ".decay + '\"'", "FieldValueRequired"),
      // learningRate has a default, so it is there; minLearningRate, unsaid, is 0.
      Rule("!" + Has(schedule) + " || !" + decays + " || self.optimizer.name == 'none' || !" +
               given("decaySteps", "0") + " || !" + Has(schedule + ".minLearningRate") + " || " +
               schedule + ".minLearningRate < self.optimizer.learningRate",
           ".optimizer.schedule.minLearningRate", "not below spec.optimizer.learningRate",
           "string(" + schedule +
               ".minLearningRate) + ' is not below spec.optimizer.learningRate (' "
               "+ string(self.optimizer.learningRate) + '): nothing to decay'"),
      // ReadTrainingProgram
      Rule("!" + Has("self.model") + " || " + Has("self.dataset"), ".dataset.path", "required", "",
           "FieldValueRequired"),
      Rule("!" + built_in + " || self.optimizer.name != 'none'", ".optimizer.name",
           "none: the servers only average the gradients, for a training program that runs its "
           "own optimizer, but a built-in model has none of its own: use sgd, momentum or adam, "
           "or bring your own program",
           "'none: the servers only average the gradients, for a training program that runs its "
           "own optimizer, but the built-in model \"' + (" +
               Has("self.model") +
               " ? self.model : 'mlp') + '\" has none of its own: use sgd, momentum or adam, or "
               "bring your own program'"),
      Rule(built_in + " || (" + has_containers + " && size(" + containers + ") > 0)", ".model",
           NoProgramMessage(), "", "FieldValueRequired"),
      Rule(built_in + " || !" + has_containers + " || size(" + containers + ") <= 1 || " +
               containers + ".exists(c, " + Has("c.name") + " && c.name == '" +
               kWorkerContainerName + "')",
           ".replicaSpecs.worker.template.spec.containers",
           std::string("several") + kNoneNamedWorker,
           "string(size(" + containers + ")) + '" + kNoneNamedWorker + "'"),
  });
}

Json WorkerTemplateSchema(const std::string& description) {
  // The API server bounds a rule's cost by the sizes the schema allows: a
  // list without maxItems, or a string without maxLength, makes it refuse
  // the CRD. A container's name is a DNS label.
  const Json container = {{"type", "object"},
                          {"x-kubernetes-preserve-unknown-fields", true},
                          {"properties", {{"name", {{"type", "string"}, {"maxLength", 63}}}}},
                          {"x-kubernetes-validations",
                           Json::array({Rule(std::string("!has(self.name) || self.name != '") +
                                                 kAgentContainerName + "'",
                                             ".name", kAgentNameTaken)})}};
  const Json pod_spec = {
      {"type", "object"},
      {"x-kubernetes-preserve-unknown-fields", true},
      {"properties",
       {{"containers",
         {{"type", "array"}, {"maxItems", kMaxTemplateContainers}, {"items", container}}}}}};
  return {{"type", "object"},
          {"x-kubernetes-preserve-unknown-fields", true},
          {"description", description},
          {"properties", {{"spec", pod_spec}}}};
}

}  // namespace kubeps::api
