// Which threads run under Linux's SCHED_BATCH policy. A batch thread keeps
// the ordinary share of the CPU, but when it wakes up it does not preempt
// the thread running on its core; it waits for that core to be left, or for
// the kernel to move it to one that is idle. Unlike SCHED_IDLE it cannot
// starve: a server beside a busy compiler still gets its share.
//
// Every thread of the scheduler and the servers is batch work, and so is
// every thread of a worker but those that compute the model, where its
// exchange runs after the step of a sync job (KUBEPS_OVERLAP=0). Where a job's workers
// fill every core (`kubeps run`, or servers placed beside their workers), a
// request, its answer and its handling then wait for the core a worker
// leaves when it pushes, instead of cutting into another worker's forward
// and backward pass, which the whole step waits for. Where cores are free
// (a node of its own), nothing changes. Measured in
// docs/performance.md, "Servers as batch work" and "A worker's exchange as
// batch work".
#ifndef KUBEPS_COMMON_BATCH_WORK_H_
#define KUBEPS_COMMON_BATCH_WORK_H_

#include "common/status.h"

namespace kubeps {

// For the calling thread and every thread it starts later (threads inherit
// their creator's policy): call it before the process starts its threads.
// An error names what the kernel refused (a seccomp profile may); the
// process then runs as before.
Status RunAsBatchWork();

// The calling thread back under the ordinary policy (SCHED_OTHER), and the
// threads it starts later: a worker's computing thread, once the threads of
// its exchange have started as batch work.
Status RunAsOrdinaryWork();

}  // namespace kubeps

#endif  // KUBEPS_COMMON_BATCH_WORK_H_
