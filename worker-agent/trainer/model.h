// The built-in models. A Model owns its parameters and their gradients as
// flat float32 tensors in a fixed order; the order is the KV key of each
// tensor, so every worker and every shard agree on it.
//
// Not thread-safe: a model belongs to one training loop (its kernels may use
// several threads inside one call).
#ifndef KUBEPS_WORKER_AGENT_TRAINER_MODEL_H_
#define KUBEPS_WORKER_AGENT_TRAINER_MODEL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "worker-agent/trainer/host_tensor.h"

namespace kubeps::trainer {

struct Parameter {
  std::string name;  // e.g. "dense1.weight"
  std::vector<int> shape;
  HostTensor value;
  HostTensor grad;  // same size as value
};

// What a parameter store (parameter_store.h) hears from a model during a
// step, so that communication overlaps computation: a parameter's gradient
// can travel while the layers below it are still in their backward pass, and
// its next value until the forward pass reaches it. Parameters are named by
// index, in key order, [first, end) being one layer's.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // The forward pass is about to read these parameters' values.
  virtual void ParametersNeeded(size_t first, size_t end) = 0;
  // These gradients are final, and the backward pass reads these values no
  // more (the layer's input gradient is computed too).
  virtual void GradientsReady(size_t first, size_t end) = 0;
  // The forward pass's loss, before the backward pass starts.
  virtual void LossComputed(float loss) = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Whether ForwardBackward tells a StepObserver about every parameter,
  // layer by layer (the built-in CPU models do). A model that does not is
  // never given one: its store moves everything after ForwardBackward.
  virtual bool reports_layers() const { return false; }
  // Tells `observer` (or nobody, when null) what each pass needs and makes.
  void set_step_observer(StepObserver* observer) { observer_ = observer; }

  // Parameters in key order. Callers may overwrite `value` (pulled from the
  // parameter servers) and read `grad` after ForwardBackward.
  std::vector<Parameter>& parameters() { return params_; }

  // Deterministic initialisation from `seed` (same seed, same values).
  virtual void Initialize(uint64_t seed) = 0;

  // images: batch x 784 floats in [0,1], row-major; labels: batch class ids.
  // Sets every grad to the gradient of the mean loss over the batch and
  // returns that mean softmax cross-entropy loss.
  virtual float ForwardBackward(const float* images, const uint8_t* labels, int batch) = 0;

  // Writes the predicted class of each of the `batch` images.
  virtual void Predict(const float* images, int batch, uint8_t* predictions) = 0;

  // Forward pass only: writes the predicted classes (when `predictions` is
  // not null) and returns the mean softmax cross-entropy loss of the batch.
  // Leaves every grad untouched. The built-in models override it; the
  // default only predicts and returns NaN.
  virtual float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                            uint8_t* predictions) {
    if (predictions != nullptr) Predict(images, batch, predictions);
    return std::numeric_limits<float>::quiet_NaN();
  }

 protected:
  void Needed(size_t first, size_t end) {
    if (observer_ != nullptr) observer_->ParametersNeeded(first, end);
  }
  void Ready(size_t first, size_t end) {
    if (observer_ != nullptr) observer_->GradientsReady(first, end);
  }
  void LossReady(float loss) {
    if (observer_ != nullptr) observer_->LossComputed(loss);
  }

  std::vector<Parameter> params_;

 private:
  StepObserver* observer_ = nullptr;
};

// A model of api/models.h's list ("softmax", "mlp", "cnn"); nullptr for
// any other name.
std::unique_ptr<Model> MakeModel(const std::string& name);
// api::kModels' names, in its order.
const std::vector<std::string>& ModelNames();

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_MODEL_H_
