// Error checking for every CUDA runtime, cuBLAS and NCCL call of the backend,
// plus the two RAII helpers everything else uses. Internal to this folder:
// it includes the CUDA headers.
//
// A failed call throws std::runtime_error whose message names the call (its
// source text), the file and line, and the library's own error string, e.g.
//   cudaMalloc(&ptr_, n * sizeof(T)) failed at device_net.cc:42:
//   cudaErrorMemoryAllocation (out of memory)
#ifndef KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_CHECK_H_
#define KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace kubeps::trainer::cuda {

[[noreturn]] inline void ThrowCallError(const char* call, const char* file, int line,
                                        const std::string& what) {
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                           ": " + what);
}

inline void CheckCuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    ThrowCallError(call, file, line,
                   std::string(cudaGetErrorName(status)) + " (" + cudaGetErrorString(status) + ")");
  }
}

inline void CheckCublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    ThrowCallError(
        call, file, line,
        std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")");
  }
}

}  // namespace kubeps::trainer::cuda

#define KUBEPS_CUDA_CHECK(call) \
  ::kubeps::trainer::cuda::CheckCuda((call), #call, __FILE__, __LINE__)
#define KUBEPS_CUBLAS_CHECK(call) \
  ::kubeps::trainer::cuda::CheckCublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration, no device) are
// reported by cudaGetLastError; `kernel` names the kernel in the message.
#define KUBEPS_CUDA_CHECK_LAUNCH(kernel) \
  ::kubeps::trainer::cuda::CheckCuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)

// NCCL's check lives in nccl_check.h so that only the files that use NCCL
// include nccl.h.

namespace kubeps::trainer::cuda {

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    KUBEPS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) KUBEPS_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }  // best effort: destructors do not throw
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// Device memory of T that only grows (like EnsureSize on the CPU side).
// Allocate and free with the owning device current.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Returns a buffer of at least n elements; the old contents are lost when
  // it grows. (cudaFree waits for the device, so no kernel still uses it.)
  T* Ensure(size_t n) {
    if (n > capacity_) {
      KUBEPS_CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      capacity_ = 0;
      KUBEPS_CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T)));
      capacity_ = n;
    }
    return ptr_;
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

// Page-locked host memory of T that only grows. Allocated "portable", so a
// copy to or from any device runs as a true asynchronous DMA; the multi-GPU
// model uploads one staged copy of the parameters to every device.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { cudaFreeHost(ptr_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Callers make sure no copy still uses the old buffer when it grows.
  T* Ensure(size_t n) {
    if (n > capacity_) {
      KUBEPS_CUDA_CHECK(cudaFreeHost(ptr_));
      ptr_ = nullptr;
      capacity_ = 0;
      KUBEPS_CUDA_CHECK(
          cudaHostAlloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T), cudaHostAllocPortable));
      capacity_ = n;
    }
    return ptr_;
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace kubeps::trainer::cuda

#endif  // KUBEPS_WORKER_AGENT_TRAINER_CUDA_CUDA_CHECK_H_
