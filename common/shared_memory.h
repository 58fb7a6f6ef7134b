// Tensors through shared memory between a worker and a server on one host
// (docs/shared-memory.md), as BytePS does for a co-located
// server and worker: gRPC still carries every request and answer, but their
// tensor bytes lie in a file of /dev/shm that the worker creates and the
// server maps, so they cross neither the kernel's socket buffers nor the
// loopback TCP stack.
//
// The file is the worker's: for each of its parts a staging region, which a
// push fills and the server reads, and a landing region, which the server
// fills with a pull's answer. Exactly-once holds as it does over TCP:
// - a push's staging region is left alone until its push is acknowledged;
//   the shard checks a request's id before it reads any data, so a late
//   duplicate never reads a region that already holds the next push;
// - a pull's landing region carries a ticket, the pull's own: the server
//   writes only while the ticket is still the one its request names, so an
//   answer to an old pull that arrives late (a delayed duplicate) never
//   overwrites the answer to a newer one.
//
// Trust: both ends are processes of one job and one uid on one host; a
// server maps only files of its own uid whose header holds the nonce the
// request names. A process of that uid could still crash the server (by
// shrinking a file it maps), as it could by signalling it.
#ifndef KUBEPS_COMMON_SHARED_MEMORY_H_
#define KUBEPS_COMMON_SHARED_MEMORY_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace kubeps {

// Regions start on this boundary (a cache line; the landing header's
// atomic must be aligned).
inline constexpr uint64_t kSharedAlignment = 64;

// A segment's file (in /dev/shm) and this process's mapping of it: what a
// pod's agent hands its training program so that the program maps the
// memory the servers read and write (worker-agent/kv/segment_file.h).
struct SegmentFile {
  std::string path;
  char* base = nullptr;
  uint64_t bytes = 0;
};

class SharedSegment {
 public:
  // The worker's side: creates /dev/shm/<name> (O_EXCL, mode 0600) of at
  // least `bytes` bytes after its header, with a name that starts with
  // "kubeps-", holds `owner` (letters, digits and -._ only) and this
  // process's id, and a random nonce. Deletes first the files earlier
  // processes of this uid left behind when they died.
  static Status Create(const std::string& owner, uint64_t bytes,
                       std::unique_ptr<SharedSegment>* out);
  // The server's side: maps the segment `name` if it is a file of this uid
  // whose header holds `nonce`; an error naming the file otherwise.
  static Status Attach(const std::string& name, uint64_t nonce,
                       std::unique_ptr<SharedSegment>* out);
  ~SharedSegment();  // unmaps; the creator also deletes the file
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return nonce_; }
  // The whole mapping, header included: offsets count from here.
  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The first offset after the header.
  static uint64_t FirstRegion() { return kSharedAlignment; }
  // Whether [offset, offset + bytes) lies after the header and inside.
  bool Holds(uint64_t offset, uint64_t bytes) const;

 private:
  SharedSegment() = default;

  std::string name_;
  uint64_t nonce_ = 0;
  char* base_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
  bool owner_ = false;
};

// Parts of a sync job's tensors of at least this many bytes may be read by
// a worker on the server's host where the server keeps them (mapped, see
// MapPrivately and v1::MappedValues); smaller ones are copied, which costs
// less than a mapping's pages.
inline constexpr uint64_t kMinMappedBytes = 64 << 10;

// The size of a page: where a mapping may start.
uint64_t PageSize();

// Maps `bytes` of the segment `name` (a file of this uid whose header holds
// `nonce`) from `offset` on, a page boundary, at `at`, a page boundary,
// in place of what was mapped there. Privately: this process reads what the
// segment's owner writes there, while its own writes stay its own (each page
// copied on its first write), so it can never change the owner's values.
// An error naming the file otherwise (what `at` held may then be zeroes):
// Gone where no such file exists any more.
Status MapPrivately(const std::string& name, uint64_t nonce, uint64_t offset, uint64_t bytes,
                    void* at);

// The header in front of each landing region. The server writes a region
// holding its mutex, so the worker never opens it for a new pull in the
// middle of a write; the mutex is robust, so a server that dies while it
// holds it (killed, evicted) holds up no one.
struct alignas(kSharedAlignment) LandingHeader {
  pthread_mutex_t mutex;
  std::atomic<uint64_t> ticket;  // seq * 2, plus 1 once the server has written it
  uint64_t version;              // of the values written
};
static_assert(sizeof(LandingHeader) == kSharedAlignment);
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the landing ticket is shared between processes");

namespace landing {

// The worker, once for each region of a new segment.
void Init(LandingHeader* header);

// The worker, before it sends pull `seq` (seqs start at 1).
void Open(LandingHeader* header, uint64_t seq);

enum class Claim {
  kWrite,       // this handling writes the values (it holds the mutex), then calls Done
  kWrittenToo,  // another handling of the same pull wrote them
  kSuperseded,  // the worker has moved on to a newer pull: write nothing
};
// The server, when it has pull `seq`'s values.
Claim Begin(LandingHeader* header, uint64_t seq);
void Done(LandingHeader* header, uint64_t version);

// The worker, after the answer came: whether the values of pull `seq` are
// there, and their version.
bool Landed(const LandingHeader* header, uint64_t seq, uint64_t* version);

}  // namespace landing
}  // namespace kubeps

#endif  // KUBEPS_COMMON_SHARED_MEMORY_H_
