#include "common/usable_cores.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace kubeps {
namespace {

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream contents;
  contents << in.rdbuf();
  *text = contents.str();
  return true;
}

bool ParseInteger(const std::string& text, long long* value) {
  char* end = nullptr;
  *value = std::strtoll(text.c_str(), &end, 10);
  return !text.empty() && end != nullptr && *end == '\0';
}

// The tighter of two limits, where 0 is none.
int Tighter(int a, int b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

int CeilCores(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 0;
  return static_cast<int>((quota_us + period_us - 1) / period_us);
}

// cgroup v1's cpu controller: cpu.cfs_quota_us is -1 without a limit.
int CoresOfCfsQuota(const std::string& dir) {
  std::string quota, period;
  long long quota_us = 0, period_us = 0;
  if (!ReadFile(dir + "/cpu.cfs_quota_us", &quota) ||
      !ReadFile(dir + "/cpu.cfs_period_us", &period)) {
    return 0;
  }
  quota.erase(quota.find_last_not_of(" \n") + 1);
  period.erase(period.find_last_not_of(" \n") + 1);
  if (!ParseInteger(quota, &quota_us) || !ParseInteger(period, &period_us)) return 0;
  return CeilCores(quota_us, period_us);
}

int CoresOfCpuMaxIn(const std::string& dir) {
  std::string cpu_max;
  return ReadFile(dir + "/cpu.max", &cpu_max) ? CoresOfCpuMax(cpu_max) : 0;
}

// The smallest limit (0: none) of `top` + `path` and of each folder above
// it up to `top`: a limit on a parent (a pod's cgroup above its
// container's) binds the children too. Inside a container with its own
// cgroup namespace, the path is "/" and `top` is the container's cgroup;
// with cgroup v1 the path may be the host's, absent from the container's
// view, and `top` alone then holds the limit.
template <typename LimitOf>
int SmallestUpTo(const std::string& top, std::string path, LimitOf limit_of) {
  int smallest = 0;
  for (;;) {
    smallest = Tighter(smallest, limit_of(top + path));
    if (path.empty()) return smallest;
    const size_t slash = path.find_last_of('/');
    path.erase(slash == std::string::npos ? 0 : slash);
  }
}

}  // namespace

int CoresOfCpuMax(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long quota_us = 0, period_us = 0;
  if (!(in >> quota >> period_us) || quota == "max") return 0;
  return ParseInteger(quota, &quota_us) ? CeilCores(quota_us, period_us) : 0;
}

int CgroupCoreLimit(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  int smallest = 0;
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      smallest = Tighter(smallest, SmallestUpTo(cgroup_root, path, CoresOfCpuMaxIn));
      continue;
    }
    const std::string listed = "," + controllers + ",";
    if (listed.find(",cpu,") == std::string::npos) continue;
    // Mounted as the controllers' list ("cpu,cpuacct") or as "cpu", a link to it.
    for (const std::string& mount : {controllers, std::string("cpu")}) {
      smallest = Tighter(smallest, SmallestUpTo(cgroup_root + "/" + mount, path, CoresOfCfsQuota));
    }
  }
  return smallest;
}

int UsableCores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  // Fails only on a machine of more CPUs than a cpu_set_t holds (1024).
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) cores = CPU_COUNT(&allowed);
  std::string self;
  if (ReadFile("/proc/self/cgroup", &self)) {
    cores = Tighter(cores, CgroupCoreLimit("/sys/fs/cgroup", self));
  }
  return std::max(cores, 1);
}

}  // namespace kubeps
