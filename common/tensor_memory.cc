#include "common/tensor_memory.h"

#include <malloc.h>

namespace kubeps {

void KeepFreedTensorMemory() {
  // glibc's largest mmap threshold on 64-bit systems (32 MiB): buffers up
  // to it come from the heap, and are reused once freed.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Never give a freed heap top back: the next step needs it again.
  mallopt(M_TRIM_THRESHOLD, -1);
  // Every thread allocates from that one heap. By default glibc gives each
  // thread one of up to 8 heaps a core (arenas); a thread's heap other than
  // the first is made of 64 MiB pieces, and a piece that empties goes back
  // to the kernel whatever M_TRIM_THRESHOLD says. A gRPC thread whose piece
  // is full of a shard's parts then receives every request into a new piece,
  // faulting in and zeroing each of its pages: 2 x 2 push+pull of 10M floats
  // over gRPC had twice the page faults and ran 10% slower. The cost is one
  // lock for allocations too big for a thread's own cache (glibc's tcache,
  // up to 1 KiB), which a request of megabytes makes a few of.
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace kubeps
