// Sets the OpenBLAS thread count of this process. A local job runs several
// processes on one machine, so each gets its share of the cores instead of
// every process starting one thread per core.
#ifndef KUBEPS_COMMON_BLAS_THREADS_H_
#define KUBEPS_COMMON_BLAS_THREADS_H_

namespace kubeps {
void SetBlasThreads(int threads);
}  // namespace kubeps

#endif  // KUBEPS_COMMON_BLAS_THREADS_H_
