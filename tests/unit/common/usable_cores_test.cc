// How many cores a process may use (common/usable_cores.h): its affinity
// mask, and the CPU limits of its cgroups as Kubernetes and container
// runtimes write them, cgroup v2 and v1, read from a folder tree laid out
// as /sys/fs/cgroup is.
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/usable_cores.h"

namespace kubeps {
namespace {

namespace fs = std::filesystem;

class CgroupCoreLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("usable-cores-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& text) {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative) << text;
  }
  // cgroup v1's cpu controller in `dir`.
  void WriteCfsQuota(const std::string& dir, const std::string& quota_us,
                     const std::string& period_us) {
    Write(dir + "/cpu.cfs_quota_us", quota_us + "\n");
    Write(dir + "/cpu.cfs_period_us", period_us + "\n");
  }
  int Limit(const std::string& proc_self_cgroup) const {
    return CgroupCoreLimit(root_.string(), proc_self_cgroup);
  }
  fs::path root_;
};

TEST(CoresOfCpuMaxTest, AQuotaIsRoundedUpToWholeCoresAndMaxIsNoLimit) {
  EXPECT_EQ(CoresOfCpuMax("max 100000\n"), 0);
  EXPECT_EQ(CoresOfCpuMax("200000 100000\n"), 2);
  EXPECT_EQ(CoresOfCpuMax("150000 100000\n"), 2) << "1.5 cores";
  EXPECT_EQ(CoresOfCpuMax("50000 100000"), 1) << "half a core";
  EXPECT_EQ(CoresOfCpuMax(""), 0);
  EXPECT_EQ(CoresOfCpuMax("lots 100000"), 0);
}

TEST_F(CgroupCoreLimitTest, AContainersLimitUnderCgroupV2IsItsCpuMax) {
  Write("kubepods.slice/pod1/cri-abc/cpu.max", "400000 100000\n");
  Write("kubepods.slice/pod1/cpu.max", "max 100000\n");
  EXPECT_EQ(Limit("0::/kubepods.slice/pod1/cri-abc\n"), 4);
}

TEST_F(CgroupCoreLimitTest, ALimitOnAParentBindsTheCgroupsBelowIt) {
  Write("kubepods.slice/pod1/cpu.max", "200000 100000\n");
  Write("kubepods.slice/pod1/cri-abc/cpu.max", "max 100000\n");
  EXPECT_EQ(Limit("0::/kubepods.slice/pod1/cri-abc\n"), 2);
  Write("kubepods.slice/pod1/cri-abc/cpu.max", "100000 100000\n");
  EXPECT_EQ(Limit("0::/kubepods.slice/pod1/cri-abc\n"), 1) << "the smaller of the two";
}

TEST_F(CgroupCoreLimitTest, InsideItsOwnCgroupNamespaceAContainerReadsTheRoot) {
  Write("cpu.max", "300000 100000\n");
  EXPECT_EQ(Limit("0::/\n"), 3);
}

TEST_F(CgroupCoreLimitTest, NoLimitAnywhereIsZero) {
  Write("user.slice/cpu.max", "max 100000\n");
  EXPECT_EQ(Limit("0::/user.slice/session-1.scope\n"), 0);
  EXPECT_EQ(Limit(""), 0);
}

TEST_F(CgroupCoreLimitTest, CgroupV1ReadsTheCpuControllersQuotaAndPeriod) {
  WriteCfsQuota("cpu,cpuacct/kubepods/pod1/abc", "250000", "100000");
  EXPECT_EQ(Limit("12:memory:/kubepods/pod1/abc\n"
                  "4:cpu,cpuacct:/kubepods/pod1/abc\n"),
            3);
}

TEST_F(CgroupCoreLimitTest, CgroupV1WithoutAQuotaIsNoLimit) {
  WriteCfsQuota("cpu,cpuacct", "-1", "100000");
  EXPECT_EQ(Limit("4:cpu,cpuacct:/\n"), 0);
}

TEST_F(CgroupCoreLimitTest, CgroupV1InAContainerWhoseHostPathIsNotInItsViewReadsTheMount) {
  WriteCfsQuota("cpu", "100000", "100000");
  EXPECT_EQ(Limit("3:cpu:/docker/0123abcd\n"), 1);
}

// The affinity mask counts: a thread allowed one CPU may use one core,
// whatever the machine has.
TEST(UsableCoresTest, AThreadAllowedOneCpuMayUseOneCore) {
  int seen = 0;
  std::thread pinned([&] {
    cpu_set_t allowed, one;
    ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int first = 0;
    while (!CPU_ISSET(first, &allowed)) ++first;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    seen = UsableCores();
  });
  pinned.join();
  EXPECT_EQ(seen, 1);
  EXPECT_GE(UsableCores(), 1);
  EXPECT_LE(UsableCores(), static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace kubeps
