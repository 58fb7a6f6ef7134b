// ReLU, in place: the layers hand out their own output buffers, so the
// activation needs no buffer of its own.
//
// Static functions over the caller's buffers: safe from any thread.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_RELU_H_
#define KUBEPS_WORKER_AGENT_TRAINER_RELU_H_

#include <cstddef>

namespace kubeps::trainer {

class Relu {
 public:
  // x = max(x, 0) over n floats.
  static void Forward(float* x, size_t n);
  // dy *= (y > 0), where y is the output of Forward.
  static void Backward(const float* y, float* dy, size_t n);
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_RELU_H_
