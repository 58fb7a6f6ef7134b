// How many cores this process may use: what its compute threads (OpenBLAS,
// oneDNN's OpenMP) should number. std::thread::hardware_concurrency()
// counts the machine's CPUs, but a process is often allowed fewer: a CPU
// affinity mask (taskset, a cpuset, the kubelet's static CPU manager) or a
// CPU quota on its cgroup (a container's CPU limit, Kubernetes'
// resources.limits.cpu). A thread beyond those waits for a core, and a
// BLAS call or an OpenMP barrier waits for its slowest thread, so the
// whole pool runs at that pace. The same rule as the Go runtime's
// GOMAXPROCS and the JVM's in containers.
#ifndef KUBEPS_COMMON_USABLE_CORES_H_
#define KUBEPS_COMMON_USABLE_CORES_H_

#include <string>

namespace kubeps {

// The smaller of the CPUs in this thread's affinity mask and the CPU limit
// of every cgroup from this process's up to the root; at least 1.
int UsableCores();

// The CPU limit, in whole cores rounded up, of the cgroups that
// `proc_self_cgroup` (the text of /proc/self/cgroup) names, read under
// `cgroup_root` (/sys/fs/cgroup): the smallest on the way up from the
// process's own cgroup, or 0 where none is limited. cgroup v2 reads
// cpu.max; v1 the cpu controller's cpu.cfs_quota_us and cpu.cfs_period_us.
int CgroupCoreLimit(const std::string& cgroup_root, const std::string& proc_self_cgroup);

// One cgroup v2 cpu.max ("max 100000", "150000 100000"): the quota over
// the period, rounded up; 0 for no limit, or for text it cannot read.
int CoresOfCpuMax(const std::string& cpu_max);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_USABLE_CORES_H_
