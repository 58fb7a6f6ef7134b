// The shared-memory file of one sidecar session (docs/sidecar-protocol.md,
// "Where"): created by the agent at `declare` in the socket directory (on
// Kubernetes an emptyDir in memory), mapped by the agent and by the training
// process. For every declared tensor it holds a values region, which pulls
// write, and a grads region, which pushes read: the KV client reads and
// writes them in place, so a tensor's only copy is into its gRPC request.
// Values regions come first, in key order, then grads regions; each starts
// on a 64-byte boundary. Where the KV client holds the tensors in a segment
// of its own (a server on this host maps it: kubeps run), the file is a link
// to that segment instead, with the regions where the KV client has them.
//
// Thread-compatible: the mapping and its regions are fixed from Create to the
// destructor; which side writes a region when is the protocol's rule (the
// client leaves a region alone while a request that uses it is in flight).
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_SHARED_TENSORS_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_SHARED_TENSORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/shared_memory.h"
#include "common/status.h"

namespace kubeps::sidecar {

inline constexpr uint64_t kRegionAlignment = 64;

struct TensorRegion {
  uint64_t numel = 0;          // float32 elements
  uint64_t values_offset = 0;  // bytes from the start of the file
  uint64_t grads_offset = 0;
};

// The regions of tensors of `numels` elements, and the file size they need.
std::vector<TensorRegion> LayOutRegions(const std::vector<uint64_t>& numels, uint64_t* file_bytes);

class SharedTensors {
 public:
  // Creates a new file "tensors-<random>.shm" in `dir` (O_EXCL, mode 0600),
  // reserves its memory (a full volume is an error here, not a SIGBUS later)
  // and maps it.
  static Status Create(const std::string& dir, const std::vector<uint64_t>& numels,
                       std::unique_ptr<SharedTensors>* out);
  // The regions where the KV client holds the tensors, in its own segment:
  // a link "tensors-<random>.shm" in `dir` names the segment's file, so the
  // program maps the memory the servers read and write, and the agent
  // copies nothing. The KV client keeps the mapping and the file.
  static Status Link(const std::string& dir, const SegmentFile& segment,
                     std::vector<TensorRegion> regions, std::unique_ptr<SharedTensors>* out);
  // Unmaps and deletes the file (a link: deletes the link).
  ~SharedTensors();
  SharedTensors(const SharedTensors&) = delete;
  SharedTensors& operator=(const SharedTensors&) = delete;

  const std::string& file_name() const { return file_name_; }  // in the directory
  const std::string& path() const { return path_; }
  uint64_t bytes() const { return bytes_; }
  const std::vector<TensorRegion>& regions() const { return regions_; }
  float* values(size_t key) const;
  float* grads(size_t key) const;

  // Deletes the files of sessions an earlier agent left in `dir` (it was
  // killed before it could); returns how many.
  static int RemoveLeftovers(const std::string& dir);

 private:
  SharedTensors() = default;

  std::string file_name_;
  std::string path_;
  uint64_t bytes_ = 0;
  std::vector<TensorRegion> regions_;
  char* base_ = nullptr;
  bool mapped_ = false;  // base_ is this object's mapping (not a link's)
};

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_SHARED_TENSORS_H_
