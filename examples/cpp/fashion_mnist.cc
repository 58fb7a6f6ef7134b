#include "fashion_mnist.h"

#include <zlib.h>

#include <memory>

namespace example {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // uint8 data, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // uint8 data, 1 dimension

// A whole gzip file, decompressed.
bool ReadGzip(const std::string& path, std::vector<uint8_t>* bytes, std::string* error) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) {
    *error = "cannot open " + path;
    return false;
  }
  bytes->clear();
  uint8_t buffer[1 << 16];
  for (;;) {
    const int n = gzread(file.get(), buffer, sizeof buffer);
    if (n < 0) {
      *error = "cannot decompress " + path;
      return false;
    }
    if (n == 0) return true;
    bytes->insert(bytes->end(), buffer, buffer + n);
  }
}

// The big-endian 32-bit integer at `offset`.
uint32_t BigEndian(const std::vector<uint8_t>& bytes, size_t offset) {
  return uint32_t{bytes[offset]} << 24 | uint32_t{bytes[offset + 1]} << 16 |
         uint32_t{bytes[offset + 2]} << 8 | bytes[offset + 3];
}

}  // namespace

bool LoadSplit(const std::string& dir, const std::string& prefix, Split* out, std::string* error) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  std::vector<uint8_t> images, labels;
  if (!ReadGzip(images_path, &images, error) || !ReadGzip(labels_path, &labels, error)) {
    return false;
  }
  if (images.size() < 16 || BigEndian(images, 0) != kImagesMagic) {
    *error = images_path + " is not an IDX file of images";
    return false;
  }
  if (labels.size() < 8 || BigEndian(labels, 0) != kLabelsMagic) {
    *error = labels_path + " is not an IDX file of labels";
    return false;
  }
  const uint64_t count = BigEndian(images, 4);
  const uint64_t pixels = uint64_t{BigEndian(images, 8)} * BigEndian(images, 12);
  if (images.size() != 16 + count * pixels || labels.size() != 8 + count ||
      BigEndian(labels, 4) != count) {
    *error = images_path + " and " + labels_path + " disagree on the number of examples";
    return false;
  }
  out->count = static_cast<int>(count);
  out->pixels_per_image = static_cast<int>(pixels);
  out->images.resize(count * pixels);
  for (size_t i = 0; i < out->images.size(); ++i) out->images[i] = images[16 + i] / 255.0f;
  out->labels.assign(labels.begin() + 8, labels.end());
  for (uint8_t label : out->labels) {
    if (label > 9) {
      *error = labels_path + " has a label over 9";
      return false;
    }
  }
  return true;
}

}  // namespace example
