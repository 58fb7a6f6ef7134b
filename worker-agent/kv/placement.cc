#include "worker-agent/kv/placement.h"

#include <algorithm>

namespace kubeps {
namespace {

void AddChunks(uint32_t key, uint64_t offset, uint64_t length, int server, uint64_t max_part,
               std::vector<Part>* parts) {
  const uint64_t chunks = std::max<uint64_t>(1, (length + max_part - 1) / max_part);
  for (uint64_t c = 0; c < chunks; ++c) {
    uint64_t begin = length * c / chunks;
    uint64_t end = length * (c + 1) / chunks;
    parts->push_back(Part{key, offset + begin, end - begin, server});
  }
}

// The rules of placement.h but the last: tensors of `big_array_bound`
// elements or more are sliced.
std::vector<Part> Place(const std::vector<uint64_t>& tensor_sizes, int num_servers,
                        const PlacementOptions& options) {
  std::vector<Part> parts;
  std::vector<uint64_t> load(num_servers, 0);
  const uint64_t max_part = std::max<uint64_t>(1, options.max_part_elems);
  uint64_t previous_size = 0;
  int previous_server = -1;  // of the key before, when it went whole to one server
  for (uint32_t key = 0; key < tensor_sizes.size(); ++key) {
    const uint64_t size = tensor_sizes[key];
    if (size == 0) continue;
    const bool follows = size < options.follow_bound && size < previous_size;
    previous_size = size;
    if (size < options.big_array_bound || num_servers == 1 || size < uint64_t(num_servers)) {
      int server =
          follows && previous_server >= 0
              ? previous_server
              : static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[server] += size;
      previous_server = server;
      AddChunks(key, 0, size, server, max_part, &parts);
      continue;
    }
    previous_server = -1;
    for (int s = 0; s < num_servers; ++s) {
      uint64_t begin = size * s / num_servers;
      uint64_t end = size * (s + 1) / num_servers;
      load[s] += end - begin;
      AddChunks(key, begin, end - begin, s, max_part, &parts);
    }
  }
  return parts;
}

bool SomeServerEmpty(const std::vector<Part>& parts, int num_servers) {
  std::vector<bool> used(num_servers, false);
  for (const Part& part : parts) used[part.server] = true;
  return std::find(used.begin(), used.end(), false) != used.end();
}

}  // namespace

std::vector<Part> PlaceTensors(const std::vector<uint64_t>& tensor_sizes, int num_servers,
                               const PlacementOptions& options) {
  if (num_servers < 1) return {};
  PlacementOptions place = options;
  std::vector<Part> parts = Place(tensor_sizes, num_servers, place);
  while (SomeServerEmpty(parts, num_servers)) {
    // The biggest tensor still placed whole that can be sliced: lowering
    // the bound to its size slices it (and those of its size) too.
    uint64_t biggest = 0;
    for (uint64_t size : tensor_sizes) {
      if (size < place.big_array_bound && size >= static_cast<uint64_t>(num_servers)) {
        biggest = std::max(biggest, size);
      }
    }
    if (biggest == 0) break;  // nothing left to slice: a server stays empty
    place.big_array_bound = biggest;
    parts = Place(tensor_sizes, num_servers, place);
  }
  return parts;
}

}  // namespace kubeps
