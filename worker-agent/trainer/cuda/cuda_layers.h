// Layer-level entry points into the CUDA backend, for tests and tools: each
// copies its host inputs to device 0, runs the same device functions the
// CUDA models run (device_ops.h, kernels.h) and copies the results back, so
// every layer can be compared with its CPU class on the same inputs.
// Host-only header; the layouts and meanings are those of the CPU layers
// named. Only in builds with KUBEPS_HAVE_CUDA=1, and they need a device.
// Throw std::runtime_error on CUDA errors.
//
// Not thread-safe: each call uses the calling thread's CUDA context and stream.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_LAYERS_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_LAYERS_H_

#include <cstdint>
#include <vector>

namespace kubeps::trainer::cuda_layers {

// Dense: x batch x in, w in x out, b out -> y batch x out.
std::vector<float> DenseForward(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int batch, int in, int out);
struct DenseGrads {
  std::vector<float> dw, db, dx;
};
// Backward of Dense from the forward input x and dy (batch x out).
DenseGrads DenseBackward(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& dy, int batch, int in, int out);

// Conv2D: x cin x batch x h x w (CNHW), w {cout, cin, k, k}, b cout ->
// y cout x batch x h x w.
std::vector<float> Conv2DForward(const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, int batch, int h, int width, int cin,
                                 int cout, int k);
struct ConvGrads {
  std::vector<float> dw, db, dx;
};
// Forward (for its im2col) then backward with dy (cout x batch x h x w).
ConvGrads Conv2DBackward(const std::vector<float>& x, const std::vector<float>& w,
                         const std::vector<float>& b, const std::vector<float>& dy, int batch,
                         int h, int width, int cin, int cout, int k);

// MaxPool2x2 on channels x batch planes of h x w: forward output and the
// backward of dy (channels x batch x h/2 x w/2).
struct PoolResult {
  std::vector<float> y, dx;
};
PoolResult MaxPool2x2(const std::vector<float>& x, const std::vector<float>& dy, int batch, int h,
                      int width, int channels);

// Relu::Forward(x) and Relu::Backward(y, dy) (returns the new dy).
std::vector<float> ReluForward(const std::vector<float>& x);
std::vector<float> ReluBackward(const std::vector<float>& y, const std::vector<float>& dy);

// SoftmaxCrossEntropy: mean loss, its gradient ((softmax - onehot)/batch)
// and SoftmaxCrossEntropy::Argmax of the logits.
struct LossResult {
  float loss = 0.0f;
  std::vector<float> grad;
  std::vector<uint8_t> argmax;
};
LossResult SoftmaxCrossEntropy(const std::vector<float>& logits, const std::vector<uint8_t>& labels,
                               int batch, int classes);

// The CNN flatten: channels x batch x plane -> batch x (channels*plane), and back.
std::vector<float> CnhwToRows(const std::vector<float>& x, int channels, int batch, int plane);
std::vector<float> RowsToCnhw(const std::vector<float>& rows, int channels, int batch, int plane);

}  // namespace kubeps::trainer::cuda_layers

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_LAYERS_H_
