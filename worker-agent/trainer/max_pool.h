// 2x2 max pooling with stride 2 (H and W must be even) on CNHW tensors,
// i.e. on C*batch independent planes of H x W.
// Ties pick the first of the window in the order (0,0) (0,1) (1,0) (1,1);
// Backward routes each gradient to the position that won, found again from
// Forward's input: `x` must be unchanged until Backward (in the models it is
// the convolution's output, which lives until its next Forward).
//
// Not thread-safe: a layer keeps what its backward pass needs between calls;
// it belongs to one model on one thread.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_MAX_POOL_H_
#define KUBEPS_WORKER_AGENT_TRAINER_MAX_POOL_H_

#include <vector>

namespace kubeps::trainer {

class MaxPool2x2 {
 public:
  MaxPool2x2(int height, int width, int channels);

  int out_height() const { return h_ / 2; }
  int out_width() const { return w_ / 2; }

  // x: C x batch x H x W. Returns C x batch x H/2 x W/2 (owned by the layer).
  float* Forward(const float* x, int batch);

  // dy: C x batch x H/2 x W/2. Returns dL/dx, C x batch x H x W (owned).
  float* Backward(const float* dy);

 private:
  int h_, w_, c_;
  int batch_ = 0;
  const float* x_ = nullptr;  // Forward's input, read again by Backward
  std::vector<float> y_;
  std::vector<float> dx_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_MAX_POOL_H_
