#include "worker-agent/kv/sidecar_kv_worker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/copy_bytes.h"

namespace kubeps {
namespace {

using json = nlohmann::json;

// How long the destructor waits for the agent to end the session (it first
// waits for the session's requests still in flight) before it just closes
// the socket, which ends the session too.
constexpr int kByeTimeoutMs = 10000;

std::string TensorName(size_t key) { return "tensor-" + std::to_string(key); }

// A reply's unsigned field, or `fallback` when it is absent or not one (no
// exception from a reply the client did not expect).
uint64_t UnsignedField(const json& reply, const char* name, uint64_t fallback) {
  auto it = reply.find(name);
  return it != reply.end() && it->is_number_unsigned() ? it->get<uint64_t>() : fallback;
}

std::string StringField(const json& reply, const char* name) {
  auto it = reply.find(name);
  return it != reply.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

Status KVWorker::Connect(const SidecarOptions& options, std::unique_ptr<KVWorker>* out) {
  std::unique_ptr<SidecarKVWorker> worker;
  if (Status s = SidecarKVWorker::Connect(options, &worker); !s.ok()) return s;
  *out = std::move(worker);
  return Status::Ok();
}

Status SidecarKVWorker::Connect(const SidecarOptions& options,
                                std::unique_ptr<SidecarKVWorker>* out) {
  std::string dir = options.socket_dir;
  if (dir.empty()) {
    const char* from_environment = std::getenv("KUBEPS_SOCKET_DIR");
    dir = from_environment ? from_environment : "";
  }
  if (dir.empty()) {
    return Status::InvalidArgument(
        "KVWorker::Connect: no socket directory: set SidecarOptions::socket_dir, or "
        "KUBEPS_SOCKET_DIR (kubeps run and the operator set it for a worker's own command)");
  }
  std::unique_ptr<SidecarConnection> connection;
  json agent_file;
  if (Status s = SidecarConnection::Open(dir, options.connect_timeout_ms, &connection, &agent_file);
      !s.ok()) {
    return s;
  }
  std::unique_ptr<SidecarKVWorker> worker(new SidecarKVWorker(std::move(connection), dir, options));
  // The agent answers hello once an earlier session of the pod has ended.
  json reply;
  Status s = worker->connection_->Await(
      worker->connection_->Send({{"op", "hello"},
                                 {"protocol", kSidecarProtocolVersion},
                                 {"nonce", agent_file.value("nonce", json())},
                                 {"pid", static_cast<uint64_t>(::getpid())}}),
      &reply, options.connect_timeout_ms);
  if (!s.ok()) return s;
  if (!reply.value("rank", json()).is_number_unsigned() ||
      !reply.value("size", json()).is_number_unsigned()) {
    return Status::Internal("hello: the kubeps agent's reply lacks rank or size: " + reply.dump());
  }
  worker->rank_ = reply["rank"].get<int>();
  worker->size_ = reply["size"].get<int>();
  worker->num_servers_ = static_cast<int>(UnsignedField(reply, "num_servers", 0));
  worker->mode_ = StringField(reply, "mode");
  worker->optimizer_ = StringField(reply, "optimizer");
  worker->checkpoint_interval_ = UnsignedField(reply, "checkpoint_interval", 0);
  *out = std::move(worker);
  return Status::Ok();
}

SidecarKVWorker::SidecarKVWorker(std::unique_ptr<SidecarConnection> connection,
                                 std::string socket_dir, const SidecarOptions& options)
    : connection_(std::move(connection)),
      socket_dir_(std::move(socket_dir)),
      restores_own_state_(options.restores_own_state),
      own_state_steps_(options.own_state_steps) {}

SidecarKVWorker::~SidecarKVWorker() {
  json reply;
  (void)connection_->Await(connection_->Send({{"op", "bye"}}), &reply, kByeTimeoutMs);
  // Our mapping only: the agent has its own, and deletes the file.
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

Status SidecarKVWorker::InitTensors(const std::vector<const float*>& values,
                                    const std::vector<uint64_t>& sizes) {
  bool declared;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (initialized_) {
      return Status::FailedPrecondition(
          "InitTensors: called twice: a session with the kubeps agent initializes its tensors "
          "once (a restarted process connects again and declares the same tensors)");
    }
    declared = !regions_.empty();
  }
  if (sizes.empty()) return Status::InvalidArgument("InitTensors: no tensors");
  if (!values.empty() && values.size() != sizes.size()) {
    return Status::InvalidArgument("InitTensors: " + std::to_string(values.size()) +
                                   " value pointers for " + std::to_string(sizes.size()) +
                                   " tensors (want one per tensor, or none)");
  }
  for (size_t key = 0; key < sizes.size(); ++key) {
    if (sizes[key] == 0) {
      return Status::InvalidArgument("InitTensors: " + TensorName(key) +
                                     " has size 0: every tensor needs at least one element");
    }
  }
  if (declared) {
    // An init that failed earlier (the servers were unreachable): the
    // session's tensors are declared and mapped already.
    std::lock_guard<std::mutex> lock(mutex_);
    bool same = regions_.size() == sizes.size();
    for (size_t key = 0; same && key < sizes.size(); ++key)
      same = regions_[key].numel == sizes[key];
    if (!same) {
      return Status::FailedPrecondition(
          "InitTensors: this session declared other tensors already; a session declares once");
    }
  } else {
    json tensors = json::array();
    for (size_t key = 0; key < sizes.size(); ++key) {
      const std::string name = key < names_.size() ? names_[key] : TensorName(key);
      tensors.push_back(
          {{"name", name}, {"shape", json::array({sizes[key]})}, {"dtype", "float32"}});
    }
    json declared_reply;
    if (Status s = connection_->Call({{"op", "declare"}, {"tensors", tensors}}, &declared_reply);
        !s.ok()) {
      return s;
    }
    if (Status s = MapFile(declared_reply, sizes); !s.ok()) return s;
  }
  // Copy 1 of InitTensors: the initial values into the values regions (the
  // agent stores rank 0's; it reads them during init).
  for (size_t key = 0; key < values.size(); ++key) {
    if (values[key] && values[key] != regions_[key].values) {
      std::memcpy(regions_[key].values, values[key], sizes[key] * sizeof(float));
    }
  }
  json reply;
  json init = {{"op", "init"}};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (restores_own_state_) init["restores_own_state"] = true;
    if (own_state_steps_) init["own_state_steps"] = *own_state_steps_;
  }
  if (Status s = connection_->Call(init, &reply); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  initialized_ = true;
  start_step_ = UnsignedField(reply, "step", 0);
  grads_user_.assign(regions_.size(), 0);
  values_user_.assign(regions_.size(), 0);
  return Status::Ok();
}

Status SidecarKVWorker::HoldsOwnState(std::vector<uint64_t> steps) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (initialized_) {
    return Status::FailedPrecondition(
        "HoldsOwnState after InitTensors: the agent chose the step to start from at init");
  }
  restores_own_state_ = true;
  own_state_steps_ = std::move(steps);
  return Status::Ok();
}

Status SidecarKVWorker::MapFile(const json& declared, const std::vector<uint64_t>& sizes) {
  const json file = declared.value("file", json());
  const json bytes = declared.value("bytes", json());
  const json layout = declared.value("tensors", json());
  if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos ||
      !bytes.is_number_unsigned() || !layout.is_array() || layout.size() != sizes.size()) {
    return Status::Internal("declare: the kubeps agent's reply does not describe the " +
                            std::to_string(sizes.size()) + " tensors declared: " + declared.dump());
  }
  const uint64_t file_bytes = bytes.get<uint64_t>();
  const std::string path = socket_dir_ + "/" + file.get<std::string>();
  std::vector<std::pair<uint64_t, uint64_t>> offsets;  // values, grads
  for (size_t key = 0; key < sizes.size(); ++key) {
    const json& t = layout[key];
    const uint64_t size_bytes = sizes[key] * sizeof(float);
    const bool fits = t.is_object() && t.value("numel", json()) == json(sizes[key]) &&
                      t.value("values", json()).is_number_unsigned() &&
                      t.value("grads", json()).is_number_unsigned();
    if (!fits || t["values"].get<uint64_t>() % alignof(float) != 0 ||
        t["grads"].get<uint64_t>() % alignof(float) != 0 ||
        t["values"].get<uint64_t>() + size_bytes > file_bytes ||
        t["grads"].get<uint64_t>() + size_bytes > file_bytes) {
      return Status::Internal("declare: the kubeps agent's layout of " + TensorName(key) +
                              " does not fit its " + std::to_string(sizes[key]) +
                              " elements in a file of " + std::to_string(file_bytes) +
                              " bytes: " + t.dump());
    }
    offsets.emplace_back(t["values"].get<uint64_t>(), t["grads"].get<uint64_t>());
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return Status::Internal("declare: cannot open the kubeps agent's tensor file " + path + ": " +
                            std::strerror(errno));
  }
  struct stat info {};
  void* base = MAP_FAILED;
  std::string error;
  if (::fstat(fd, &info) != 0 || static_cast<uint64_t>(info.st_size) < file_bytes) {
    error = "it has " + std::to_string(info.st_size) + " bytes, the agent said " +
            std::to_string(file_bytes);
  } else {
    base = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) error = std::strerror(errno);
  }
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) {
    return Status::Internal("declare: cannot map the kubeps agent's tensor file " + path + ": " +
                            error);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  mapping_ = static_cast<char*>(base);
  mapping_bytes_ = file_bytes;
  for (size_t key = 0; key < sizes.size(); ++key) {
    regions_.push_back({sizes[key], reinterpret_cast<float*>(mapping_ + offsets[key].first),
                        reinterpret_cast<float*>(mapping_ + offsets[key].second)});
  }
  return Status::Ok();
}

Status SidecarKVWorker::CheckKeys(const char* op, size_t pointers) const {
  if (!initialized_) return Status::FailedPrecondition(std::string(op) + " before InitTensors");
  if (pointers > regions_.size()) {
    return Status::InvalidArgument(std::string(op) + ": " + std::to_string(pointers) +
                                   " pointers for " + std::to_string(regions_.size()) +
                                   " declared tensors");
  }
  return Status::Ok();
}

KVWorker::Ticket SidecarKVWorker::Push(const std::vector<const float*>& grads, uint64_t step) {
  return StartTransfer("push", &grads, nullptr, step);
}

KVWorker::Ticket SidecarKVWorker::Pull(const std::vector<float*>& values, uint64_t min_version) {
  return StartTransfer("pull", nullptr, &values, min_version);
}

KVWorker::Ticket SidecarKVWorker::PushPull(const std::vector<const float*>& grads,
                                           const std::vector<float*>& values, uint64_t step) {
  return StartTransfer("push_pull", &grads, &values, step);
}

KVWorker::Ticket SidecarKVWorker::StartTransfer(const char* op,
                                                const std::vector<const float*>* grads,
                                                const std::vector<float*>* values, uint64_t step) {
  Pending pending;
  std::vector<uint32_t> pushed, pulled_only;  // keys of the push (or push_pull), of a pull
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t pointers = std::max(grads ? grads->size() : 0, values ? values->size() : 0);
    pending.failure = CheckKeys(op, pointers);
    if (!pending.failure.ok()) {
      ticket = next_ticket_++;
      pending_[ticket] = std::move(pending);
      return ticket;
    }
    const size_t count = regions_.size();
    for (uint32_t key = 0; key < count; ++key) {
      const bool push = grads && key < grads->size() && (*grads)[key];
      float* destination = values && key < values->size() ? (*values)[key] : nullptr;
      if (push) {
        pushed.push_back(key);
        pending.grads_keys.push_back(key);
      }
      // A push_pull pulls every key it pushes (into the values region, at
      // least); a key with a destination and nothing to push is pulled apart.
      if (push && values) {
        pending.pulls.emplace_back(key, destination);
      } else if (destination) {
        pulled_only.push_back(key);
        pending.pulls.emplace_back(key, destination);
      }
    }
    pending.expected_version = grads && values ? step + 1 : grads ? 0 : step;
    ticket = Issue(std::move(pending), op);
    if (!pending_[ticket].failure.ok()) return ticket;
  }
  // Copy 1 of a push: the caller's gradients into the grads regions, outside
  // the lock (the regions are this ticket's until it is waited for).
  for (uint32_t key : pushed) {
    const float* source = (*grads)[key];
    if (source != regions_[key].grads) {
      CopyBytes(regions_[key].grads, source, regions_[key].numel * sizeof(float));
    }
  }
  std::vector<SidecarConnection::RequestId> requests;
  if (!pushed.empty()) {
    requests.push_back(SendTransfer(grads && values ? "push_pull" : "push", pushed, "step", step));
  }
  if (!pulled_only.empty()) {
    // Pull's own min_version, or the version PushPull's pull half waits for.
    requests.push_back(SendTransfer("pull", pulled_only, "min_version", grads ? step + 1 : step));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pending_[ticket].requests = std::move(requests);
  return ticket;
}

SidecarConnection::RequestId SidecarKVWorker::SendTransfer(const char* op,
                                                           const std::vector<uint32_t>& keys,
                                                           const char* step_field, uint64_t step) {
  json numel = json::array();
  for (uint32_t key : keys) numel.push_back(regions_[key].numel);
  return connection_->Send(
      {{"op", op}, {"keys", keys}, {"numel", std::move(numel)}, {step_field, step}});
}

KVWorker::Ticket SidecarKVWorker::Issue(Pending pending, const char* op) {
  const Ticket ticket = next_ticket_++;
  auto busy = [&](const std::vector<Ticket>& users, uint32_t key, const char* region) {
    if (users[key] == 0) return false;
    pending.failure = Status::FailedPrecondition(
        std::string(op) + ": the " + region + " region of " + TensorName(key) +
        " is in use by ticket " + std::to_string(users[key]) + ": Wait for it first");
    return true;
  };
  bool conflict = false;
  for (uint32_t key : pending.grads_keys) conflict = conflict || busy(grads_user_, key, "grads");
  for (const auto& [key, unused] : pending.pulls) {
    conflict = conflict || busy(values_user_, key, "values");
  }
  if (!conflict) {
    for (uint32_t key : pending.grads_keys) grads_user_[key] = ticket;
    for (const auto& [key, unused] : pending.pulls) values_user_[key] = ticket;
  }
  pending_[ticket] = std::move(pending);
  return ticket;
}

void SidecarKVWorker::Release(const Pending& pending) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t key : pending.grads_keys) grads_user_[key] = 0;
  for (const auto& [key, unused] : pending.pulls) values_user_[key] = 0;
}

Status SidecarKVWorker::Wait(Ticket ticket) {
  uint64_t version = 0;
  return WaitWithVersion(ticket, &version);
}

Status SidecarKVWorker::WaitWithVersion(Ticket ticket, uint64_t* version) {
  *version = 0;
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(ticket);
    if (it == pending_.end()) {
      return Status::NotFound("Wait: ticket " + std::to_string(ticket) +
                              " is unknown, or was waited for already");
    }
    pending = std::move(it->second);
    pending_.erase(it);
  }
  if (!pending.failure.ok()) return pending.failure;  // it took no region
  // The agent's handles, from the replies to the requests; a request it
  // refused (a numel that does not match, a call after finish) has none.
  Status refused;
  json handles = json::array();
  for (SidecarConnection::RequestId request : pending.requests) {
    json reply;
    Status s = connection_->Await(request, &reply);
    if (s.ok() && !reply.value("handle", json()).is_number_unsigned()) {
      s = Status::Internal("the kubeps agent's reply has no handle: " + reply.dump());
    }
    if (s.ok()) {
      handles.push_back(reply["handle"]);
    } else if (refused.ok()) {
      refused = s;
    }
  }
  // The requests the agent accepted are waited for even when one was
  // refused, so none is left in flight behind the caller's back.
  Status waited;
  json reply;
  if (!handles.empty()) waited = connection_->Call({{"op", "wait"}, {"handles", handles}}, &reply);
  if (waited.IsAborted()) {
    // The agent has recovered, and pulled the parameters of resume_step
    // into every values region (Recover says which step).
    std::lock_guard<std::mutex> lock(mutex_);
    rolled_back_ = true;
    resume_step_ = UnsignedField(reply, "resume_step", 0);
  }
  Status result = !waited.ok() ? waited : refused;
  if (result.ok() && !pending.pulls.empty()) {
    // Copy 2 of a pull: the values regions out to the caller's buffers,
    // before the regions are given back to the next pull.
    for (const auto& [key, destination] : pending.pulls) {
      if (destination && destination != regions_[key].values) {
        CopyBytes(destination, regions_[key].values, regions_[key].numel * sizeof(float));
      }
    }
    // An agent that does not report versions: the one the request asked for.
    *version = UnsignedField(reply, "version", pending.expected_version);
  }
  Release(pending);
  return result;
}

Status SidecarKVWorker::Barrier(const std::string& name) {
  json reply;
  return connection_->Call({{"op", "barrier"}, {"name", name}}, &reply);
}

Status SidecarKVWorker::Finish() {
  json reply;
  return connection_->Call({{"op", "finish"}}, &reply);
}

Status SidecarKVWorker::Membership(uint64_t step, StepMembership* out) {
  json reply;
  if (Status s = connection_->Call({{"op", "membership"}, {"step", step}}, &reply); !s.ok())
    return s;
  *out = StepMembership{};
  out->member = reply.value("member", false);
  out->position = reply.value("position", 0);
  out->count = reply.value("count", 0);
  out->first_example = reply.value("first_example", uint64_t{0});
  out->end_example = reply.value("end_example", uint64_t{0});
  out->global_batch = reply.value("global_batch", uint64_t{0});
  out->scaled_away = reply.value("scaled_away", false);
  if (reply.contains("next_member_step"))
    out->next_member_step = reply["next_member_step"].get<uint64_t>();
  return Status::Ok();
}

int64_t SidecarKVWorker::NewestCommonCheckpoint() const {
  json reply;
  if (!connection_->Call({{"op", "checkpoints"}}, &reply).ok()) return -1;
  return reply.value("newest_common_step", int64_t{-1});
}

Status SidecarKVWorker::Recover(uint64_t* resume_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  *resume_step = rolled_back_ ? resume_step_ : start_step_;
  return Status::Ok();
}

float* SidecarKVWorker::SharedValues(uint32_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return key < regions_.size() ? regions_[key].values : nullptr;
}

float* SidecarKVWorker::SharedGrads(uint32_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return key < regions_.size() ? regions_[key].grads : nullptr;
}

uint64_t SidecarKVWorker::start_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return start_step_;
}

}  // namespace kubeps
