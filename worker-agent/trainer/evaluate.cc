#include "worker-agent/trainer/evaluate.h"

#include <algorithm>
#include <vector>

namespace kubeps::trainer {

double Evaluate(Model& model, const Dataset& data, int batch, double* mean_loss) {
  if (batch <= 0) batch = 1;
  const int64_t n = data.size();
  std::vector<float> images(static_cast<size_t>(batch) * data.image_size());
  std::vector<uint8_t> labels(batch);
  std::vector<uint8_t> predictions(batch);
  int64_t correct = 0;
  double loss_sum = 0.0;
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int m = static_cast<int>(std::min<int64_t>(batch, n - begin));
    data.Slice(begin, m, images.data(), labels.data());
    const float loss = model.ForwardLoss(images.data(), labels.data(), m, predictions.data());
    loss_sum += static_cast<double>(loss) * m;
    for (int i = 0; i < m; ++i) correct += predictions[i] == labels[i] ? 1 : 0;
  }
  if (mean_loss != nullptr) *mean_loss = n > 0 ? loss_sum / static_cast<double>(n) : 0.0;
  return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

}  // namespace kubeps::trainer
