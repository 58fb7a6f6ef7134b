// The Fashion-MNIST reader: the real files of Debian's dataset-fashion-mnist
// and the errors for missing, corrupt and truncated files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "worker-agent/trainer/fashion_mnist.h"

namespace kubeps::trainer {
namespace {

bool HaveRealData() {
  return access((std::string(kFashionMnistDefaultDir) + "/train-images-idx3-ubyte.gz").c_str(),
                R_OK) == 0;
}

// The real data set, loaded once for all tests.
const FashionMnist& RealData() {
  static const FashionMnist* data = [] {
    auto* d = new FashionMnist;
    const Status s = LoadFashionMnist(kFashionMnistDefaultDir, d);
    EXPECT_TRUE(s.ok()) << s.message();
    return d;
  }();
  return *data;
}

#define REQUIRE_REAL_DATA()                                         \
  if (!HaveRealData())                                              \
  GTEST_SKIP() << "no Fashion-MNIST in " << kFashionMnistDefaultDir \
               << " (apt-get install dataset-fashion-mnist)"

TEST(FashionMnistTest, RealFilesHaveTheRightShape) {
  REQUIRE_REAL_DATA();
  const FashionMnist& d = RealData();
  EXPECT_EQ(d.train.count, 60000);
  EXPECT_EQ(d.test.count, 10000);
  for (const Dataset* s : {&d.train, &d.test}) {
    EXPECT_EQ(s->rows, 28);
    EXPECT_EQ(s->cols, 28);
    EXPECT_EQ(s->image_size(), 784);
    EXPECT_EQ(s->pixels.size(), static_cast<size_t>(s->count) * 784);
    EXPECT_EQ(s->labels.size(), static_cast<size_t>(s->count));
    for (uint8_t y : s->labels) ASSERT_LT(y, 10);
  }
}

TEST(FashionMnistTest, LabelHistogramIsBalanced) {
  REQUIRE_REAL_DATA();
  const FashionMnist& d = RealData();
  std::array<int, 10> train{}, test{};
  for (uint8_t y : d.train.labels) ++train[y];
  for (uint8_t y : d.test.labels) ++test[y];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train[c], 6000) << "class " << c;
    EXPECT_EQ(test[c], 1000) << "class " << c;
  }
}

TEST(FashionMnistTest, PixelsLookLikeImages) {
  REQUIRE_REAL_DATA();
  const Dataset& train = RealData().train;
  // Known values of the first training example (an ankle boot, label 9),
  // and a mean intensity near 72.9 / 255 over the whole set.
  EXPECT_EQ(train.labels[0], 9);
  EXPECT_EQ(train.labels[1], 0);
  double sum = 0;
  for (uint8_t p : train.pixels) sum += p;
  EXPECT_NEAR(sum / train.pixels.size(), 72.94, 0.05);
  // Conversion to floats in [0, 1].
  std::vector<float> images(2 * 784);
  std::vector<uint8_t> labels(2);
  const uint32_t idx[2] = {1, 0};
  train.Gather(idx, 2, images.data(), labels.data());
  EXPECT_EQ(labels[0], 0);
  EXPECT_EQ(labels[1], 9);
  for (int i = 0; i < 784; ++i) {
    ASSERT_FLOAT_EQ(images[784 + i], train.pixels[i] / 255.0f);
    ASSERT_GE(images[i], 0.0f);
    ASSERT_LE(images[i], 1.0f);
  }
  std::vector<float> slice(784);
  uint8_t label;
  train.Slice(0, 1, slice.data(), &label);
  EXPECT_EQ(label, 9);
  EXPECT_EQ(std::vector<float>(images.begin() + 784, images.end()), slice);
}

// ---------------------------------------------------------------- corrupt files

class FashionMnistErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubeps_fmnist_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }

  std::string Path(const std::string& name) { return dir_ + "/" + name; }

  // Writes `bytes` gzip-compressed to dir/name.
  void WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = Path(name);
    files_.push_back(path);
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  }

  void WriteRaw(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = Path(name);
    files_.push_back(path);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }

  static void Put32(std::vector<uint8_t>& v, uint32_t x) {
    v.push_back(static_cast<uint8_t>(x >> 24));
    v.push_back(static_cast<uint8_t>(x >> 16));
    v.push_back(static_cast<uint8_t>(x >> 8));
    v.push_back(static_cast<uint8_t>(x));
  }

  static std::vector<uint8_t> Images(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols,
                                     size_t pixel_bytes) {
    std::vector<uint8_t> v;
    Put32(v, magic);
    Put32(v, count);
    Put32(v, rows);
    Put32(v, cols);
    for (size_t i = 0; i < pixel_bytes; ++i) v.push_back(static_cast<uint8_t>(i * 7));
    return v;
  }

  static std::vector<uint8_t> Labels(uint32_t magic, uint32_t count, size_t label_bytes,
                                     uint8_t value = 3) {
    std::vector<uint8_t> v;
    Put32(v, magic);
    Put32(v, count);
    for (size_t i = 0; i < label_bytes; ++i) v.push_back(value);
    return v;
  }

  // A good t10k pair of n images.
  void WriteGoodTestSplit(uint32_t n) {
    WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, n, 28, 28, n * 784));
    WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, n, n));
  }

  Status LoadTest() {
    Dataset d;
    return LoadFashionMnistSplit(dir_, /*train=*/false, &d);
  }

  std::string dir_;
  std::vector<std::string> files_;
};

#define EXPECT_ERROR_MENTIONS(status, a, b)                             \
  do {                                                                  \
    const Status s_ = (status);                                         \
    ASSERT_FALSE(s_.ok());                                              \
    EXPECT_NE(s_.message().find(a), std::string::npos) << s_.message(); \
    EXPECT_NE(s_.message().find(b), std::string::npos) << s_.message(); \
  } while (0)

TEST_F(FashionMnistErrorsTest, SmallGoodFilesLoad) {
  WriteGoodTestSplit(5);
  Dataset d;
  const Status s = LoadFashionMnistSplit(dir_, false, &d);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(d.count, 5);
  EXPECT_EQ(d.pixels[784 + 1], static_cast<uint8_t>((784 + 1) * 7));
}

TEST_F(FashionMnistErrorsTest, MissingFile) {
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "cannot open");
  FashionMnist all;
  EXPECT_ERROR_MENTIONS(LoadFashionMnist(dir_, &all), Path("train-images-idx3-ubyte.gz"),
                        "No such file");
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 1, 28, 28, 784));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-labels-idx1-ubyte.gz"), "cannot open");
}

TEST_F(FashionMnistErrorsTest, BadMagicNumber) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2049, 1, 28, 28, 784));  // a label magic
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 1, 1));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"),
                        "bad magic number 2049, expected 2051");
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 1, 28, 28, 784));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(0x12345678, 1, 1));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-labels-idx1-ubyte.gz"), "expected 2049");
}

TEST_F(FashionMnistErrorsTest, TruncatedPixelData) {
  // The header promises 3 images, the file holds 2.5.
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 3, 28, 28, 2 * 784 + 392));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 3, 3));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "truncated");
  const Status s = LoadTest();
  EXPECT_NE(s.message().find("2352 bytes but only 1960"), std::string::npos) << s.message();
}

TEST_F(FashionMnistErrorsTest, TruncatedHeaderAndLabels) {
  WriteGz("t10k-images-idx3-ubyte.gz", {0, 0, 8, 3, 0, 0});
  EXPECT_ERROR_MENTIONS(LoadTest(), "header", "truncated");
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 4, 28, 28, 4 * 784));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 4, 2));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-labels-idx1-ubyte.gz"), "truncated");
  WriteGz("t10k-labels-idx1-ubyte.gz", {});
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-labels-idx1-ubyte.gz"), "truncated");
}

TEST_F(FashionMnistErrorsTest, TruncatedGzipStream) {
  // A valid gzip file of 10 images, cut in the middle of the compressed data.
  WriteGz("full.gz", Images(2051, 10, 28, 28, 10 * 784));
  std::ifstream in(Path("full.gz"), std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 100u);
  gz.resize(gz.size() / 2);
  WriteRaw("t10k-images-idx3-ubyte.gz", gz);
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 10, 10));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "truncated");
}

TEST_F(FashionMnistErrorsTest, TrailingData) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 2, 28, 28, 2 * 784 + 1));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 2, 2));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "unexpected data after");
}

TEST_F(FashionMnistErrorsTest, CountMismatch) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 3, 28, 28, 3 * 784));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 2, 2));
  EXPECT_ERROR_MENTIONS(LoadTest(), "has 2 labels", "has 3 images");
}

TEST_F(FashionMnistErrorsTest, WrongImageSize) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 1, 32, 32, 1024));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 1, 1));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "32x32, expected 28x28");
  // The low-level reader accepts any size.
  int64_t count = 0;
  int rows = 0, cols = 0;
  std::vector<uint8_t> pixels;
  ASSERT_TRUE(ReadIdxImages(Path("t10k-images-idx3-ubyte.gz"), &count, &rows, &cols, &pixels).ok());
  EXPECT_EQ(rows, 32);
  EXPECT_EQ(pixels.size(), 1024u);
}

TEST_F(FashionMnistErrorsTest, ImplausibleDimensions) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 0xFFFFFFFF, 0xFFFF, 0xFFFF, 0));
  EXPECT_ERROR_MENTIONS(LoadTest(), Path("t10k-images-idx3-ubyte.gz"), "implausible");
}

TEST_F(FashionMnistErrorsTest, LabelOutOfRange) {
  WriteGz("t10k-images-idx3-ubyte.gz", Images(2051, 2, 28, 28, 2 * 784));
  WriteGz("t10k-labels-idx1-ubyte.gz", Labels(2049, 2, 2, /*value=*/10));
  EXPECT_ERROR_MENTIONS(LoadTest(), "label 10 of item 0", "0..9");
}

}  // namespace
}  // namespace kubeps::trainer
