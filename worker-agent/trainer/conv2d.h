// 2-D convolution, 'same' zero padding, stride 1, odd square kernel.
//
// Layout: NHWC. x is batch x H x W x Cin, y is batch x H x W x Cout, the
// weight is KH x KW x Cin x Cout (shape {k, k, in, out}) and the bias is Cout.
//
// Forward lowers the whole batch with im2col into one (batch*H*W) x
// (k*k*Cin) matrix and does a single sgemm with the weight; with NHWC the
// output of that sgemm already is y. In NHWC the k taps of one kernel row
// cover k*Cin consecutive floats of the input, so im2col is k contiguous
// copies per output pixel.
//
// Backward: dW = col^T dy, db = column sums of dy, and, when the input
// gradient is needed, dcol = dy W^T (written over the im2col buffer, which
// is no longer needed) scattered back with col2im.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_

#include <vector>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {

class Conv2D {
 public:
  Conv2D(int height, int width, int in_channels, int out_channels, int kernel);

  int height() const { return h_; }
  int width() const { return w_; }
  int in_channels() const { return cin_; }
  int out_channels() const { return cout_; }
  int kernel() const { return k_; }

  // Points the layer at its parameters; call before every Forward.
  void Bind(Parameter* weight, Parameter* bias);

  // x: batch x H x W x Cin. Returns batch x H x W x Cout, owned by the layer
  // and valid until the next Forward.
  float* Forward(const float* x, int batch);

  // dy: batch x H x W x Cout. Overwrites the weight and bias grads; returns
  // dL/dx (batch x H x W x Cin, owned) when need_input_grad, else nullptr.
  // Call at most once per Forward.
  float* Backward(const float* dy, bool need_input_grad);

 private:
  void Im2Col(const float* x, int batch, float* col) const;
  void Col2Im(const float* col, int batch, float* dx) const;

  int h_, w_, cin_, cout_, k_, pad_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  int batch_ = 0;
  std::vector<float> col_;  // (batch*H*W) x (k*k*Cin)
  std::vector<float> y_;
  std::vector<float> dx_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_
