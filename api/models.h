// The models a TrainingJob may name in spec.model: the one list that the
// manifest parser, the CRD's enum (both through the field table of
// training_job_schema.cc) and the trainer's factory (MakeModel in
// worker-agent/trainer/models.cc) all read.
//
// Why here and not in the trainer: layers point one way (api/ includes only
// common/), and the control side (`kubeps validate`, the operator, the CRD
// generator) must know the names without linking the trainer. So the names
// live at the level both sides reach, and the trainer builds its factory
// from them: MakeModel switches over ModelKind, so a model added here
// without an implementation fails the trainer's tests (every name must make
// a model), and a model implemented there cannot be named by a manifest
// unless it is listed here.
//
// Plain constants: safe from any thread.
#ifndef KUBEPS_API_MODELS_H_
#define KUBEPS_API_MODELS_H_

#include <optional>
#include <string_view>

namespace kubeps::api {

enum class ModelKind { kSoftmax, kMlp, kCnn };

struct ModelInfo {
  ModelKind kind;
  const char* name;     // what spec.model says
  const char* summary;  // for the CRD's description and the README
};

// In the order messages and the CRD list them.
inline constexpr ModelInfo kModels[] = {
    {ModelKind::kSoftmax, "softmax", "softmax regression (dense 784-10)"},
    {ModelKind::kMlp, "mlp", "784-256-10 with ReLU"},
    {ModelKind::kCnn, "cnn", "the seed CNN (two 5x5 convolutions with pooling, dense 1024)"},
};

inline std::optional<ModelKind> FindModel(std::string_view name) {
  for (const ModelInfo& model : kModels) {
    if (name == model.name) return model.kind;
  }
  return std::nullopt;
}

}  // namespace kubeps::api

#endif  // KUBEPS_API_MODELS_H_
