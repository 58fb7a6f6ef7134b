#include "common/tensor_memory.h"

#include <malloc.h>

namespace kubeps {

void KeepFreedTensorMemory() {
  // glibc's largest mmap threshold on 64-bit systems (32 MiB): buffers up
  // to it come from the heap, and are reused once freed.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Never give a freed heap top back: the next step needs it again.
  mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace kubeps
