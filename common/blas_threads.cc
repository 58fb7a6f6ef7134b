#include "common/blas_threads.h"

#include <cblas.h>

namespace kubeps {
void SetBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }
}  // namespace kubeps
