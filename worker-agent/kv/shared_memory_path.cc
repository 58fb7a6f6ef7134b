#include "worker-agent/kv/shared_memory_path.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "common/copy_bytes.h"
#include "common/host_port.h"

namespace kubeps {
namespace {

uint64_t Aligned(uint64_t bytes) {
  return (bytes + kSharedAlignment - 1) / kSharedAlignment * kSharedAlignment;
}

}  // namespace

Status SharedMemoryPath::Create(const std::string& node_id, const std::vector<Part>& parts,
                                std::unique_ptr<SharedMemoryPath>* out) {
  // The landing headers first, one per part; then each tensor's staging and
  // landing values, each back to back over its parts, so that a model may
  // keep its gradients and values there (Grads, Values).
  std::vector<uint64_t> tensor_floats;
  for (const Part& part : parts) {
    if (tensor_floats.size() <= part.key) tensor_floats.resize(part.key + 1, 0);
    tensor_floats[part.key] = std::max(tensor_floats[part.key], part.offset + part.length);
  }
  uint64_t end = SharedSegment::FirstRegion() + parts.size() * sizeof(LandingHeader);
  std::vector<Tensor> tensors(tensor_floats.size());
  for (size_t key = 0; key < tensors.size(); ++key) {
    if (tensor_floats[key] == 0) continue;
    // A staging region holds float32, the largest encoding.
    const uint64_t bytes = Aligned(tensor_floats[key] * sizeof(float));
    tensors[key] = {end, end + bytes};
    end += 2 * bytes;
  }
  std::vector<Regions> regions(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& tensor = tensors[parts[i].key];
    regions[i].landing = SharedSegment::FirstRegion() + i * sizeof(LandingHeader);
    regions[i].staging = tensor.grads + parts[i].offset * sizeof(float);
    regions[i].values = tensor.values + parts[i].offset * sizeof(float);
  }
  std::unique_ptr<SharedSegment> segment;
  if (Status s = SharedSegment::Create(node_id, end - SharedSegment::FirstRegion(), &segment);
      !s.ok()) {
    return s;
  }
  for (const Regions& region : regions) {
    landing::Init(reinterpret_cast<LandingHeader*>(segment->base() + region.landing));
  }
  out->reset(
      new SharedMemoryPath(parts, std::move(segment), std::move(regions), std::move(tensors)));
  return Status::Ok();
}

SharedMemoryPath::SharedMemoryPath(const std::vector<Part>& parts,
                                   std::unique_ptr<SharedSegment> segment,
                                   std::vector<Regions> regions, std::vector<Tensor> tensors)
    : parts_(parts),
      segment_(std::move(segment)),
      regions_(std::move(regions)),
      tensors_(std::move(tensors)),
      pushing_(new std::atomic<bool>[parts.size()]()),
      pulling_(new std::atomic<bool>[parts.size()]()) {}

float* SharedMemoryPath::Grads(uint32_t key) const {
  if (key >= tensors_.size() || tensors_[key].grads == 0) return nullptr;
  return reinterpret_cast<float*>(segment_->base() + tensors_[key].grads);
}

float* SharedMemoryPath::Values(uint32_t key) const {
  if (key >= tensors_.size() || tensors_[key].values == 0) return nullptr;
  return reinterpret_cast<float*>(segment_->base() + tensors_[key].values);
}

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
    if (landing) ref->add_value_offsets(regions.values);
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
    const float* from = grads[part->key] + part->offset;
    char* to = segment_->base() + regions_[Index(part)].staging;
    // A model computing its gradients into Grads(key) has staged them already.
    if (encoding == GradientEncoding::kFloat32 && reinterpret_cast<const char*>(from) == to)
      continue;
    EncodeGradient(encoding, from, part->length, threshold, residual, to);
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
    const Regions& regions = regions_[Index(part)];
    uint64_t landed_version = 0;
    if (!landing::Landed(reinterpret_cast<const LandingHeader*>(segment_->base() + regions.landing),
                         ref.ticket(), &landed_version)) {
      return Status::Internal("the server answered pull " + std::to_string(ref.ticket()) +
                              " as landed, but key " + std::to_string(part->key) + "'s part at " +
                              std::to_string(part->offset) + " does not hold its values");
    }
    const char* from = segment_->base() + regions.values;
    float* to = values[part->key] + part->offset;
    // A model reading its values from Values(key) has them already.
    if (reinterpret_cast<const char*>(to) != from)
      CopyBytes(to, from, part->length * sizeof(float));
    *version = std::min(*version, landed_version);
  }
  return Status::Ok();
}

void SharedMemoryPath::EndPull(const std::vector<const Part*>& batch) {
  Release(pulling_.get(), batch);
}

}  // namespace kubeps
