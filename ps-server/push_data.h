// The gradient bytes of one push, read once, in order, straight into the
// shard's buffers. gRPC receives a request in pieces (its slices); a shard
// that took the request as a parsed protobuf message would first have the
// pieces copied into one string and then copy that string again. The
// pieces are read where they lie instead (ps_service.cc), and a test hands
// in one string as a single piece.
//
// Gradients sent compressed (spec.compression) are decoded into float32 as
// they are read.
//
// Not thread-safe: one push, one thread.
#ifndef KUBEPS_PS_SERVER_PUSH_DATA_H_
#define KUBEPS_PS_SERVER_PUSH_DATA_H_

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

#include "common/gradient_codec.h"

namespace kubeps {

class PushData {
 public:
  // The pieces must outlive this object.
  explicit PushData(std::vector<std::string_view> pieces,
                    GradientEncoding encoding = GradientEncoding::kFloat32, float threshold = 0);

  size_t size() const { return size_; }  // bytes, all pieces together
  GradientEncoding encoding() const { return encoding_; }
  // Copies (decodes) the next `n` floats to `out`; false if one of them is
  // NaN or Inf. The check runs on each piece right after it is copied, while
  // it is still in cache: no second pass over the gradient. REQUIRES: that
  // many bytes are left.
  bool Read(float* out, size_t n);
  // The next `n` floats, checked as Read checks them: where they lie,
  // float32 and whole in one piece at a float's alignment (a push through
  // shared memory), else copied (decoded) into `scratch`, which holds `n`.
  // For a reader that only reads them once: no copy. Read in place, they
  // are checked before they are read again, so a worker that wrote its
  // gradient during its own push (which the KV client's rule forbids) could
  // change them in between, as it could tear them under a copy.
  const float* View(size_t n, float* scratch, bool* finite);
  // Passes over the next `n` floats.
  void Skip(size_t n);
  // Called as each piece is begun: a test pauses a push in the middle of its
  // copy there, to see what the shard does meanwhile.
  void BeforeEachPiece(std::function<void(size_t piece)> hook) { before_piece_ = std::move(hook); }

 private:
  template <typename Sink>
  void Consume(size_t bytes, Sink sink);

  std::vector<std::string_view> pieces_;
  GradientEncoding encoding_;
  float threshold_;
  std::vector<char> encoded_;  // a compressed part's bytes, gathered from the pieces
  size_t size_ = 0;
  size_t piece_ = 0;   // the piece read next
  size_t offset_ = 0;  // bytes of it already read
  std::function<void(size_t)> before_piece_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_PUSH_DATA_H_
