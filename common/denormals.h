// Flushing denormal floats to zero, for the length of a scope, on the thread
// that enters it.
//
// Why: Adam's first moment (and momentum's velocity) decays by beta1 (mu)
// every step for a weight whose gradient is zero, as a dead ReLU unit's is.
// After some 700 steps at beta1 = 0.9 it is below FLT_MIN, and on many x86
// processors every arithmetic operation on such a denormal number takes a
// microcode assist of about a hundred cycles. Seen on a 16-core Intel host:
// the CNN's servers slowed a 1-worker job from 45 to 9 steps/s at step ~700,
// when a quarter of its 3.3M first-moment values had become denormal. A
// value under FLT_MIN moves a weight by nothing a float can show, so flushing
// it to zero costs no accuracy. TensorFlow flushes the same way around every
// kernel; PyTorch offers it as torch.set_flush_denormal.
//
// The mode is saved and restored, so that whatever thread calls in (gRPC's,
// the trainer's) leaves as it came. x86-64: MXCSR's flush-to-zero (results)
// and denormals-are-zero (inputs) bits. AArch64: FPCR's FZ bit. Elsewhere:
// nothing changes.
#ifndef KUBEPS_COMMON_DENORMALS_H_
#define KUBEPS_COMMON_DENORMALS_H_

#include <cstdint>

#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace kubeps {

class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals() {
#if defined(__x86_64__) || defined(__SSE2__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
#elif defined(__aarch64__)
    asm volatile("mrs %0, fpcr" : "=r"(saved_));
    asm volatile("msr fpcr, %0" : : "r"(saved_ | kFlushToZero));
#endif
  }
  ~ScopedFlushDenormals() {
#if defined(__x86_64__) || defined(__SSE2__)
    _mm_setcsr(static_cast<unsigned>(saved_));
#elif defined(__aarch64__)
    asm volatile("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__SSE2__)
  static constexpr unsigned kFlushToZero = 0x8000;     // MXCSR.FTZ
  static constexpr unsigned kDenormalsAreZero = 0x40;  // MXCSR.DAZ
  unsigned saved_ = 0;
#elif defined(__aarch64__)
  static constexpr uint64_t kFlushToZero = uint64_t{1} << 24;  // FPCR.FZ
  uint64_t saved_ = 0;
#endif
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_DENORMALS_H_
