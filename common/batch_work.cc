#include "common/batch_work.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kubeps {
namespace {

// Linux's sched_setscheduler(0, ...) sets the calling thread's policy.
Status SetPolicy(int policy, const char* name, const char* what) {
  sched_param param{};  // neither policy has a priority of its own: 0
  if (sched_setscheduler(0, policy, &param) != 0) {
    return Status::Error(std::string("could not run as ") + what + " (sched_setscheduler " + name +
                         "): " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

Status RunAsBatchWork() { return SetPolicy(SCHED_BATCH, "SCHED_BATCH", "batch work"); }

Status RunAsOrdinaryWork() { return SetPolicy(SCHED_OTHER, "SCHED_OTHER", "ordinary work"); }

}  // namespace kubeps
