// 2-D convolution, 'same' zero padding, stride 1, odd square kernel.
//
// Layout: "CNHW", channel-major over the whole batch: x is Cin planes, each
// batch x H x W, y is Cout planes of batch x H x W. (For one input channel
// this is the same as a batch of row-major images.) The weight is
// Cout x Cin x KH x KW (shape {out, in, k, k}, as in PyTorch) and the bias
// is Cout.
//
// The arithmetic is oneDNN's direct convolution, the library PyTorch's CPU
// convolutions run on: it works in the CPU's blocked layouts (16 channels
// to a vector on AVX-512) without lowering the input into an im2col matrix
// 25 times its size: the built-in CNN's step takes a third less CPU than
// with im2col + OpenBLAS sgemm (trainer_bench, one thread). The layer keeps
// the CNHW interface: oneDNN's reorders move the tensors between CNHW and
// the blocked layouts oneDNN picks, and the weights between {out, in, k, k}
// and its own, at every call, since the parameter store rewrites them
// between steps.
//
// oneDNN runs on the process's OpenMP threads (SetBlasThreads sets them for
// OpenBLAS and oneDNN alike). For a given thread count and batch size the
// results are the same on every run, as the job's exactness needs; unlike
// the im2col version, the weight gradient's summation order can change with
// the thread count.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_

#include <map>
#include <memory>
#include <vector>

#include "worker-agent/trainer/model.h"

namespace kubeps::trainer {

class Conv2D {
 public:
  Conv2D(int height, int width, int in_channels, int out_channels, int kernel);
  ~Conv2D();
  Conv2D(const Conv2D&) = delete;
  Conv2D& operator=(const Conv2D&) = delete;

  int height() const { return h_; }
  int width() const { return w_; }
  int in_channels() const { return cin_; }
  int out_channels() const { return cout_; }
  int kernel() const { return k_; }

  // Points the layer at its parameters; call before every Forward.
  void Bind(Parameter* weight, Parameter* bias);

  // x: Cin x batch x H x W. Returns Cout x batch x H x W, owned by the layer
  // and valid until the next Forward.
  float* Forward(const float* x, int batch);

  // dy: Cout x batch x H x W. Overwrites the weight and bias grads; returns
  // dL/dx (Cin x batch x H x W, owned) when need_input_grad, else nullptr.
  // Call at most once per Forward.
  float* Backward(const float* dy, bool need_input_grad);

 private:
  // oneDNN's primitives and working memory for one batch size, built on
  // first use (training and evaluation batches differ) and kept.
  struct Primitives;
  Primitives& For(int batch);

  int h_, w_, cin_, cout_, k_, pad_;
  Parameter* weight_ = nullptr;
  Parameter* bias_ = nullptr;
  Primitives* current_ = nullptr;  // the last Forward's
  int batch_ = 0;
  std::map<int, std::unique_ptr<Primitives>> by_batch_;
  std::vector<float> y_;
  std::vector<float> dx_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CONV2D_H_
