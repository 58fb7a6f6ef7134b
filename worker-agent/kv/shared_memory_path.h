// A worker's side of the shared memory transport (common/shared_memory.h):
// its segment, with a staging and a landing region for each of its parts
// (each tensor's back to back: a model may live there), and which servers
// can map it.
//
// A server is tried only where it is on this host (OnThisHost). The
// first request tells whether the server maps the segment: a pull's answer
// landed or came in the answer; a push was applied, or refused before the
// server looked at its id (then it goes again, over TCP). Each part's regions serve one push
// and one pull at a time: a request that finds them in use by another one
// still in flight goes over gRPC instead.
//
// Values read where the server keeps them (map_values: a sync job's built-in
// trainer): a tensor of at least kMinMappedBytes whose parts start on pages
// is read from one of two views, by the parity of the version pulled. A part
// a server answers as MappedValues is mapped there (privately: the worker's
// writes never reach the server), once; the server writes version v + 2 to
// the buffer of version v, which the worker maps in the same view, after
// every worker pushed its gradient of version v + 1, so after the worker
// turned to the other view. A part answered otherwise is copied into the
// view as it would be into the model.
//
// Thread-safe: the regions are claimed with atomics, the reach and the
// views' mappings with mutexes.
#ifndef KUBEPS_WORKER_AGENT_KV_SHARED_MEMORY_PATH_H_
#define KUBEPS_WORKER_AGENT_KV_SHARED_MEMORY_PATH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/gradient_codec.h"
#include "common/shared_memory.h"
#include "common/status.h"
#include "kubeps.pb.h"
#include "worker-agent/kv/placement.h"

namespace kubeps {

class SharedMemoryPath {
 public:
  // `parts` must outlive this object; requests name parts by pointers into it.
  static Status Create(const std::string& node_id, const std::vector<Part>& parts, bool map_values,
                       std::unique_ptr<SharedMemoryPath>* out);
  ~SharedMemoryPath();

  // Whether `address` (host:port) is a server worth offering the segment
  // to: at a loopback address, and at `own_host` unless that is empty.
  static bool OnThisHost(const std::string& address, const std::string& own_host);
  // A server at a new address: `loopback` says whether to try it again.
  void Reset(int server, bool loopback);
  // Records what a request found out; true if that is news.
  bool Learned(int server, bool maps_segment);
  // Whether the segment is worth offering to `server` (not yet refused).
  bool MayTry(int server);

  // Claims the batch's staging regions and writes the gradients into them,
  // encoded (two-bit moves its residuals on, as a push over gRPC would);
  // false, with nothing written, if one is still in use.
  bool StagePush(const std::vector<const Part*>& batch, const std::vector<const float*>& grads,
                 GradientEncoding encoding, float threshold,
                 std::vector<std::vector<float>>* residuals, v1::SharedMemoryRef* ref);
  // The staged bytes back to back: a push's data for a server that cannot
  // map the segment after all (the same bytes, not encoded again).
  std::string StagedBytes(const std::vector<const Part*>& batch, GradientEncoding encoding) const;
  void EndPush(const std::vector<const Part*>& batch);

  // Claims the batch's landing regions and opens them for a new ticket;
  // false if one is still in use. Parts whose places in `values` are views
  // (Destination) are offered to be mapped.
  bool OpenPull(const std::vector<const Part*>& batch, const std::vector<float*>& values,
                v1::SharedMemoryRef* ref);
  // Takes the landed values of pull `ref` into the tensors: copies them, or
  // maps the parts answered as `mapped`; their smallest version in
  // *version. An error if a region does not hold that pull's values, or a
  // mapping fails.
  Status TakeLanded(const std::vector<const Part*>& batch, const v1::SharedMemoryRef& ref,
                    const std::vector<v1::MappedValues>& mapped, const std::vector<float*>& values,
                    uint64_t* version);
  // An answer's bytes are about to be written to the batch's places in
  // `values`: a view that mapped a server's buffer there holds copies now.
  void Written(const std::vector<const Part*>& batch, const std::vector<float*>& values);
  // Where a pull of `version` puts tensor `key`'s values when the caller
  // passed `given`: one of the tensor's views by the version's parity if
  // `given` is one, which Values(key) names from now on; else `given`.
  float* Destination(uint32_t key, float* given, uint64_t version);
  void EndPull(const std::vector<const Part*>& batch);

  // Where tensor `key`'s staged gradients (float32) and landed values lie,
  // back to back over its parts (for a tensor read from views, the view of
  // the last Destination); null for a key without parts. A model that
  // keeps its gradients and values there is not copied at all: StagePush
  // and TakeLanded skip a tensor passed as its own region. The protocol's
  // rule holds: a gradient is not written while a push of it is in flight
  // (claimed), nor values read while a pull of them is.
  float* Grads(uint32_t key) const;
  float* Values(uint32_t key) const;
  SegmentFile File() const {
    return SegmentFile{"/dev/shm/" + segment_->name(), segment_->base(), segment_->size()};
  }

 private:
  enum class Reach { kUntried, kYes, kNo };
  struct Regions {  // offsets in the segment
    uint64_t staging = 0;
    uint64_t landing = 0;  // the header
    uint64_t values = 0;
  };
  struct Tensor {  // offsets in the segment; 0: no parts
    uint64_t grads = 0;
    uint64_t values = 0;
  };
  struct View {  // a tensor's two places to read its values from; none: null
    std::array<float*, 2> at{};
    uint64_t bytes = 0;  // of each reservation, whole pages
  };
  struct Mapping {  // what a part's place in a view maps; empty segment: nothing
    std::string segment;
    uint64_t nonce = 0;
    uint64_t offset = 0;
  };

  SharedMemoryPath(const std::vector<Part>& parts, std::unique_ptr<SharedSegment> segment,
                   std::vector<Regions> regions, std::vector<Tensor> tensors,
                   std::vector<View> views);
  // Reserves the views of every tensor worth them (map_values).
  static Status ReserveViews(const std::vector<Part>& parts,
                             const std::vector<uint64_t>& tensor_floats, std::vector<View>* views);
  static void ReleaseViews(const std::vector<View>& views);
  bool Viewed(uint32_t key) const { return key < views_.size() && views_[key].at[0] != nullptr; }
  // Which of tensor `key`'s views `values` is, or -1.
  int Parity(uint32_t key, const float* values) const;
  Status Map(const Part* part, float* tensor, const v1::MappedValues& mapped);
  size_t Index(const Part* part) const { return static_cast<size_t>(part - parts_.data()); }
  bool Claim(std::atomic<bool>* busy, const std::vector<const Part*>& batch);
  void Release(std::atomic<bool>* busy, const std::vector<const Part*>& batch);
  void FillRef(const std::vector<const Part*>& batch, bool landing, v1::SharedMemoryRef* ref);

  const std::vector<Part>& parts_;
  const std::unique_ptr<SharedSegment> segment_;
  const std::vector<Regions> regions_;                   // by part index
  const std::vector<Tensor> tensors_;                    // by key
  const std::vector<View> views_;                        // by key
  std::unique_ptr<std::atomic<float*>[]> current_view_;  // by key, where views_ has one
  std::mutex views_mutex_;
  std::vector<std::array<Mapping, 2>> mapped_;  // by part index and view
  std::unique_ptr<std::atomic<bool>[]> pushing_;
  std::unique_ptr<std::atomic<bool>[]> pulling_;
  std::atomic<uint64_t> next_ticket_{1};
  std::mutex reach_mutex_;
  std::vector<Reach> reach_;  // by server rank, grown on demand
};

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_SHARED_MEMORY_PATH_H_
