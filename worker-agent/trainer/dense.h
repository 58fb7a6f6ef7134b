// Fully connected layer: y = x W + b over a whole batch with one sgemm
// (oneDNN's: the same results on every run for a given thread count and
// batch size, as the job's exactness needs).
//
// Layout (row-major): x is batch x in, y is batch x out, the weight is
// in x out (shape {in, out}) and the bias is out (shape {out}).
//
// Not thread-safe: a layer keeps what its backward pass needs between calls;
// it belongs to one model on one thread.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_DENSE_H_
#define KUBEPS_WORKER_AGENT_TRAINER_DENSE_H_

#include <vector>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {

class Dense {
 public:
  Dense(int in_features, int out_features);

  int in_features() const { return in_; }
  int out_features() const { return out_; }

  // Points the layer at its parameters (value and grad sized in*out and out).
  // Call it before every Forward: callers may replace the parameter vectors.
  void Bind(Parameter* weight, Parameter* bias);

  // x: batch x in. Returns the batch x out output, owned by the layer and
  // valid until the next Forward. Keeps `x` for Backward, so it must stay
  // valid until then.
  float* Forward(const float* x, int batch);

  // dy: batch x out, the gradient of the loss w.r.t. the last output.
  // Overwrites the weight and bias grads. Returns dL/dx (batch x in, owned by
  // the layer) when need_input_grad, otherwise nullptr.
  float* Backward(const float* dy, bool need_input_grad);

 private:
  int in_;
  int out_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  const float* x_ = nullptr;
  int batch_ = 0;
  std::vector<float> y_;
  std::vector<float> dx_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_DENSE_H_
