// Fashion-MNIST from its gzip-compressed IDX files (Debian's
// dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist):
// 28x28 grey images as floats in [0, 1] and their labels 0..9.
//
// A loaded split is read-only: safe to share between threads.
#ifndef KUBEPS_EXAMPLES_CPP_FASHION_MNIST_H_
#define KUBEPS_EXAMPLES_CPP_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace example {

struct Split {
  int count = 0;
  int pixels_per_image = 0;
  std::vector<float> images;    // count x pixels_per_image, row-major
  std::vector<uint8_t> labels;  // count labels
};

// Reads <dir>/<prefix>-images-idx3-ubyte.gz and <prefix>-labels-idx1-ubyte.gz
// (prefix "train" or "t10k"). On failure returns false with *error saying
// which file and what is wrong.
bool LoadSplit(const std::string& dir, const std::string& prefix, Split* out, std::string* error);

}  // namespace example

#endif  // KUBEPS_EXAMPLES_CPP_FASHION_MNIST_H_
