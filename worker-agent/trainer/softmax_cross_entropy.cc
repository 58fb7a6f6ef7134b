#include "worker-agent/trainer/softmax_cross_entropy.h"

#include <cassert>
#include <cmath>

#include "worker-agent/trainer/buffer.h"

namespace kubeps::trainer {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(int classes) : classes_(classes) {}

float SoftmaxCrossEntropy::Forward(const float* logits, const uint8_t* labels, int batch) {
  batch_ = batch;
  labels_ = labels;
  float* prob = EnsureSize(prob_, static_cast<size_t>(batch) * classes_);
  double total = 0.0;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * classes_;
    float* p = prob + static_cast<size_t>(i) * classes_;
    float m = z[0];
    for (int c = 1; c < classes_; ++c) m = z[c] > m ? z[c] : m;
    double sum = 0.0;
    for (int c = 0; c < classes_; ++c) {
      p[c] = std::exp(z[c] - m);
      sum += p[c];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int c = 0; c < classes_; ++c) p[c] *= inv;
    assert(labels[i] < classes_);
    // -log softmax(z)[label] = log(sum exp(z - m)) - (z[label] - m)
    total += std::log(sum) - (static_cast<double>(z[labels[i]]) - m);
  }
  return batch > 0 ? static_cast<float>(total / batch) : 0.0f;
}

const float* SoftmaxCrossEntropy::Backward() {
  const size_t n = static_cast<size_t>(batch_) * classes_;
  float* g = EnsureSize(grad_, n);
  const float* prob = prob_.data();
  const float scale = 1.0f / static_cast<float>(batch_);
  for (int i = 0; i < batch_; ++i) {
    const float* p = prob + static_cast<size_t>(i) * classes_;
    float* gi = g + static_cast<size_t>(i) * classes_;
    for (int c = 0; c < classes_; ++c) gi[c] = p[c];
    gi[labels_[i]] -= 1.0f;
    for (int c = 0; c < classes_; ++c) gi[c] *= scale;
  }
  return g;
}

void SoftmaxCrossEntropy::Argmax(const float* logits, int batch, int classes,
                                 uint8_t* predictions) {
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    predictions[i] = static_cast<uint8_t>(best);
  }
}

}  // namespace kubeps::trainer
