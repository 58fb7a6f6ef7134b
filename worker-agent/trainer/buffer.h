// Scratch buffers that layers keep between calls: they only grow, so a
// steady-state training loop does no allocation.
#ifndef KUBEPS_WORKER_AGENT_TRAINER_BUFFER_H_
#define KUBEPS_WORKER_AGENT_TRAINER_BUFFER_H_

#include <cstddef>
#include <vector>

namespace kubeps::trainer {

// Returns v.data() after making sure v holds at least n elements.
template <typename T>
T* EnsureSize(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace kubeps::trainer

#endif  // KUBEPS_WORKER_AGENT_TRAINER_BUFFER_H_
