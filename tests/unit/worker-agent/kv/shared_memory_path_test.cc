#include "worker-agent/kv/shared_memory_path.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kubeps
