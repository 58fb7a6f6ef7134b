// Fashion-MNIST (and MNIST) from the gzip-compressed IDX files:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz
// Debian's dataset-fashion-mnist package installs them in
// kFashionMnistDefaultDir. Pixels stay uint8 in memory and are converted to
// floats in [0, 1] one batch at a time.
//
// A loaded data set is read-only: safe to share between threads.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_FASHION_MNIST_H_
#define KUBEPS_WORKER_AGENT_TRAINER_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubeps::trainer {

inline constexpr char kFashionMnistDefaultDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr uint32_t kIdxImagesMagic = 2051;  // 0x00000803: uint8, 3 dims
inline constexpr uint32_t kIdxLabelsMagic = 2049;  // 0x00000801: uint8, 1 dim

struct Dataset {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count x (rows*cols), row-major
  std::vector<uint8_t> labels;  // count class ids

  int64_t size() const { return count; }
  int image_size() const { return rows * cols; }

  // Writes examples indices[0..n) in that order: images as n x image_size()
  // floats (pixel / 255), labels as n bytes. Indices must be < count.
  void Gather(const uint32_t* indices, int n, float* images, uint8_t* labels_out) const;

  // The same for the contiguous examples [begin, begin + n).
  void Slice(int64_t begin, int n, float* images, uint8_t* labels_out) const;
};

struct FashionMnist {
  Dataset train;  // 60000 examples
  Dataset test;   // 10000 examples
};

// Reads one gzip IDX image file (magic 2051, dims count x rows x cols).
Status ReadIdxImages(const std::string& path, int64_t* count, int* rows, int* cols,
                     std::vector<uint8_t>* pixels);

// Reads one gzip IDX label file (magic 2049, dim count).
Status ReadIdxLabels(const std::string& path, std::vector<uint8_t>* labels);

// Loads one split from `dir`: "train-*" when train, else "t10k-*". Checks
// that the images are 28x28, that the two files agree on the count, and that
// every label is in 0..9.
Status LoadFashionMnistSplit(const std::string& dir, bool train, Dataset* out);

// Loads both splits from `dir`.
Status LoadFashionMnist(const std::string& dir, FashionMnist* out);

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_FASHION_MNIST_H_
