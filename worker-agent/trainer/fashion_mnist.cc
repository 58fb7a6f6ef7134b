#include "worker-agent/trainer/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

namespace kubeps::trainer {
namespace {

// Pixels per image the models expect, and the number of classes.
constexpr int kRows = 28;
constexpr int kCols = 28;
constexpr int kClasses = 10;
// A sanity bound on the element count, so a corrupt header cannot make us
// allocate absurd amounts of memory (60000 x 784 is about 47 MB).
constexpr uint64_t kMaxElements = uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

Status Open(const std::string& path, GzFile* file) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::Error(path +
                         ": cannot open: " + (errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  file->reset(f);
  return Status::Ok();
}

// Reads exactly n bytes; `what` names the part being read for messages.
Status ReadExactly(gzFile f, const std::string& path, const char* what, uint8_t* dst, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    const int got = gzread(f, dst + done, chunk);
    if (got > 0) {
      done += static_cast<uint64_t>(got);
      continue;
    }
    int err = Z_OK;
    const char* msg = got < 0 ? gzerror(f, &err) : nullptr;
    // A gzip stream cut short reads as Z_BUF_ERROR ("unexpected end of file").
    if (got == 0 || err == Z_BUF_ERROR) {
      return Status::Error(path + ": truncated file: the " + what + " should be " +
                           std::to_string(n) + " bytes but only " + std::to_string(done) +
                           " could be read");
    }
    return Status::Error(path + ": corrupt gzip data while reading the " + what + ": " +
                         (msg != nullptr ? msg : "unknown error"));
  }
  return Status::Ok();
}

// Checks that nothing follows the data the header announced.
Status ExpectEnd(gzFile f, const std::string& path) {
  uint8_t extra[1];
  const int got = gzread(f, extra, 1);
  if (got < 0) {
    int err = 0;
    const char* msg = gzerror(f, &err);
    return Status::Error(path + ": corrupt gzip data after the last item: " +
                         (msg != nullptr ? msg : "unknown error"));
  }
  if (got > 0) {
    return Status::Error(path + ": unexpected data after the last item the header announced");
  }
  return Status::Ok();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

Status ReadHeader(gzFile f, const std::string& path, uint32_t expected_magic, int dims,
                  uint32_t* sizes) {
  uint8_t header[16];
  Status s = ReadExactly(f, path, "header", header, 4 + 4 * static_cast<uint64_t>(dims));
  if (!s.ok()) return s;
  const uint32_t magic = BigEndian32(header);
  if (magic != expected_magic) {
    return Status::Error(
        path + ": bad magic number " + std::to_string(magic) + ", expected " +
        std::to_string(expected_magic) +
        (expected_magic == kIdxImagesMagic ? " (IDX uint8 images)" : " (IDX uint8 labels)"));
  }
  for (int i = 0; i < dims; ++i) sizes[i] = BigEndian32(header + 4 + 4 * i);
  return Status::Ok();
}

void ToFloat(const uint8_t* __restrict src, size_t n, float* __restrict dst) {
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * kScale;
}

}  // namespace

void Dataset::Gather(const uint32_t* indices, int n, float* images, uint8_t* labels_out) const {
  const size_t image = static_cast<size_t>(image_size());
  for (int i = 0; i < n; ++i) {
    const size_t k = indices[i];
    ToFloat(pixels.data() + k * image, image, images + static_cast<size_t>(i) * image);
    labels_out[i] = labels[k];
  }
}

void Dataset::Slice(int64_t begin, int n, float* images, uint8_t* labels_out) const {
  const size_t image = static_cast<size_t>(image_size());
  ToFloat(pixels.data() + static_cast<size_t>(begin) * image, static_cast<size_t>(n) * image,
          images);
  std::memcpy(labels_out, labels.data() + begin, static_cast<size_t>(n));
}

Status ReadIdxImages(const std::string& path, int64_t* count, int* rows, int* cols,
                     std::vector<uint8_t>* pixels) {
  GzFile file;
  Status s = Open(path, &file);
  if (!s.ok()) return s;
  uint32_t dims[3];
  s = ReadHeader(file.get(), path, kIdxImagesMagic, 3, dims);
  if (!s.ok()) return s;
  const uint64_t total = uint64_t{dims[0]} * dims[1] * dims[2];
  if (dims[1] == 0 || dims[2] == 0 || dims[1] > 65535 || dims[2] > 65535 || total > kMaxElements) {
    return Status::Error(path + ": implausible image dimensions " + std::to_string(dims[0]) +
                         " x " + std::to_string(dims[1]) + " x " + std::to_string(dims[2]));
  }
  std::vector<uint8_t> data(total);
  s = ReadExactly(file.get(), path, "pixel data", data.data(), total);
  if (!s.ok()) return s;
  s = ExpectEnd(file.get(), path);
  if (!s.ok()) return s;
  *count = dims[0];
  *rows = static_cast<int>(dims[1]);
  *cols = static_cast<int>(dims[2]);
  *pixels = std::move(data);
  return Status::Ok();
}

Status ReadIdxLabels(const std::string& path, std::vector<uint8_t>* labels) {
  GzFile file;
  Status s = Open(path, &file);
  if (!s.ok()) return s;
  uint32_t count = 0;
  s = ReadHeader(file.get(), path, kIdxLabelsMagic, 1, &count);
  if (!s.ok()) return s;
  if (count > kMaxElements) {
    return Status::Error(path + ": implausible label count " + std::to_string(count));
  }
  std::vector<uint8_t> data(count);
  s = ReadExactly(file.get(), path, "label data", data.data(), count);
  if (!s.ok()) return s;
  s = ExpectEnd(file.get(), path);
  if (!s.ok()) return s;
  *labels = std::move(data);
  return Status::Ok();
}

Status LoadFashionMnistSplit(const std::string& dir, bool train, Dataset* out) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  Dataset d;
  Status s = ReadIdxImages(images_path, &d.count, &d.rows, &d.cols, &d.pixels);
  if (!s.ok()) return s;
  if (d.rows != kRows || d.cols != kCols) {
    return Status::Error(images_path + ": images are " + std::to_string(d.rows) + "x" +
                         std::to_string(d.cols) + ", expected " + std::to_string(kRows) + "x" +
                         std::to_string(kCols));
  }
  s = ReadIdxLabels(labels_path, &d.labels);
  if (!s.ok()) return s;
  if (static_cast<int64_t>(d.labels.size()) != d.count) {
    return Status::Error(labels_path + ": has " + std::to_string(d.labels.size()) + " labels but " +
                         images_path + " has " + std::to_string(d.count) + " images");
  }
  for (size_t i = 0; i < d.labels.size(); ++i) {
    if (d.labels[i] >= kClasses) {
      return Status::Error(labels_path + ": label " + std::to_string(d.labels[i]) + " of item " +
                           std::to_string(i) + " is not in 0.." + std::to_string(kClasses - 1));
    }
  }
  *out = std::move(d);
  return Status::Ok();
}

Status LoadFashionMnist(const std::string& dir, FashionMnist* out) {
  FashionMnist data;
  Status s = LoadFashionMnistSplit(dir, /*train=*/true, &data.train);
  if (!s.ok()) return s;
  s = LoadFashionMnistSplit(dir, /*train=*/false, &data.test);
  if (!s.ok()) return s;
  *out = std::move(data);
  return Status::Ok();
}

}  // namespace kubeps::trainer
