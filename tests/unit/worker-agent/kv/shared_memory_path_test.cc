#include "worker-agent/kv/shared_memory_path.h"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "ps-server/value_buffer.h"

namespace kubeps {
namespace {

TEST(SharedMemoryPathTest, OnlyServersAtThisProcesssLoopbackAddressAreOffered) {
  // kubeps run: every replica at 127.0.0.1 (or ::1 with --host).
  EXPECT_TRUE(SharedMemoryPath::OnThisHost("127.0.0.1:7000", "127.0.0.1"));
  EXPECT_TRUE(SharedMemoryPath::OnThisHost("[::1]:7000", "::1"));
  EXPECT_TRUE(SharedMemoryPath::OnThisHost("[::1]:7000", "[::1]"));
  // A program of the SDK that does not say where it is.
  EXPECT_TRUE(SharedMemoryPath::OnThisHost("127.0.0.1:7000", ""));
  EXPECT_TRUE(SharedMemoryPath::OnThisHost("localhost:7000", ""));
  // Pods of one node: addresses of their own, no /dev/shm in common (the
  // Kubernetes stand-in gives each pod a loopback address of its own).
  EXPECT_FALSE(SharedMemoryPath::OnThisHost("127.0.0.7:7000", "127.0.0.8"));
  // A pod IP is never a loopback address, even the pod's own.
  EXPECT_FALSE(SharedMemoryPath::OnThisHost("10.244.1.5:7000", "10.244.1.5"));
  EXPECT_FALSE(SharedMemoryPath::OnThisHost("[fd00::7]:7000", ""));
  EXPECT_FALSE(SharedMemoryPath::OnThisHost("no port", ""));
}

// A tensor of two parts of 128 KiB (each on a page, as the placement's
// chunks of 2 MiB are), on two servers, and a small one.
constexpr uint64_t kPart = 32768;
std::vector<Part> TwoBigPartsAndASmallTensor() {
  return {{0, 0, kPart, 0}, {0, kPart, kPart, 1}, {1, 0, 100, 0}};
}

// What a server answers for a part it keeps in `buffer`.
v1::MappedValues MappedAnswer(uint32_t index, const ValueBuffer& buffer, uint64_t version) {
  v1::MappedValues mapped;
  mapped.set_part(index);
  mapped.set_segment(buffer.segment()->name());
  mapped.set_nonce(buffer.segment()->nonce());
  mapped.set_offset(ValueBuffer::DataOffset());
  mapped.set_version(version);
  return mapped;
}

std::unique_ptr<ValueBuffer> ServerBuffer(float value) {
  std::unique_ptr<ValueBuffer> buffer =
      ValueBuffer::InSharedMemory("shared-memory-path-test", kPart);
  EXPECT_NE(buffer, nullptr);
  std::fill(buffer->data(), buffer->data() + kPart, value);
  return buffer;
}

TEST(SharedMemoryPathTest, ABigTensorIsReadFromTwoViewsByItsVersionsParity) {
  const std::vector<Part> parts = TwoBigPartsAndASmallTensor();
  std::unique_ptr<SharedMemoryPath> path;
  ASSERT_TRUE(SharedMemoryPath::Create("worker-0", parts, true, &path).ok());
  float* first = path->Values(0);
  float* even = path->Destination(0, first, 4);
  float* odd = path->Destination(0, even, 5);
  EXPECT_NE(even, odd);
  EXPECT_EQ(path->Values(0), odd) << "the last pull's view";
  EXPECT_EQ(path->Destination(0, odd, 6), even);
  // Memory that is not one of its views is the caller's: left alone.
  std::vector<float> own(2 * kPart);
  EXPECT_EQ(path->Destination(0, own.data(), 7), own.data());
  // A small tensor is copied where the model reads it, as ever.
  float* small = path->Values(1);
  EXPECT_EQ(path->Destination(1, small, 7), small);
  // Pulls offer to map the parts they put in a view only.
  const std::vector<const Part*> batch = {&parts[0], &parts[2]};
  v1::SharedMemoryRef ref;
  ASSERT_TRUE(path->OpenPull(batch, {even, small}, &ref));
  ASSERT_EQ(ref.mappable_size(), 2);
  EXPECT_TRUE(ref.mappable(0));
  EXPECT_FALSE(ref.mappable(1));
  path->EndPull(batch);
  // A model that keeps its values in its own memory (its gradients are
  // pushed compressed, so it was not moved into shared memory) maps nothing.
  ref.Clear();
  ASSERT_TRUE(path->OpenPull(batch, {own.data(), small}, &ref));
  EXPECT_EQ(ref.mappable_size(), 0);
  path->EndPull(batch);
}

TEST(SharedMemoryPathTest, AMappedPartShowsWhatTheServerWritesAndNotWhatTheWorkerDoes) {
  const std::vector<Part> parts = TwoBigPartsAndASmallTensor();
  std::unique_ptr<SharedMemoryPath> path;
  ASSERT_TRUE(SharedMemoryPath::Create("worker-0", parts, true, &path).ok());
  std::vector<float*> values = {path->Destination(0, path->Values(0), 1), nullptr};
  std::unique_ptr<ValueBuffer> server0 = ServerBuffer(1.0f), server1 = ServerBuffer(2.0f);
  const std::vector<const Part*> batch0 = {&parts[0]}, batch1 = {&parts[1]};
  uint64_t version = 0;
  for (auto [batch, buffer] :
       {std::pair{&batch0, server0.get()}, std::pair{&batch1, server1.get()}}) {
    v1::SharedMemoryRef ref;
    ASSERT_TRUE(path->OpenPull(*batch, values, &ref));
    Status s = path->TakeLanded(*batch, ref, {MappedAnswer(0, *buffer, 1)}, values, &version);
    ASSERT_TRUE(s.ok()) << s.message();
    path->EndPull(*batch);
  }
  EXPECT_EQ(version, 1u);
  // One tensor, back to back, over two servers' buffers.
  EXPECT_EQ(values[0][0], 1.0f);
  EXPECT_EQ(values[0][kPart - 1], 1.0f);
  EXPECT_EQ(values[0][kPart], 2.0f);
  EXPECT_EQ(values[0][2 * kPart - 1], 2.0f);
  // The server writes its next version into the buffer: the view shows it.
  server0->data()[5] = 3.0f;
  EXPECT_EQ(values[0][5], 3.0f);
  // The worker's own write stays its own.
  values[0][6] = 9.0f;
  EXPECT_EQ(server0->data()[6], 1.0f);
  // ...and, once said, the next answer naming the same buffer maps it again.
  path->Written(batch0, values);
  v1::SharedMemoryRef ref;
  ASSERT_TRUE(path->OpenPull(batch0, values, &ref));
  ASSERT_TRUE(path->TakeLanded(batch0, ref, {MappedAnswer(0, *server0, 3)}, values, &version).ok());
  path->EndPull(batch0);
  EXPECT_EQ(values[0][6], 1.0f);
  EXPECT_EQ(values[0][5], 3.0f);
  EXPECT_EQ(version, 3u);
}

TEST(SharedMemoryPathTest, AnAnswerMappingWhatCannotBeMappedIsAnError) {
  const std::vector<Part> parts = TwoBigPartsAndASmallTensor();
  std::unique_ptr<SharedMemoryPath> path;
  ASSERT_TRUE(SharedMemoryPath::Create("worker-0", parts, true, &path).ok());
  std::vector<float*> values = {path->Destination(0, path->Values(0), 1), path->Values(1)};
  std::unique_ptr<ValueBuffer> buffer = ServerBuffer(1.0f);
  const std::vector<const Part*> batch = {&parts[0], &parts[2]};
  v1::SharedMemoryRef ref;
  ASSERT_TRUE(path->OpenPull(batch, values, &ref));
  uint64_t version = 0;
  // The small tensor is not read from a view.
  Status s = path->TakeLanded(batch, ref, {MappedAnswer(1, *buffer, 1)}, values, &version);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not read it from a view"), std::string::npos) << s.message();
  // Another nonce than the file's.
  v1::MappedValues forged = MappedAnswer(0, *buffer, 1);
  forged.set_nonce(forged.nonce() + 1);
  s = path->TakeLanded(batch, ref, {forged}, values, &version);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(buffer->segment()->name()), std::string::npos) << s.message();
  // A part index out of the batch.
  s = path->TakeLanded(batch, ref, {MappedAnswer(2, *buffer, 1)}, values, &version);
  EXPECT_FALSE(s.ok());
  path->EndPull(batch);
}

// A server frees a buffer when it rolls back to a checkpoint or shuts down,
// and may do so between its answer naming the buffer and the worker mapping
// it. That is no error in the answer: it says so (Gone), for the client to
// pull again, and a rolled-back server then answers that it rolled back.
TEST(SharedMemoryPathTest, AnAnswerNamingABufferTheServerFreedSinceIsGone) {
  const std::vector<Part> parts = TwoBigPartsAndASmallTensor();
  std::unique_ptr<SharedMemoryPath> path;
  ASSERT_TRUE(SharedMemoryPath::Create("worker-0", parts, true, &path).ok());
  std::vector<float*> values = {path->Destination(0, path->Values(0), 1), nullptr};
  std::unique_ptr<ValueBuffer> buffer = ServerBuffer(1.0f);
  const v1::MappedValues answer = MappedAnswer(0, *buffer, 1);
  buffer.reset();
  const std::vector<const Part*> batch = {&parts[0]};
  v1::SharedMemoryRef ref;
  ASSERT_TRUE(path->OpenPull(batch, values, &ref));
  uint64_t version = 0;
  const Status s = path->TakeLanded(batch, ref, {answer}, values, &version);
  path->EndPull(batch);
  EXPECT_EQ(s.code(), Status::Code::kGone) << s.message();
  EXPECT_NE(s.message().find(answer.segment()), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kubeps
