// How the processes that move tensors (the shards, the agent) use the heap.
//
// Every step allocates and frees buffers of megabytes: gRPC's request and
// answer buffers, protobuf's bytes fields. By default glibc serves such a
// size with a fresh mmap and returns a freed top of the heap to the kernel,
// so every step pays a page fault and the kernel's zeroing for each page of
// each buffer again (a profile of a CNN job showed as much kernel time in
// the agent for this as for its sockets). KeepFreedTensorMemory makes glibc
// keep freed memory for the next step instead, in one heap that every thread
// takes from (a buffer freed in one thread's heap is no use to another): the
// process's resident size stays at its high-water mark, which a step reaches
// again anyway.
//
// Call it first in main(), before any other thread allocates.
#ifndef KUBEPS_COMMON_TENSOR_MEMORY_H_
#define KUBEPS_COMMON_TENSOR_MEMORY_H_

namespace kubeps {

void KeepFreedTensorMemory();

}  // namespace kubeps

#endif  // KUBEPS_COMMON_TENSOR_MEMORY_H_
