#include "ps-server/attached_segments.h"

namespace kubeps {

Status AttachedSegments::Get(const v1::SharedMemoryRef& ref,
                             std::shared_ptr<const SharedSegment>* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = recent_.begin(); it != recent_.end(); ++it) {
    if ((*it)->name() == ref.segment() && (*it)->nonce() == ref.nonce()) {
      recent_.splice(recent_.begin(), recent_, it);
      *out = recent_.front();
      return Status::Ok();
    }
  }
  // Mapped under the lock: once per worker process, and a second request
  // naming the same segment waits for this mapping instead of making its own.
  std::unique_ptr<SharedSegment> segment;
  if (Status s = SharedSegment::Attach(ref.segment(), ref.nonce(), &segment); !s.ok()) return s;
  recent_.emplace_front(std::move(segment));
  if (recent_.size() > capacity_) recent_.pop_back();
  *out = recent_.front();
  return Status::Ok();
}

}  // namespace kubeps
