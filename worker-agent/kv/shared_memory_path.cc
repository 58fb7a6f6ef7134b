#include "worker-agent/kv/shared_memory_path.h"

#include <arpa/inet.h>
#include <sys/mman.h>

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
                                bool map_values, std::unique_ptr<SharedMemoryPath>* out) {
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
  std::vector<View> views(tensors.size());
  if (map_values) {
    if (Status s = ReserveViews(parts, tensor_floats, &views); !s.ok()) return s;
  }
  out->reset(new SharedMemoryPath(parts, std::move(segment), std::move(regions), std::move(tensors),
                                  std::move(views)));
  return Status::Ok();
}

Status SharedMemoryPath::ReserveViews(const std::vector<Part>& parts,
                                      const std::vector<uint64_t>& tensor_floats,
                                      std::vector<View>* views) {
  const uint64_t page = PageSize();
  std::vector<bool> worth(tensor_floats.size());
  for (size_t key = 0; key < tensor_floats.size(); ++key) {
    worth[key] = tensor_floats[key] * sizeof(float) >= kMinMappedBytes;
  }
  for (const Part& part : parts)
    worth[part.key] = worth[part.key] && part.offset * sizeof(float) % page == 0;
  for (size_t key = 0; key < tensor_floats.size(); ++key) {
    if (!worth[key]) continue;
    View& view = (*views)[key];
    view.bytes = (tensor_floats[key] * sizeof(float) + page - 1) / page * page;
    for (float*& at : view.at) {
      void* reserved =
          ::mmap(nullptr, view.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (reserved == MAP_FAILED) {
        ReleaseViews(*views);
        return Status::Error("cannot reserve " + std::to_string(view.bytes) +
                             " bytes to read tensor " + std::to_string(key) + "'s values from");
      }
      at = static_cast<float*>(reserved);
    }
  }
  return Status::Ok();
}

SharedMemoryPath::SharedMemoryPath(const std::vector<Part>& parts,
                                   std::unique_ptr<SharedSegment> segment,
                                   std::vector<Regions> regions, std::vector<Tensor> tensors,
                                   std::vector<View> views)
    : parts_(parts),
      segment_(std::move(segment)),
      regions_(std::move(regions)),
      tensors_(std::move(tensors)),
      views_(std::move(views)),
      current_view_(new std::atomic<float*>[views_.size()]),
      mapped_(parts.size()),
      pushing_(new std::atomic<bool>[parts.size()]()),
      pulling_(new std::atomic<bool>[parts.size()]()) {
  for (size_t key = 0; key < views_.size(); ++key) current_view_[key] = views_[key].at[0];
}

void SharedMemoryPath::ReleaseViews(const std::vector<View>& views) {
  for (const View& view : views) {
    for (float* at : view.at) {
      if (at) ::munmap(at, view.bytes);
    }
  }
}

SharedMemoryPath::~SharedMemoryPath() { ReleaseViews(views_); }

float* SharedMemoryPath::Grads(uint32_t key) const {
  if (key >= tensors_.size() || tensors_[key].grads == 0) return nullptr;
  return reinterpret_cast<float*>(segment_->base() + tensors_[key].grads);
}

float* SharedMemoryPath::Values(uint32_t key) const {
  if (Viewed(key)) return current_view_[key].load();
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

bool SharedMemoryPath::OpenPull(const std::vector<const Part*>& batch,
                                const std::vector<float*>& values, v1::SharedMemoryRef* ref) {
  if (!Claim(pulling_.get(), batch)) return false;
  const uint64_t ticket = next_ticket_++;
  for (const Part* part : batch) {
    landing::Open(
        reinterpret_cast<LandingHeader*>(segment_->base() + regions_[Index(part)].landing), ticket);
  }
  FillRef(batch, true, ref);
  ref->set_ticket(ticket);
  auto in_view = [&](const Part* part) { return Parity(part->key, values[part->key]) >= 0; };
  if (std::any_of(batch.begin(), batch.end(), in_view)) {
    for (const Part* part : batch) ref->add_mappable(in_view(part));
  }
  return true;
}

int SharedMemoryPath::Parity(uint32_t key, const float* values) const {
  if (!Viewed(key)) return -1;
  for (int parity = 0; parity < 2; ++parity) {
    if (values == views_[key].at[parity]) return parity;
  }
  return -1;
}

float* SharedMemoryPath::Destination(uint32_t key, float* given, uint64_t version) {
  if (Parity(key, given) < 0) return given;
  float* view = views_[key].at[version % 2];
  current_view_[key] = view;
  return view;
}

void SharedMemoryPath::Written(const std::vector<const Part*>& batch,
                               const std::vector<float*>& values) {
  std::lock_guard<std::mutex> lock(views_mutex_);
  for (const Part* part : batch) {
    const int parity = Parity(part->key, values[part->key]);
    if (parity >= 0) mapped_[Index(part)][parity] = Mapping{};
  }
}

Status SharedMemoryPath::Map(const Part* part, float* tensor, const v1::MappedValues& mapped) {
  const int parity = Parity(part->key, tensor);  // TakeLanded checked it is a view
  std::lock_guard<std::mutex> lock(views_mutex_);
  Mapping& now = mapped_[Index(part)][parity];
  // The same buffer as the last time this view held this part: the server
  // wrote the new version into it, which the mapping shows as it is.
  if (now.segment == mapped.segment() && now.nonce == mapped.nonce() &&
      now.offset == mapped.offset()) {
    return Status::Ok();
  }
  now = Mapping{};
  Status s = MapPrivately(mapped.segment(), mapped.nonce(), mapped.offset(),
                          part->length * sizeof(float), tensor + part->offset);
  if (s.ok()) now = Mapping{mapped.segment(), mapped.nonce(), mapped.offset()};
  return s;
}

Status SharedMemoryPath::TakeLanded(const std::vector<const Part*>& batch,
                                    const v1::SharedMemoryRef& ref,
                                    const std::vector<v1::MappedValues>& mapped,
                                    const std::vector<float*>& values, uint64_t* version) {
  *version = UINT64_MAX;
  std::vector<const v1::MappedValues*> mapped_at(batch.size(), nullptr);
  for (const v1::MappedValues& m : mapped) {
    if (m.part() >= batch.size() || mapped_at[m.part()]) {
      return Status::Internal("the server answered pull " + std::to_string(ref.ticket()) +
                              " with part " + std::to_string(m.part()) +
                              " mapped twice or out of its " + std::to_string(batch.size()));
    }
    const Part* part = batch[m.part()];
    if (Parity(part->key, values[part->key]) < 0) {
      return Status::Internal("the server answered key " + std::to_string(part->key) +
                              "'s part at " + std::to_string(part->offset) +
                              " as mapped, but this worker does not read it from a view");
    }
    mapped_at[m.part()] = &m;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const Part* part = batch[i];
    if (mapped_at[i]) {
      if (Status s = Map(part, values[part->key], *mapped_at[i]); !s.ok()) return s;
      *version = std::min(*version, mapped_at[i]->version());
      continue;
    }
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
    if (reinterpret_cast<const char*>(to) != from) {
      Written({part}, values);
      CopyBytes(to, from, part->length * sizeof(float));
    }
    *version = std::min(*version, landed_version);
  }
  return Status::Ok();
}

void SharedMemoryPath::EndPull(const std::vector<const Part*>& batch) {
  Release(pulling_.get(), batch);
}

}  // namespace kubeps
