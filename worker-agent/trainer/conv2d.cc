#include "worker-agent/trainer/conv2d.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <cassert>
#include <optional>
#include <unordered_map>

#include "worker-agent/trainer/buffer.h"

namespace kubeps::trainer {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Args = std::unordered_map<int, memory>;
constexpr memory::data_type kF32 = memory::data_type::f32;

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// batch x channels x H x W as oneDNN names the dimensions, laid out CNHW.
memory::desc Cnhw(int batch, int channels, int h, int w) {
  const memory::dim plane = static_cast<memory::dim>(h) * w;
  return memory::desc({batch, channels, h, w}, kF32, {plane, batch * plane, w, 1});
}

// Lets oneDNN choose the layout it computes fastest in.
memory::desc Any(int batch, int channels, int h, int w) {
  return memory::desc({batch, channels, h, w}, kF32, Tag::any);
}

memory::desc AnyWeights(int cout, int cin, int k) {
  return memory::desc({cout, cin, k, k}, kF32, Tag::any);
}

// The three convolutions, stride 1 and `pad` on every side. oneDNN 3 (newer
// distributions) builds a primitive descriptor in one call where oneDNN 2
// (Debian bookworm) first builds an operation descriptor.
using ForwardPd = dnnl::convolution_forward::primitive_desc;
using DataPd = dnnl::convolution_backward_data::primitive_desc;
using WeightsPd = dnnl::convolution_backward_weights::primitive_desc;
constexpr auto kTraining = dnnl::prop_kind::forward_training;
constexpr auto kDirect = dnnl::algorithm::convolution_direct;

ForwardPd ForwardDesc(int batch, int h, int w, int cin, int cout, int k, memory::dim pad,
                      const memory::desc& bias) {
#if DNNL_VERSION_MAJOR >= 3
  return ForwardPd(CpuEngine(), kTraining, kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k),
                   bias, Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad});
#else
  return ForwardPd(dnnl::convolution_forward::desc(
                       kTraining, kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k), bias,
                       Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad}),
                   CpuEngine());
#endif
}

DataPd BackwardDataDesc(int batch, int h, int w, int cin, int cout, int k, memory::dim pad,
                        const ForwardPd& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return DataPd(CpuEngine(), kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k),
                Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad}, hint);
#else
  return DataPd(dnnl::convolution_backward_data::desc(
                    kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k),
                    Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad}),
                CpuEngine(), hint);
#endif
}

WeightsPd BackwardWeightsDesc(int batch, int h, int w, int cin, int cout, int k, memory::dim pad,
                              const memory::desc& bias, const ForwardPd& hint) {
#if DNNL_VERSION_MAJOR >= 3
  return WeightsPd(CpuEngine(), kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k), bias,
                   Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad}, hint);
#else
  return WeightsPd(dnnl::convolution_backward_weights::desc(
                       kDirect, Any(batch, cin, h, w), AnyWeights(cout, cin, k), bias,
                       Any(batch, cout, h, w), {1, 1}, {pad, pad}, {pad, pad}),
                   CpuEngine(), hint);
#endif
}

// Moves `from` into memory of layout `to`: a reorder where the layouts
// differ, a copy where oneDNN chose the same one.
struct Converter {
  Converter(const memory::desc& from, const memory::desc& to)
      : reorder(dnnl::reorder::primitive_desc(CpuEngine(), from, CpuEngine(), to)) {}
  void Run(dnnl::stream& stream, const memory& from, const memory& to) {
    reorder.execute(stream, const_cast<memory&>(from), const_cast<memory&>(to));
  }
  dnnl::reorder reorder;
};

}  // namespace

struct Conv2D::Primitives {
  Primitives(int batch, int h, int w, int cin, int cout, int k, int pad)
      : user_src(Cnhw(batch, cin, h, w)),
        user_dst(Cnhw(batch, cout, h, w)),
        user_weights({cout, cin, k, k}, kF32, Tag::oihw),
        bias({cout}, kF32, Tag::x),
        forward_pd(ForwardDesc(batch, h, w, cin, cout, k, pad, bias)),
        data_pd(BackwardDataDesc(batch, h, w, cin, cout, k, pad, forward_pd)),
        weights_pd(BackwardWeightsDesc(batch, h, w, cin, cout, k, pad, bias, forward_pd)),
        forward(forward_pd),
        backward_data(data_pd),
        backward_weights(weights_pd),
        src(forward_pd.src_desc(), CpuEngine()),
        weights(forward_pd.weights_desc(), CpuEngine()),
        dst(forward_pd.dst_desc(), CpuEngine()),
        src_in(user_src, forward_pd.src_desc()),
        weights_in(user_weights, forward_pd.weights_desc()),
        dst_out(forward_pd.dst_desc(), user_dst),
        weights_diff_dst(weights_pd.diff_dst_desc(), CpuEngine()),
        diff_weights(weights_pd.diff_weights_desc(), CpuEngine()),
        diff_dst_in(user_dst, weights_pd.diff_dst_desc()),
        diff_weights_out(weights_pd.diff_weights_desc(), user_weights) {
    // The backward passes may want the forward's tensors in other layouts.
    if (weights_pd.src_desc() != forward_pd.src_desc()) {
      weights_src = memory(weights_pd.src_desc(), CpuEngine());
      src_for_weights.emplace(forward_pd.src_desc(), weights_pd.src_desc());
    }
  }

  // Backward data's memory, made on its first use: the first layer never
  // needs its input gradient.
  void PrepareBackwardData() {
    if (data_diff_src) return;
    data_diff_src = memory(data_pd.diff_src_desc(), CpuEngine());
    data_weights = memory(data_pd.weights_desc(), CpuEngine());
    data_weights_in.emplace(user_weights, data_pd.weights_desc());
    diff_src_out.emplace(data_pd.diff_src_desc(), user_src);
    if (data_pd.diff_dst_desc() != weights_pd.diff_dst_desc()) {
      data_diff_dst = memory(data_pd.diff_dst_desc(), CpuEngine());
      diff_dst_for_data.emplace(weights_pd.diff_dst_desc(), data_pd.diff_dst_desc());
    }
  }

  memory::desc user_src, user_dst, user_weights, bias;
  ForwardPd forward_pd;
  DataPd data_pd;
  WeightsPd weights_pd;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
  dnnl::stream stream{CpuEngine()};
  // Forward: the input (kept for the weight gradient), weights and output
  // in oneDNN's layouts, and the reorders from and to the caller's.
  memory src, weights, dst;
  Converter src_in, weights_in, dst_out;
  memory weights_src;  // empty where backward weights reads `src` as it is
  std::optional<Converter> src_for_weights;
  // Backward weights.
  memory weights_diff_dst, diff_weights;
  Converter diff_dst_in, diff_weights_out;
  // Backward data.
  memory data_diff_src, data_weights, data_diff_dst;  // data_diff_dst: as above
  std::optional<Converter> data_weights_in, diff_src_out, diff_dst_for_data;
};

Conv2D::Conv2D(int height, int width, int in_channels, int out_channels, int kernel)
    : h_(height), w_(width), cin_(in_channels), cout_(out_channels), k_(kernel), pad_(kernel / 2) {
  assert(kernel % 2 == 1);
}

Conv2D::~Conv2D() = default;

void Conv2D::Bind(Parameter* weight, Parameter* bias) {
  assert(weight->value.size() == static_cast<size_t>(k_) * k_ * cin_ * cout_);
  assert(bias->value.size() == static_cast<size_t>(cout_));
  weight_ = weight;
  bias_ = bias;
}

Conv2D::Primitives& Conv2D::For(int batch) {
  std::unique_ptr<Primitives>& p = by_batch_[batch];
  if (!p) p = std::make_unique<Primitives>(batch, h_, w_, cin_, cout_, k_, pad_);
  return *p;
}

float* Conv2D::Forward(const float* x, int batch) {
  Primitives& p = For(batch);
  current_ = &p;
  batch_ = batch;
  const size_t out_size = static_cast<size_t>(cout_) * batch * h_ * w_;
  float* y = EnsureSize(y_, out_size);
  const dnnl::engine& cpu = CpuEngine();
  p.src_in.Run(p.stream, memory(p.user_src, cpu, const_cast<float*>(x)), p.src);
  p.weights_in.Run(p.stream, memory(p.user_weights, cpu, weight_->value.data()), p.weights);
  p.forward.execute(p.stream, Args{{DNNL_ARG_SRC, p.src},
                                   {DNNL_ARG_WEIGHTS, p.weights},
                                   {DNNL_ARG_BIAS, memory(p.bias, cpu, bias_->value.data())},
                                   {DNNL_ARG_DST, p.dst}});
  p.dst_out.Run(p.stream, p.dst, memory(p.user_dst, cpu, y));
  p.stream.wait();
  return y;
}

float* Conv2D::Backward(const float* dy, bool need_input_grad) {
  assert(current_ != nullptr);
  Primitives& p = *current_;
  const dnnl::engine& cpu = CpuEngine();
  weight_->grad.resize(weight_->value.size());
  bias_->grad.resize(bias_->value.size());
  p.diff_dst_in.Run(p.stream, memory(p.user_dst, cpu, const_cast<float*>(dy)), p.weights_diff_dst);
  memory src = p.src;
  if (p.src_for_weights) {
    p.src_for_weights->Run(p.stream, p.src, p.weights_src);
    src = p.weights_src;
  }
  p.backward_weights.execute(p.stream,
                             Args{{DNNL_ARG_SRC, src},
                                  {DNNL_ARG_DIFF_DST, p.weights_diff_dst},
                                  {DNNL_ARG_DIFF_WEIGHTS, p.diff_weights},
                                  {DNNL_ARG_DIFF_BIAS, memory(p.bias, cpu, bias_->grad.data())}});
  p.diff_weights_out.Run(p.stream, p.diff_weights,
                         memory(p.user_weights, cpu, weight_->grad.data()));
  if (!need_input_grad) {
    p.stream.wait();
    return nullptr;
  }
  p.PrepareBackwardData();
  memory diff_dst = p.weights_diff_dst;
  if (p.diff_dst_for_data) {
    p.diff_dst_for_data->Run(p.stream, p.weights_diff_dst, p.data_diff_dst);
    diff_dst = p.data_diff_dst;
  }
  p.data_weights_in->Run(p.stream, memory(p.user_weights, cpu, weight_->value.data()),
                         p.data_weights);
  p.backward_data.execute(p.stream, Args{{DNNL_ARG_DIFF_DST, diff_dst},
                                         {DNNL_ARG_WEIGHTS, p.data_weights},
                                         {DNNL_ARG_DIFF_SRC, p.data_diff_src}});
  float* dx = EnsureSize(dx_, static_cast<size_t>(cin_) * batch_ * h_ * w_);
  p.diff_src_out->Run(p.stream, p.data_diff_src, memory(p.user_src, cpu, dx));
  p.stream.wait();
  return dx;
}

}  // namespace kubeps::trainer
