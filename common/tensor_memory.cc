#include "common/tensor_memory.h"

#include <malloc.h>

namespace kubeps {

void KeepFreedTensorMemory() {
  // glibc's largest mmap threshold on 64-bit systems (32 MiB): buffers up
  // to it come from the heap, and are reused once freed.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Never give a freed heap top back: the next step needs it again.
  mallopt(M_TRIM_THRESHOLD, -1);
  // Every thread allocates from that heap, the main one. By default glibc
  // gives each thread one of up to 8 heaps a core (arenas); a heap other than
  // the main one is made of 64 MiB pieces, and a piece that empties goes back
  // to the kernel whatever M_TRIM_THRESHOLD says. A gRPC thread whose piece
  // is full of a shard's parts then receives every request into a new piece,
  // faulting in and zeroing each of its pages: 2 x 2 push+pull of 10M floats
  // over gRPC had twice the page faults, at 0.39-0.46 of raw TCP's speed
  // against 0.51-0.56 (docs/performance.md). The cost: the threads share one
  // lock wherever their own caches (glibc's tcache: up to 7 blocks of each
  // size up to 1 KiB) cannot serve them; a request of megabytes makes few
  // such calls. Measured on 2 cores only.
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace kubeps
