// The built-in models behind MakeModel(). Exposed so tests and tools can
// name the concrete types; everything else should use MakeModel().
//
//   "softmax": dense 784->10, softmax cross-entropy.
//     params: dense.weight {784,10}, dense.bias {10}
//   "mlp": dense 784->256, ReLU, dense 256->10, softmax cross-entropy.
//     params: dense1.weight {784,256}, dense1.bias, dense2.weight {256,10}, dense2.bias
//   "cnn": the seed CNN, on 28x28x1 images:
//     conv 5x5x32 'same', ReLU, max-pool 2x2  -> 32x14x14
//     conv 5x5x64 'same', ReLU, max-pool 2x2  -> 64x7x7, flattened per image
//                                                 as c*49 + h*7 + w (3136)
//     dense 3136->1024, ReLU, dense 1024->10, softmax cross-entropy.
//     params: conv1.weight {32,1,5,5}, conv1.bias, conv2.weight {64,32,5,5},
//             conv2.bias, dense1.weight {3136,1024}, dense1.bias,
//             dense2.weight {1024,10}, dense2.bias
//     The convolution part keeps its activations channel-major over the
//     batch (CNHW, see conv2d.h); the flatten is a small transpose.
//
// Weights are He-uniform (limit sqrt(6/fan_in)) in front of a ReLU and
// Glorot-uniform (limit sqrt(6/(fan_in+fan_out))) for the output layer,
// drawn in parameter order from one std::mt19937_64 seeded with the seed;
// biases start at 0. MakeModel() returns all-zero parameters until
// Initialize() (or the caller) sets them. A model is not thread-safe; its
// buffers are reused from call to call, so steady-state training allocates
// nothing. The OpenMP loops and oneDNN share one thread count, the OpenMP
// pool's, set with openblas_set_num_threads() (common/blas_threads.h).
#ifndef KUBEPS_WORKER_AGENT_TRAINER_MODELS_H_
#define KUBEPS_WORKER_AGENT_TRAINER_MODELS_H_

#include <cstdint>
#include <vector>

#include "worker-agent/trainer/conv2d.h"
#include "worker-agent/trainer/dense.h"
#include "worker-agent/trainer/max_pool.h"
#include "worker-agent/trainer/model.h"
#include "worker-agent/trainer/softmax_cross_entropy.h"

namespace kubeps::trainer {

inline constexpr int kImageSize = 28 * 28;
inline constexpr int kNumClasses = 10;

class SoftmaxModel : public Model {
 public:
  SoftmaxModel();
  void Initialize(uint64_t seed) override;
  float ForwardBackward(const float* images, const uint8_t* labels, int batch) override;
  bool reports_layers() const override { return true; }
  void Predict(const float* images, int batch, uint8_t* predictions) override;
  float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                    uint8_t* predictions) override;

 private:
  const float* Forward(const float* images, int batch);
  Dense dense_;
  SoftmaxCrossEntropy loss_;
};

class MlpModel : public Model {
 public:
  MlpModel();
  void Initialize(uint64_t seed) override;
  float ForwardBackward(const float* images, const uint8_t* labels, int batch) override;
  bool reports_layers() const override { return true; }
  void Predict(const float* images, int batch, uint8_t* predictions) override;
  float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                    uint8_t* predictions) override;

 private:
  const float* Forward(const float* images, int batch);
  Dense dense1_, dense2_;
  SoftmaxCrossEntropy loss_;
  float* hidden_ = nullptr;
  int batch_ = 0;
};

class CnnModel : public Model {
 public:
  CnnModel();
  void Initialize(uint64_t seed) override;
  float ForwardBackward(const float* images, const uint8_t* labels, int batch) override;
  bool reports_layers() const override { return true; }
  void Predict(const float* images, int batch, uint8_t* predictions) override;
  float ForwardLoss(const float* images, const uint8_t* labels, int batch,
                    uint8_t* predictions) override;

 private:
  const float* Forward(const float* images, int batch);
  Conv2D conv1_;
  MaxPool2x2 pool1_;
  Conv2D conv2_;
  MaxPool2x2 pool2_;
  Dense dense1_, dense2_;
  SoftmaxCrossEntropy loss_;
  float* act1_ = nullptr;    // pool1 output after ReLU
  float* act2_ = nullptr;    // pool2 output after ReLU
  float* act3_ = nullptr;    // dense1 output after ReLU
  std::vector<float> flat_;  // pool2 output, batch x 3136
  std::vector<float> dp2_;   // its gradient back in CNHW
  int batch_ = 0;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_MODELS_H_
