#include "ps-server/push_data.h"

#include <algorithm>
#include <cstring>

namespace kubeps {

PushData::PushData(std::vector<std::string_view> pieces) : pieces_(std::move(pieces)) {
  for (std::string_view piece : pieces_) size_ += piece.size();
}

template <typename Sink>
void PushData::Consume(size_t bytes, Sink sink) {
  while (bytes > 0 && piece_ < pieces_.size()) {
    const std::string_view piece = pieces_[piece_];
    const size_t take = std::min(bytes, piece.size() - offset_);
    sink(piece.data() + offset_, take);
    bytes -= take;
    offset_ += take;
    if (offset_ == piece.size()) {
      ++piece_;
      offset_ = 0;
    }
  }
}

void PushData::Read(float* out, size_t n) {
  char* to = reinterpret_cast<char*>(out);
  Consume(n * sizeof(float), [&to](const char* from, size_t bytes) {
    std::memcpy(to, from, bytes);
    to += bytes;
  });
}

void PushData::Skip(size_t n) {
  Consume(n * sizeof(float), [](const char*, size_t) {});
}

}  // namespace kubeps
