// ReadBytes: a pull answer's data copied out of gRPC's slices, which cut it
// anywhere, into the tensors.
#include "worker-agent/kv/tensor_wire.h"

#include <grpcpp/support/proto_buffer_reader.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kubeps {
namespace {

// `bytes` in slices of the given sizes, the last taking what is left.
grpc::ByteBuffer InSlices(const std::string& bytes, const std::vector<size_t>& sizes) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t size : sizes) {
    slices.emplace_back(bytes.data() + at, size);
    at += size;
  }
  slices.emplace_back(bytes.data() + at, bytes.size() - at);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Pattern(size_t n) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 31 + 7);
  return bytes;
}

TEST(ReadBytesTest, ReadsAcrossSlicesCutAnywhereAndLeavesTheRestToRead) {
  // A float cut between slices, slices shorter than a float, and a read that
  // ends inside a slice; then the stream goes on from there.
  const std::string bytes = Pattern(300000);
  grpc::ByteBuffer buffer = InSlices(bytes, {3, 1, 65536, 2, 70001, 65536});
  grpc::ProtoBufferReader reader(&buffer);
  google::protobuf::io::CodedInputStream in(&reader);
  std::vector<float> first(50000), second(25000);
  ASSERT_TRUE(ReadBytes(in, first.data(), first.size() * sizeof(float)));
  ASSERT_TRUE(ReadBytes(in, second.data(), second.size() * sizeof(float)));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(first.data()), 200000),
            bytes.substr(0, 200000));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(second.data()), 100000),
            bytes.substr(200000));
  EXPECT_EQ(in.CurrentPosition(), 300000);
  char after = 0;
  EXPECT_FALSE(ReadBytes(in, &after, 1));
}

TEST(ReadBytesTest, AStreamThatEndsFirstIsFalse) {
  const std::string bytes = Pattern(1000);
  grpc::ByteBuffer buffer = InSlices(bytes, {600});
  grpc::ProtoBufferReader reader(&buffer);
  google::protobuf::io::CodedInputStream in(&reader);
  std::vector<char> out(1001);
  EXPECT_FALSE(ReadBytes(in, out.data(), out.size()));
}

}  // namespace
}  // namespace kubeps
