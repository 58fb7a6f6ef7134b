// A parameter's values or gradient in host memory: floats the model owns,
// or, once Place has moved them, floats in memory lent by whoever exchanges
// them (the parameter store puts them in the worker's shared-memory segment,
// where a server on the same host reads the gradients and writes the next
// values, so that the exchange copies nothing in the worker).
//
// It reads as a std::vector<float> of fixed size once placed: resize and
// assign keep the size of lent memory.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_HOST_TENSOR_H_
#define KUBEPS_WORKER_AGENT_TRAINER_HOST_TENSOR_H_

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <vector>

namespace kubeps::trainer {

class HostTensor {
 public:
  using value_type = float;
  using iterator = float*;
  using const_iterator = const float*;

  HostTensor() = default;
  HostTensor(std::initializer_list<float> values) : owned_(values) {}
  // A copy owns its floats, wherever the original's lie.
  HostTensor(const HostTensor& other) : owned_(other.begin(), other.end()) {}
  HostTensor(HostTensor&& other) noexcept
      : owned_(std::move(other.owned_)), lent_(other.lent_), lent_size_(other.lent_size_) {
    other.lent_ = nullptr;
    other.lent_size_ = 0;
  }
  HostTensor& operator=(const HostTensor& other) {
    if (this != &other) Assign(other.begin(), other.end());
    return *this;
  }
  HostTensor& operator=(HostTensor&& other) noexcept {
    if (lent_ != nullptr) {  // the lent memory stays where it is
      Assign(other.begin(), other.end());
      return *this;
    }
    owned_ = std::move(other.owned_);
    lent_ = other.lent_;
    lent_size_ = other.lent_size_;
    other.lent_ = nullptr;
    other.lent_size_ = 0;
    return *this;
  }
  HostTensor& operator=(const std::vector<float>& values) {
    Assign(values.data(), values.data() + values.size());
    return *this;
  }

  float* data() { return lent_ ? lent_ : owned_.data(); }
  const float* data() const { return lent_ ? lent_ : owned_.data(); }
  size_t size() const { return lent_ ? lent_size_ : owned_.size(); }
  bool empty() const { return size() == 0; }
  float* begin() { return data(); }
  float* end() { return data() + size(); }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size(); }
  float& operator[](size_t i) { return data()[i]; }
  float operator[](size_t i) const { return data()[i]; }

  void resize(size_t n) {
    if (lent_) {
      assert(n == lent_size_ && "lent memory keeps its size");
      return;
    }
    owned_.resize(n);
  }
  void assign(size_t n, float value) {
    resize(n);
    std::fill(begin(), end(), value);
  }
  operator std::vector<float>() const { return std::vector<float>(begin(), end()); }

  // Moves the floats to `memory` (size() of them) and keeps them there from
  // now on. REQUIRES: `memory` outlives this tensor, or Place is called
  // again with memory that does.
  void Place(float* memory) {
    std::copy(begin(), end(), memory);
    lent_size_ = size();
    lent_ = memory;
    owned_ = std::vector<float>();
  }
  // Reads the floats from `memory` from now on, as they are there (no copy):
  // lent memory whose lender moved them (a pull that lands by its version's
  // parity, kv_worker.h's map_values). REQUIRES: placed(), the same size.
  void Repoint(float* memory) {
    assert(lent_ != nullptr && "only lent memory moves");
    lent_ = memory;
  }
  // Whether the floats lie in lent memory.
  bool placed() const { return lent_ != nullptr; }

  friend bool operator==(const HostTensor& a, const HostTensor& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const HostTensor& a, const std::vector<float>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const std::vector<float>& a, const HostTensor& b) { return b == a; }
  friend bool operator!=(const HostTensor& a, const HostTensor& b) { return !(a == b); }
  friend bool operator!=(const HostTensor& a, const std::vector<float>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<float>& a, const HostTensor& b) { return !(b == a); }

 private:
  template <typename It>
  void Assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    if (!lent_) {
      owned_.assign(first, last);
      return;
    }
    assert(n == lent_size_ && "lent memory keeps its size");
    std::copy(first, first + static_cast<std::ptrdiff_t>(std::min(n, lent_size_)), lent_);
  }

  std::vector<float> owned_;
  float* lent_ = nullptr;
  size_t lent_size_ = 0;
};

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_HOST_TENSOR_H_
