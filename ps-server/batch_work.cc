#include "ps-server/batch_work.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kubeps {

Status RunAsBatchWork() {
  sched_param param{};  // SCHED_BATCH has no priority of its own: 0
  // Linux's sched_setscheduler(0, ...) sets the calling thread's policy.
  if (sched_setscheduler(0, SCHED_BATCH, &param) != 0) {
    return Status::Error(std::string("could not run as batch work (sched_setscheduler "
                                     "SCHED_BATCH): ") +
                         std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace kubeps
