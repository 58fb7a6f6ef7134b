#include "worker-agent/kv/shared_memory_path.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/host_port.h"

namespace kubeps {
namespace {

uint64_t Aligned(uint64_t bytes) {
  return (bytes + kSharedAlignment - 1) / kSharedAlignment * kSharedAlignment;
}

}  // namespace

Status SharedMemoryPath::Create(const std::string& node_id, const std::vector<Part>& parts,
                                std::unique_ptr<SharedMemoryPath>* out) {
  std::vector<Regions> regions(parts.size());
  uint64_t end = SharedSegment::FirstRegion();
  for (size_t i = 0; i < parts.size(); ++i) {
    // A staging region holds float32, the largest encoding.
    const uint64_t bytes = Aligned(parts[i].length * sizeof(float));
    regions[i].staging = end;
    regions[i].landing = end + bytes;
    end += bytes + sizeof(LandingHeader) + bytes;
  }
  std::unique_ptr<SharedSegment> segment;
  if (Status s = SharedSegment::Create(node_id, end - SharedSegment::FirstRegion(), &segment);
      !s.ok()) {
    return s;
  }
  for (const Regions& region : regions) {
    landing::Init(reinterpret_cast<LandingHeader*>(segment->base() + region.landing));
  }
  out->reset(new SharedMemoryPath(parts, std::move(segment), std::move(regions)));
  return Status::Ok();
}

SharedMemoryPath::SharedMemoryPath(const std::vector<Part>& parts,
                                   std::unique_ptr<SharedSegment> segment,
                                   std::vector<Regions> regions)
    : parts_(parts),
      segment_(std::move(segment)),
      regions_(std::move(regions)),
      pushing_(new std::atomic<bool>[parts.size()]()),
      pulling_(new std::atomic<bool>[parts.size()]()) {}

bool SharedMemoryPath::OnThisHost(const std::string& address, const std::string& own_host) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port).ok()) return false;
  host = Unbracketed(host);
  if (!own_host.empty() && host != Unbracketed(own_host)) return false;
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
         std::memcmp(&v6, &in6addr_loopback, sizeof v6) == 0;
}

void SharedMemoryPath::Reset(int server, bool loopback) {
  std::lock_guard<std::mutex> lock(reach_mutex_);
  if (reach_.size() <= static_cast<size_t>(server)) reach_.resize(server + 1, Reach::kNo);
  reach_[server] = loopback ? Reach::kUntried : Reach::kNo;
}

bool SharedMemoryPath::Learned(int server, bool maps_segment) {
  std::lock_guard<std::mutex> lock(reach_mutex_);
  if (reach_.size() <= static_cast<size_t>(server)) return false;
  const Reach now = maps_segment ? Reach::kYes : Reach::kNo;
  const bool changed = reach_[server] != now;
  reach_[server] = now;
  return changed;
}

bool SharedMemoryPath::MayTry(int server) {
  std::lock_guard<std::mutex> lock(reach_mutex_);
  return static_cast<size_t>(server) < reach_.size() && reach_[server] != Reach::kNo;
}

bool SharedMemoryPath::Claim(std::atomic<bool>* busy, const std::vector<const Part*>& batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (busy[Index(batch[i])].exchange(true, std::memory_order_acquire)) {
      for (size_t j = 0; j < i; ++j) busy[Index(batch[j])].store(false, std::memory_order_release);
      return false;
    }
  }
  return true;
}

void SharedMemoryPath::Release(std::atomic<bool>* busy, const std::vector<const Part*>& batch) {
  for (const Part* part : batch) busy[Index(part)].store(false, std::memory_order_release);
}

void SharedMemoryPath::FillRef(const std::vector<const Part*>& batch, bool landing,
                               v1::SharedMemoryRef* ref) {
  ref->set_segment(segment_->name());
  ref->set_nonce(segment_->nonce());
  for (const Part* part : batch) {
    const Regions& regions = regions_[Index(part)];
    ref->add_offsets(landing ? regions.landing : regions.staging);
  }
}

bool SharedMemoryPath::StagePush(const std::vector<const Part*>& batch,
                                 const std::vector<const float*>& grads, GradientEncoding encoding,
                                 float threshold, std::vector<std::vector<float>>* residuals,
                                 v1::SharedMemoryRef* ref) {
  if (!Claim(pushing_.get(), batch)) return false;
  for (const Part* part : batch) {
    float* residual = encoding == GradientEncoding::kTwoBit
                          ? (*residuals)[part->key].data() + part->offset
                          : nullptr;
    EncodeGradient(encoding, grads[part->key] + part->offset, part->length, threshold, residual,
                   segment_->base() + regions_[Index(part)].staging);
  }
  FillRef(batch, false, ref);
  return true;
}

std::string SharedMemoryPath::StagedBytes(const std::vector<const Part*>& batch,
                                          GradientEncoding encoding) const {
  std::string bytes;
  for (const Part* part : batch) {
    bytes.append(segment_->base() + regions_[Index(part)].staging,
                 EncodedBytes(encoding, part->length));
  }
  return bytes;
}

void SharedMemoryPath::EndPush(const std::vector<const Part*>& batch) {
  Release(pushing_.get(), batch);
}

bool SharedMemoryPath::OpenPull(const std::vector<const Part*>& batch, v1::SharedMemoryRef* ref) {
  if (!Claim(pulling_.get(), batch)) return false;
  const uint64_t ticket = next_ticket_++;
  for (const Part* part : batch) {
    landing::Open(
        reinterpret_cast<LandingHeader*>(segment_->base() + regions_[Index(part)].landing), ticket);
  }
  FillRef(batch, true, ref);
  ref->set_ticket(ticket);
  return true;
}

Status SharedMemoryPath::CopyLanded(const std::vector<const Part*>& batch,
                                    const v1::SharedMemoryRef& ref,
                                    const std::vector<float*>& values, uint64_t* version) const {
  *version = UINT64_MAX;
  for (const Part* part : batch) {
    const char* region = segment_->base() + regions_[Index(part)].landing;
    uint64_t landed_version = 0;
    if (!landing::Landed(reinterpret_cast<const LandingHeader*>(region), ref.ticket(),
                         &landed_version)) {
      return Status::Internal("the server answered pull " + std::to_string(ref.ticket()) +
                              " as landed, but key " + std::to_string(part->key) + "'s part at " +
                              std::to_string(part->offset) + " does not hold its values");
    }
    std::memcpy(values[part->key] + part->offset, region + sizeof(LandingHeader),
                part->length * sizeof(float));
    *version = std::min(*version, landed_version);
  }
  return Status::Ok();
}

void SharedMemoryPath::EndPull(const std::vector<const Part*>& batch) {
  Release(pulling_.get(), batch);
}

}  // namespace kubeps
