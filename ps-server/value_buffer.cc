#include "ps-server/value_buffer.h"

#include <atomic>

#include "common/logging.h"

namespace kubeps {

uint64_t ValueBuffer::DataOffset() { return PageSize(); }

std::unique_ptr<ValueBuffer> ValueBuffer::InSharedMemory(const std::string& owner, size_t n) {
  std::unique_ptr<SharedSegment> segment;
  const uint64_t bytes = DataOffset() - SharedSegment::FirstRegion() + n * sizeof(float);
  if (Status s = SharedSegment::Create(owner + "-values", bytes, &segment); !s.ok()) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      KLOG_INFO << s.message() << "; values stay on the heap and are copied to the workers";
    }
    return nullptr;
  }
  std::unique_ptr<ValueBuffer> buffer(new ValueBuffer());
  buffer->data_ = reinterpret_cast<float*>(segment->base() + DataOffset());
  buffer->size_ = n;
  buffer->segment_ = std::move(segment);
  return buffer;
}

}  // namespace kubeps
