// A part's values at one version, on the heap or, for a sync job's big parts
// once a co-located worker asks to map them, in a file of /dev/shm of their
// own: a worker on this host then reads them where they lie, mapped at the
// part's place in its model, and no server copies them into its landing
// regions (docs/performance.md, "Values read where the server keeps them").
#ifndef KUBEPS_PS_SERVER_VALUE_BUFFER_H_
#define KUBEPS_PS_SERVER_VALUE_BUFFER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/shared_memory.h"

namespace kubeps {

class ValueBuffer {
 public:
  // n floats on the heap, zeroed, or copied from `from`.
  explicit ValueBuffer(size_t n) : heap_(n), data_(heap_.data()), size_(n) {}
  ValueBuffer(const float* from, size_t n) : heap_(from, from + n), data_(heap_.data()), size_(n) {}
  ValueBuffer(const ValueBuffer&) = delete;  // data_ points into its own storage
  ValueBuffer& operator=(const ValueBuffer&) = delete;
  // n floats in a new file of /dev/shm named for `owner`, starting a page
  // into it; null, logged once, where /dev/shm cannot hold them.
  static std::unique_ptr<ValueBuffer> InSharedMemory(const std::string& owner, size_t n);

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size() == 0; }
  std::vector<float> Copy() const { return std::vector<float>(data(), data() + size()); }

  // The file holding them, or null on the heap; they start DataOffset()
  // bytes into it, a page boundary.
  const SharedSegment* segment() const { return segment_.get(); }
  static uint64_t DataOffset();

 private:
  ValueBuffer() = default;
  std::vector<float> heap_;                 // the floats, unless they are in segment_
  std::unique_ptr<SharedSegment> segment_;  // the file holding them, or null
  float* data_ = nullptr;                   // where they are, in one or the other
  size_t size_ = 0;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_VALUE_BUFFER_H_
