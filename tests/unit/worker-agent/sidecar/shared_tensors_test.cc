// The session's shared-memory file: 64-byte aligned regions, values first;
// a file the other side can map; deleted with its owner; leftovers of a
// killed agent swept; or a link to the KV client's own segment.
#include "worker-agent/sidecar/shared_tensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kubeps::sidecar {
namespace {

using ::testing::HasSubstr;

class SharedTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kubeps-shm-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST(LayOutRegionsTest, ValuesThenGradsEachOnA64ByteBoundary) {
  uint64_t bytes = 0;
  const auto regions = LayOutRegions({3, 16, 1}, &bytes);
  ASSERT_EQ(regions.size(), 3u);
  EXPECT_EQ(regions[0].values_offset, 0u);
  EXPECT_EQ(regions[1].values_offset, 64u) << "12 bytes, rounded up to 64";
  EXPECT_EQ(regions[2].values_offset, 128u) << "64 bytes exactly need no padding";
  EXPECT_EQ(regions[0].grads_offset, 192u);
  EXPECT_EQ(regions[1].grads_offset, 256u);
  EXPECT_EQ(regions[2].grads_offset, 320u);
  EXPECT_EQ(bytes, 384u);
  for (const auto& r : regions) {
    EXPECT_EQ(r.values_offset % kRegionAlignment, 0u);
    EXPECT_EQ(r.grads_offset % kRegionAlignment, 0u);
  }
  EXPECT_EQ(regions[1].numel, 16u);
}

TEST_F(SharedTensorsTest, TheFileIsPrivateSizedAndSharedWithAnotherMapping) {
  std::unique_ptr<SharedTensors> tensors;
  Status s = SharedTensors::Create(dir_, {4, 2}, &tensors);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(tensors->path(), dir_ + "/" + tensors->file_name());
  EXPECT_THAT(tensors->file_name(), ::testing::MatchesRegex("tensors-[0-9a-f]{16}\\.shm"));
  struct stat info {};
  ASSERT_EQ(::stat(tensors->path().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(info.st_size), tensors->bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensors->grads(1)) % kRegionAlignment, 0u);

  // What the client writes through its own mapping, the agent reads.
  int fd = ::open(tensors->path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* other = ::mmap(nullptr, tensors->bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(other, MAP_FAILED);
  float* client_grads =
      reinterpret_cast<float*>(static_cast<char*>(other) + tensors->regions()[1].grads_offset);
  client_grads[1] = 2.5f;
  EXPECT_EQ(tensors->grads(1)[1], 2.5f);
  tensors->values(0)[3] = -1.0f;
  EXPECT_EQ(reinterpret_cast<float*>(other)[3], -1.0f);
  ::munmap(other, tensors->bytes());

  const std::string path = tensors->path();
  tensors.reset();
  EXPECT_FALSE(std::filesystem::exists(path)) << "the file outlived its session";
}

// Where the KV client holds the tensors in its own segment, the session's
// file is a link to it: the program maps the memory the KV client reads and
// writes, and the session's end removes the link, not the segment.
TEST_F(SharedTensorsTest, ALinkToTheKVClientsSegmentSharesItsMemoryAndLeavesItBehind) {
  const std::string segment_path = dir_ + "/segment";
  std::vector<float> floats(64, 0.0f);
  std::ofstream(segment_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
  int fd = ::open(segment_path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint64_t bytes = floats.size() * sizeof(float);
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  char* base = static_cast<char*>(mapped);
  std::vector<TensorRegion> regions = {{4, 64, 128}};
  std::unique_ptr<SharedTensors> tensors;
  Status s = SharedTensors::Link(dir_, SegmentFile{segment_path, base, bytes}, regions, &tensors);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_THAT(tensors->file_name(), ::testing::MatchesRegex("tensors-[0-9a-f]{16}\\.shm"));
  EXPECT_EQ(std::filesystem::read_symlink(tensors->path()), segment_path);
  EXPECT_EQ(tensors->bytes(), bytes);
  EXPECT_EQ(tensors->values(0), reinterpret_cast<float*>(base + 64));
  EXPECT_EQ(tensors->grads(0), reinterpret_cast<float*>(base + 128));

  // The program opens the file the session names: it maps the segment.
  fd = ::open(tensors->path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* program = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(program, MAP_FAILED);
  reinterpret_cast<float*>(static_cast<char*>(program) + 128)[2] = 7.5f;
  EXPECT_EQ(tensors->grads(0)[2], 7.5f);
  ::munmap(program, bytes);

  const std::string link = tensors->path();
  tensors.reset();
  EXPECT_FALSE(std::filesystem::is_symlink(link)) << "the link outlived its session";
  EXPECT_TRUE(std::filesystem::exists(segment_path)) << "the session deleted the KV client's file";
  EXPECT_EQ(reinterpret_cast<float*>(base + 128)[2], 7.5f) << "the KV client's mapping is gone";
  ::munmap(mapped, bytes);
}

TEST_F(SharedTensorsTest, TwoSessionsGetTwoFiles) {
  std::unique_ptr<SharedTensors> a, b;
  ASSERT_TRUE(SharedTensors::Create(dir_, {1}, &a).ok());
  ASSERT_TRUE(SharedTensors::Create(dir_, {1}, &b).ok());
  EXPECT_NE(a->file_name(), b->file_name());
}

TEST_F(SharedTensorsTest, AMissingDirectoryIsAnErrorNamingIt) {
  std::unique_ptr<SharedTensors> tensors;
  Status s = SharedTensors::Create(dir_ + "/missing", {1}, &tensors);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/missing/tensors-"));
}

TEST_F(SharedTensorsTest, LeftoversOfAKilledAgentAreRemovedAndNothingElse) {
  for (const char* name : {"tensors-0123456789abcdef.shm", "tensors-x.shm", "agent.json", "notes"})
    std::ofstream(dir_ + "/" + name) << "x";
  EXPECT_EQ(SharedTensors::RemoveLeftovers(dir_), 2);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/tensors-x.shm"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/agent.json"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/notes"));
}

}  // namespace
}  // namespace kubeps::sidecar
