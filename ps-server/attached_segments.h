// The workers' shared memory segments this server has mapped
// (common/shared_memory.h), by name: each is mapped at its first request and
// kept while it is among the most recently used, so a restarted worker's old
// segment is unmapped once enough newer ones came.
//
// Thread-safe. A segment handed out stays mapped for as long as its holder
// keeps the pointer, even if it is dropped from here meanwhile.
#ifndef KUBEPS_PS_SERVER_ATTACHED_SEGMENTS_H_
#define KUBEPS_PS_SERVER_ATTACHED_SEGMENTS_H_

#include <list>
#include <memory>
#include <mutex>

#include "common/shared_memory.h"
#include "common/status.h"
#include "kubeps.pb.h"

namespace kubeps {

class AttachedSegments {
 public:
  explicit AttachedSegments(size_t capacity = 16) : capacity_(capacity) {}

  // The segment `ref` names, mapped; the error of mapping it otherwise.
  Status Get(const v1::SharedMemoryRef& ref, std::shared_ptr<const SharedSegment>* out);

 private:
  const size_t capacity_;
  std::mutex mutex_;
  std::list<std::shared_ptr<const SharedSegment>> recent_;  // most recently used first
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_ATTACHED_SEGMENTS_H_
