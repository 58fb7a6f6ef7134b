#include "common/tensor_memory.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kubeps {
namespace {

constexpr size_t kMiB = 1 << 20;

long MinorFaultsOfThisThread() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Keeps the compiler from dropping a buffer that is written and never read.
void Touched(const char* buffer) { asm volatile("" : : "r"(buffer) : "memory"); }

// What a shard's gRPC thread does: it holds its tensors' buffers (here 61
// MiB of 1 MiB parts, nearly all of a thread's first heap) and, step after
// step, receives a request into a buffer of megabytes and frees it. Returns
// the page faults of the steps after the first, which finds the buffer's
// pages. Threads other than main() get a heap of their own by default:
// glibc's arenas.
long FaultsOfLaterSteps() {
  long faults = 0;
  std::thread gRPC_thread([&] {
    std::vector<std::unique_ptr<char[]>> parts;
    for (int i = 0; i < 61; ++i) {
      parts.emplace_back(new char[kMiB]);
      std::memset(parts.back().get(), 1, kMiB);
    }
    long before = 0;
    for (int step = 0; step < 20; ++step) {
      if (step == 1) before = MinorFaultsOfThisThread();
      std::unique_ptr<char[]> request(new char[4 * kMiB]);
      std::memset(request.get(), 2, 4 * kMiB);
      Touched(request.get());
    }
    faults = MinorFaultsOfThisThread() - before;
  });
  gRPC_thread.join();
  return faults;
}

// In a child process: the heap's settings hold for the whole process, and
// must be made before any other thread allocates. (The child is forked from
// a process that started no thread: an arena a thread left behind in it
// would be handed to the child's thread whatever M_ARENA_MAX says.)
long FaultsInFreshProcess() {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    close(pipe_ends[0]);
    // Small pages, as the machine may not give: with transparent huge pages
    // always on, a fresh heap costs a couple of faults, not a buffer's worth.
    prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    KeepFreedTensorMemory();
    const long faults = FaultsOfLaterSteps();
    _exit(write(pipe_ends[1], &faults, sizeof faults) == sizeof faults ? 0 : 1);
  }
  close(pipe_ends[1]);
  long faults = -1;
  if (read(pipe_ends[0], &faults, sizeof faults) != sizeof faults) faults = -1;
  close(pipe_ends[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return faults;
}

TEST(TensorMemoryTest, AThreadsFreedBuffersOfMegabytesAreReusedNotFaultedInAgain) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator is not glibc's: mallopt does nothing";
#endif
  const long pages_per_step = 4 * kMiB / sysconf(_SC_PAGESIZE);
  const long faults = FaultsInFreshProcess();
  ASSERT_GE(faults, 0);
  // A few pages for the thread's own bookkeeping; none for the buffer.
  EXPECT_LT(faults, pages_per_step / 8);
}

}  // namespace
}  // namespace kubeps
