// A parameter server's threads (and the scheduler's) run under Linux's
// SCHED_BATCH policy: they keep the ordinary share of the CPU, but a thread
// that wakes up does not preempt the one running. Where a job's workers fill
// every core (`kubeps run`, or servers placed beside their workers), a
// request then waits for the core a worker leaves when it pushes, instead of
// cutting into the other worker's forward and backward pass, which the whole
// step waits for; where cores are free (a node of its own), nothing changes.
// Unlike SCHED_IDLE it cannot starve: a server beside a busy compiler still
// gets its share. Measured in docs/performance.md, "Servers as batch work".
#ifndef KUBEPS_PS_SERVER_BATCH_WORK_H_
#define KUBEPS_PS_SERVER_BATCH_WORK_H_

#include "common/status.h"

namespace kubeps {

// For the calling thread and every thread it starts later (threads inherit
// their creator's policy): call it before the process starts its threads.
// An error names what the kernel refused (a seccomp profile may); the
// process then runs as before.
Status RunAsBatchWork();

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_BATCH_WORK_H_
