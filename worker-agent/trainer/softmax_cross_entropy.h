// Softmax followed by the cross-entropy with integer labels, averaged over
// the batch. Numerically stable: the row maximum is subtracted before exp
// and the loss is computed as logsumexp(z) - z[label].
//
// Not thread-safe: a layer keeps what its backward pass needs between calls;
// it belongs to one model on one thread.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_SOFTMAX_CROSS_ENTROPY_H_
#define KUBEPS_WORKER_AGENT_TRAINER_SOFTMAX_CROSS_ENTROPY_H_

#include <cstdint>
#include <vector>

namespace kubeps::trainer {

class SoftmaxCrossEntropy {
 public:
  explicit SoftmaxCrossEntropy(int classes);

  int classes() const { return classes_; }

  // logits: batch x classes; labels: batch ids in [0, classes). Returns the
  // mean loss and keeps the probabilities for Backward.
  float Forward(const float* logits, const uint8_t* labels, int batch);

  // dL/dlogits of the mean loss: (softmax - onehot) / batch, batch x classes
  // (owned by the layer).
  const float* Backward();

  // predictions[i] = the index of the largest logit of row i (first on ties).
  static void Argmax(const float* logits, int batch, int classes, uint8_t* predictions);

 private:
  int classes_;
  int batch_ = 0;
  const uint8_t* labels_ = nullptr;
  std::vector<float> prob_;
  std::vector<float> grad_;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_SOFTMAX_CROSS_ENTROPY_H_
