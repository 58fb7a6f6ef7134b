#include "worker-agent/sidecar/session.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "common/logging.h"
#include "common/termination_message.h"
#include "worker-agent/sidecar/request_fields.h"

namespace kubeps::sidecar {
namespace {

using json = nlohmann::json;

// Tensors are float32; a tensor over this many elements is surely a mistake
// (2^40 bytes), and it keeps the byte arithmetic far from overflowing.
constexpr uint64_t kMaxNumel = uint64_t{1} << 38;

}  // namespace

Session::Session(SessionContext context, Send send)
    : context_(std::move(context)), send_(std::move(send)) {}

Session::~Session() { Close(); }

Session::Next Session::Handle(const json& request) {
  const json id = request.contains("id") ? request["id"] : json();
  if (!id.is_number_unsigned()) {
    send_(
        ToReply(json(), {kInvalidArgument, "every request needs \"id\", an unsigned integer; got " +
                                               (request.contains("id") ? id.dump() : "none")}));
    return Next::kRead;
  }
  const json op_field = request.contains("op") ? request["op"] : json();
  const std::string op = op_field.is_string() ? op_field.get<std::string>() : "";
  std::optional<Outcome> now;
  if (op == "bye") {
    bye_id_ = id;
    return Next::kBye;
  }
  if (op == "hello") {
    now = Hello(request);
  } else if (op == "declare") {
    now = Declare(request);
  } else if (op == "init") {
    now = StartInit(id, request);
  } else if (op == "push") {
    now = StartTransfer(Kind::kPush, "push", request);
  } else if (op == "pull") {
    now = StartTransfer(Kind::kPull, "pull", request);
  } else if (op == "push_pull") {
    now = StartTransfer(Kind::kPushPull, "push_pull", request);
  } else if (op == "wait") {
    now = StartWait(id, request);
  } else if (op == "barrier") {
    now = StartBarrier(id, request);
  } else if (op == "membership") {
    now = StartMembership(id, request);
  } else if (op == "checkpoints") {
    now = Checkpoints();
  } else if (op == "finish") {
    now = StartFinish(id);
  } else {
    now = Outcome{kInvalidArgument,
                  "unknown op " + (op_field.is_null() ? std::string("(none)") : op_field.dump()) +
                      ": want hello, declare, init, push, pull, push_pull, wait, barrier, "
                      "membership, checkpoints, finish or bye"};
  }
  if (now) send_(ToReply(id, NamingAnIncurableStop(std::move(*now))));
  return Next::kRead;
}

// Whichever call hears the scheduler's stop of the job for a reason no
// restart cures (JobStopReason), not init only: the agent ends with it, and
// the program's error names it, so that the job fails at once, whichever
// replica's end is heard first.
Session::Outcome Session::NamingAnIncurableStop(Outcome outcome) {
  if (outcome.ok() || outcome.fields.contains("reason")) return outcome;
  if (const char* stop = JobStopReason(outcome.stop_reason, nullptr)) {
    if (context_.on_job_failure) context_.on_job_failure(stop, outcome.error);
    outcome.fields["reason"] = stop;
  }
  return outcome;
}

Session::Outcome Session::Failed(const Status& status, const std::string& what) {
  Outcome failed{CodeOf(status), what + status.message()};
  failed.stop_reason = status.reason();
  return failed;
}

json Session::ToReply(const json& id, const Outcome& outcome) {
  json reply = {{"id", id}, {"ok", outcome.ok()}};
  if (!outcome.ok()) {
    reply["code"] = outcome.code;
    reply["error"] = outcome.error;
  }
  for (const auto& [name, value] : outcome.fields.items()) reply[name] = value;
  return reply;
}

json Session::ByeReply() const { return ToReply(bye_id_, {}); }

Session::Outcome Session::Hello(const json& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (said_hello_) {
    return {kFailedPrecondition, "hello: already said in this session (by pid " +
                                     std::to_string(hello_pid_.load()) + ")"};
  }
  Fields fields(request, "hello");
  uint64_t protocol = 0, pid = 0;
  std::string nonce;
  if (!fields.Unsigned("protocol", &protocol, true) || !fields.String("nonce", &nonce, true) ||
      !fields.Unsigned("pid", &pid, false)) {
    return {kInvalidArgument, fields.error};
  }
  if (protocol != kProtocolVersion) {
    return {kInvalidArgument, "hello: protocol " + std::to_string(protocol) +
                                  " is not spoken here: this agent speaks protocol " +
                                  std::to_string(kProtocolVersion)};
  }
  if (nonce != context_.nonce) {
    return {kInvalidArgument,
            "hello: the nonce " + Quote(nonce) + " is another agent's: this socket belongs to " +
                "the agent (pid " + std::to_string(::getpid()) + ") that wrote " +
                context_.socket_dir + "/agent.json; do both containers mount the same directory?"};
  }
  said_hello_ = true;
  hello_pid_ = pid;
  Outcome ok;
  ok.fields = {{"rank", context_.kv->rank()},
               {"size", context_.kv->size()},
               {"num_servers", context_.kv->num_servers()},
               {"mode", context_.sync ? "sync" : "async"},
               {"optimizer", context_.optimizer},
               {"non_finite", context_.non_finite},
               {"elastic", context_.elastic},
               {"batch_size", context_.batch_size},
               {"checkpoint_interval", context_.checkpoint_interval}};
  return ok;
}

Session::Outcome Session::Declare(const json& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!said_hello_) return {kFailedPrecondition, "declare before hello"};
  if (tensors_) {
    return {kFailedPrecondition, "declare: this session declared its " +
                                     std::to_string(names_.size()) + " tensors already (file " +
                                     tensors_->file_name() + ")"};
  }
  const json tensors = request.contains("tensors") ? request["tensors"] : json();
  if (!tensors.is_array()) {
    return {kInvalidArgument,
            "declare: \"tensors\" must be a list of {\"name\", \"shape\", \"dtype\"}, got " +
                tensors.dump()};
  }
  if (tensors.empty()) return {kInvalidArgument, "declare: the list of tensors is empty"};
  std::vector<std::string> names;
  std::vector<uint64_t> numels;
  std::map<std::string, size_t> keys_by_name;
  for (size_t key = 0; key < tensors.size(); ++key) {
    const json& t = tensors[key];
    const std::string where = "declare: tensor " + std::to_string(key);
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        t["name"].get<std::string>().empty()) {
      return {kInvalidArgument, where + " needs a \"name\" (a non-empty string), got " + t.dump()};
    }
    const std::string name = t["name"].get<std::string>();
    const std::string what =
        "declare: tensor " + Quote(name) + " (key " + std::to_string(key) + ")";
    if (auto [it, inserted] = keys_by_name.emplace(name, key); !inserted) {
      return {kInvalidArgument, "declare: tensors " + std::to_string(it->second) + " and " +
                                    std::to_string(key) + " are both named " + Quote(name)};
    }
    if (t.contains("dtype") && t["dtype"] != "float32") {
      return {kInvalidArgument,
              what + " has dtype " + t["dtype"].dump() + ": only \"float32\" is supported"};
    }
    if (!t.contains("shape") || !t["shape"].is_array()) {
      return {kInvalidArgument, what + " needs a \"shape\", a list of dimensions"};
    }
    uint64_t numel = 1;
    const json& shape = t["shape"];
    for (size_t d = 0; d < shape.size(); ++d) {
      const bool positive = shape[d].is_number_integer() && shape[d].get<int64_t>() >= 1;
      if (!positive) {
        return {kInvalidArgument, what + " has dimension " + std::to_string(d) + " = " +
                                      shape[d].dump() + ": every dimension must be at least 1"};
      }
      const uint64_t dim = shape[d].get<uint64_t>();
      if (dim > kMaxNumel || numel * dim > kMaxNumel) {
        return {kInvalidArgument, what + " has shape " + shape.dump() + ": over " +
                                      std::to_string(kMaxNumel) + " elements"};
      }
      numel *= dim;
    }
    names.push_back(name);
    numels.push_back(numel);
  }
  const std::vector<uint64_t>* known = context_.known_numels;
  if (known && !known->empty()) {
    const std::string why =
        " this worker's parameter servers hold the tensors an earlier training process of the "
        "pod declared, and a restarted process must declare the same";
    if (known->size() != numels.size()) {
      return {kFailedPrecondition, "declare: " + std::to_string(numels.size()) + " tensors, but " +
                                       std::to_string(known->size()) + " before:" + why};
    }
    for (size_t key = 0; key < numels.size(); ++key) {
      if ((*known)[key] != numels[key]) {
        return {kFailedPrecondition, "declare: tensor " + Quote(names[key]) + " (key " +
                                         std::to_string(key) + ") has " +
                                         std::to_string(numels[key]) + " elements, but " +
                                         std::to_string((*known)[key]) + " before:" + why};
      }
    }
  }
  std::unique_ptr<SharedTensors> shared;
  if (Status s = LinkKVSegment(numels, &shared); !s.ok()) {
    return {kInternal, "declare: " + s.message()};
  }
  if (!shared) {
    if (Status s = SharedTensors::Create(context_.socket_dir, numels, &shared); !s.ok()) {
      return {kInternal, "declare: " + s.message()};
    }
  }
  Outcome ok;
  ok.fields = {{"file", shared->file_name()}, {"bytes", shared->bytes()}};
  json layout = json::array();
  for (size_t key = 0; key < names.size(); ++key) {
    const TensorRegion& region = shared->regions()[key];
    layout.push_back({{"name", names[key]},
                      {"key", key},
                      {"numel", region.numel},
                      {"values", region.values_offset},
                      {"grads", region.grads_offset}});
  }
  ok.fields["tensors"] = std::move(layout);
  tensors_ = std::move(shared);
  names_ = std::move(names);
  return ok;
}

Status Session::LinkKVSegment(const std::vector<uint64_t>& numels,
                              std::unique_ptr<SharedTensors>* out) {
  if (!context_.kv_segment) return Status::Ok();
  const std::optional<SegmentFile> segment = context_.kv_segment(numels);
  if (!segment) return Status::Ok();
  std::vector<TensorRegion> regions(numels.size());
  for (size_t key = 0; key < numels.size(); ++key) {
    const float* values = context_.kv->SharedValues(static_cast<uint32_t>(key));
    const float* grads = context_.kv->SharedGrads(static_cast<uint32_t>(key));
    if (!values || !grads) return Status::Ok();  // encoded pushes: staging holds codes
    regions[key].numel = numels[key];
    regions[key].values_offset = reinterpret_cast<const char*>(values) - segment->base;
    regions[key].grads_offset = reinterpret_cast<const char*>(grads) - segment->base;
  }
  return SharedTensors::Link(context_.socket_dir, *segment, std::move(regions), out);
}

std::optional<Session::Outcome> Session::StartInit(const json& id, const json& request) {
  Fields fields(request, "init");
  bool restores_own_state = false;
  std::optional<std::vector<uint64_t>> held;
  if (fields.Has("own_state_steps")) held.emplace();
  if (!fields.Bool("restores_own_state", &restores_own_state, false) ||
      (held && !fields.UnsignedList("own_state_steps", &*held, true))) {
    return Outcome{kInvalidArgument, fields.error};
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tensors_) return Outcome{kFailedPrecondition, "init before declare"};
    if (init_ == InitState::kRunning) {
      return Outcome{kFailedPrecondition, "init: sent twice (the first is still running)"};
    }
    if (init_ == InitState::kDone) {
      return Outcome{kFailedPrecondition, "init: this session's tensors are initialized already"};
    }
    init_ = InitState::kRunning;
  }
  RunLater(id, [this, restores_own_state, held] { return Initialize(restores_own_state, held); });
  return std::nullopt;
}

Session::Outcome Session::Initialize(bool restores_own_state,
                                     const std::optional<std::vector<uint64_t>>& held) {
  const uint64_t recoveries = recoveries_;
  std::vector<const float*> initial;
  std::vector<uint64_t> sizes;
  for (size_t key = 0; key < tensors_->regions().size(); ++key) {
    initial.push_back(tensors_->values(key));
    sizes.push_back(tensors_->regions()[key].numel);
  }
  // Rank 0's values are stored (the first value wins, so a restarted
  // process does not overwrite training); then every worker takes what the
  // servers hold, at the step they are at.
  context_.kv->NameTensors(names_);
  Status s = context_.kv->InitTensors(initial, sizes);
  uint64_t step = 0;
  if (s.ok()) s = PullAll(0, &step);
  if (s.IsAborted()) s = Recover(recoveries, &step);
  // Async: the servers' versions count every worker's updates; this
  // worker's steps go on from the one its program (or its agent's
  // predecessor) pushed last, 0 for a new one.
  if (s.ok() && !context_.sync) s = context_.kv->Recover(&step);
  // In sync mode a start past step 0 is a resumed job or a restarted
  // process: no step completes before every worker's first push, which
  // comes after its init. (In async mode the others may be ahead already.)
  auto needs_own_state = [this](uint64_t at) {
    return context_.sync && at > 0 && context_.optimizer == "none";
  };
  auto not_held = [&held](uint64_t at) {
    return held && std::find(held->begin(), held->end(), at) == held->end();
  };
  // The program can start only at a step it saved: the job goes back to one
  // (unless another recovery comes first, to a step it may not hold either),
  // or the scheduler finds none and says so.
  bool own_state_missing = false;
  while (s.ok() && restores_own_state && needs_own_state(step) && not_held(step)) {
    const uint64_t recovered = recoveries_;
    s = context_.kv->RollBackToHeldState(step, *held, &step);
    own_state_missing = s.reason() == kReasonProgramStateMissing;
    if (s.ok()) s = PullAll(step, &step);
    if (s.IsAborted()) s = Recover(recovered, &step);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!s.ok()) {
    init_ = InitState::kNotYet;
    if (own_state_missing) return RefuseInit(kReasonProgramStateMissing, s.message());
    // Not this process's to retry: every rerun declares the same tensors.
    if (IsModelMismatchRefusal(s)) return RefuseInit(kReasonModelMismatch, s.message());
    if (const char* stop = JobStopReason(s.reason(), nullptr)) return RefuseInit(stop, s.message());
    return Failed(s, "init: ");
  }
  if (needs_own_state(step) && !restores_own_state) {
    init_ = InitState::kNotYet;
    const std::string why =
        "this process starts at step " + std::to_string(step) +
        ", but the servers' optimizer is none: they hold averaged gradients, not parameters, "
        "and the program did not say it puts its own state of that step back (register "
        "kubeps.torch.resume_with(load), which loads its parameters and optimizer state of "
        "that step from its own checkpoint; the C++ SDK's SidecarOptions::restores_own_state). "
        "Trained on from fresh values, the job would end with a model that never learned. "
        "The job resumed over the checkpoints of an earlier run in spec.checkpoint.path (give "
        "a new run a new path, or spec.checkpoint.resume: false), or this worker restarted "
        "mid-job";
    return RefuseInit(kReasonProgramStateMissing, why);
  }
  init_ = InitState::kDone;
  if (context_.on_job_failure_cured) context_.on_job_failure_cured(kReasonProgramStateMissing);
  if (context_.known_numels) {
    context_.known_numels->clear();
    for (const TensorRegion& region : tensors_->regions())
      context_.known_numels->push_back(region.numel);
  }
  Outcome ok;
  ok.fields = {{"step", step}};
  return ok;
}

Session::Outcome Session::RefuseInit(const char* reason, const std::string& why) {
  if (context_.on_job_failure) context_.on_job_failure(reason, why);
  Outcome refused{kFailedPrecondition, "init: " + why};
  refused.fields = {{"reason", reason}};
  return refused;
}

Status Session::PullAll(uint64_t min_version, uint64_t* version) {
  std::vector<float*> values;
  for (size_t key = 0; key < tensors_->regions().size(); ++key)
    values.push_back(tensors_->values(key));
  if (context_.sync) return context_.kv->PullAtOneStep(values, min_version, version);
  return context_.kv->WaitWithVersion(context_.kv->Pull(values, min_version), version);
}

std::string Session::NotReadyForData(const char* op) const {
  if (init_ == InitState::kNotYet) return std::string(op) + " before init";
  if (init_ == InitState::kRunning) return std::string(op) + " before init has completed";
  if (finished_) return std::string(op) + " after finish";
  return "";
}

Session::Outcome Session::StartTransfer(Kind kind, const char* op, const json& request) {
  const bool push = kind != Kind::kPull, pull = kind != Kind::kPush;
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::string why = NotReadyForData(op); !why.empty()) return {kFailedPrecondition, why};
  const size_t declared = names_.size();
  Fields fields(request, op);
  std::vector<uint64_t> keys, numels;
  uint64_t step = 0;
  if (!fields.UnsignedList("keys", &keys, push) || !fields.UnsignedList("numel", &numels, push) ||
      !fields.Unsigned(push ? "step" : "min_version", &step, push)) {
    return {kInvalidArgument, fields.error};
  }
  if (!fields.Has("keys")) {
    for (uint64_t key = 0; key < declared; ++key) keys.push_back(key);
  }
  if (keys.empty()) return {kInvalidArgument, std::string(op) + ": \"keys\" is empty"};
  if (push) {
    if (std::string why = NotAMemberOf(op, step); !why.empty()) return {kFailedPrecondition, why};
  }
  if (fields.Has("numel") && numels.size() != keys.size()) {
    return {kInvalidArgument, std::string(op) + ": " + std::to_string(keys.size()) + " keys but " +
                                  std::to_string(numels.size()) +
                                  " numel entries (want one per key)"};
  }
  std::set<uint64_t> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    if (key >= declared) {
      return {kNotFound, std::string(op) + ": key " + std::to_string(key) +
                             " was never declared (this session declared " +
                             std::to_string(declared) + " tensors, keys 0 to " +
                             std::to_string(declared - 1) + ")"};
    }
    if (!seen.insert(key).second) {
      return {kInvalidArgument, std::string(op) + ": key " + std::to_string(key) + " (" +
                                    Quote(names_[key]) + ") is listed twice"};
    }
    const uint64_t declared_numel = tensors_->regions()[key].numel;
    if (!numels.empty() && numels[i] != declared_numel) {
      return {kInvalidArgument, std::string(op) + ": tensor " + Quote(names_[key]) + " (key " +
                                    std::to_string(key) + ") was declared with " +
                                    std::to_string(declared_numel) + " elements, the request has " +
                                    std::to_string(numels[i])};
    }
  }
  std::vector<const float*> grads(push ? declared : 0, nullptr);
  std::vector<float*> values(pull ? declared : 0, nullptr);
  for (uint64_t key : keys) {
    if (push) grads[key] = tensors_->grads(key);
    if (pull) values[key] = tensors_->values(key);
  }
  if (push && context_.computed) context_.computed->store(true);
  KVWorker& kv = *context_.kv;
  Transfer transfer;
  transfer.kind = kind;
  transfer.step = step;
  transfer.recoveries = recoveries_;
  transfer.ticket = kind == Kind::kPush   ? kv.Push(grads, step)
                    : kind == Kind::kPull ? kv.Pull(values, step)
                                          : kv.PushPull(grads, values, step);
  const uint64_t handle = next_handle_++;
  transfers_[handle] = transfer;
  Outcome ok;
  ok.fields = {{"handle", handle}};
  return ok;
}

std::optional<Session::Outcome> Session::StartWait(const json& id, const json& request) {
  std::vector<Transfer> transfers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Fields fields(request, "wait");
    std::vector<uint64_t> handles;
    if (!fields.UnsignedList("handles", &handles, true))
      return Outcome{kInvalidArgument, fields.error};
    if (handles.empty()) return Outcome{kInvalidArgument, "wait: \"handles\" is empty"};
    std::set<uint64_t> seen;
    for (uint64_t handle : handles) {
      const std::string what = "wait: handle " + std::to_string(handle);
      if (!seen.insert(handle).second) return Outcome{kInvalidArgument, what + " is listed twice"};
      if (transfers_.count(handle)) continue;
      if (handle == 0 || handle >= next_handle_) {
        return Outcome{kNotFound, what + " was never issued in this session"};
      }
      return Outcome{kFailedPrecondition, what + " was waited for already"};
    }
    for (uint64_t handle : handles) {
      transfers.push_back(transfers_.at(handle));
      transfers_.erase(handle);
    }
  }
  RunLater(id, [this, transfers] { return WaitFor(transfers); });
  return std::nullopt;
}

Session::Outcome Session::WaitFor(const std::vector<Transfer>& transfers) {
  Status failure;
  const Transfer* aborted = nullptr;
  uint64_t pulled_version = UINT64_MAX;  // the smallest version the pulls received
  const auto start = std::chrono::steady_clock::now();
  for (const Transfer& transfer : transfers) {
    uint64_t version = 0;
    Status s = context_.kv->WaitWithVersion(transfer.ticket, &version);
    if (s.ok() && transfer.kind != Kind::kPush) pulled_version = std::min(pulled_version, version);
    if (s.IsAborted() && !aborted) {
      // A rollback wins over other failures: the client must resume.
      aborted = &transfer;
      failure = s;
    } else if (!s.ok() && failure.ok()) {
      failure = s;
    }
  }
  if (context_.metrics) {
    context_.metrics->Waited(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (failure.ok()) {
    CountSteps(transfers);
    Outcome ok;
    if (pulled_version != UINT64_MAX) ok.fields = {{"version", pulled_version}};
    return ok;
  }
  if (!aborted) {
    if (IsNonFiniteGradientRefusal(failure)) {
      if (context_.on_job_failure)
        context_.on_job_failure(kReasonNonFiniteGradient, failure.message());
      Outcome refused{kInvalidArgument, "wait: " + failure.message()};
      refused.fields = {{"reason", kReasonNonFiniteGradient}};
      return refused;
    }
    return Failed(failure, "wait: ");
  }
  uint64_t resume_step = 0;
  if (Status s = Recover(aborted->recoveries, &resume_step); !s.ok()) {
    return Failed(
        s, "wait: the job rolled back (" + failure.message() + ") and its recovery failed: ");
  }
  Outcome outcome{kAborted, "wait: " + failure.message() + "; the parameters of step " +
                                std::to_string(resume_step) + " are in the values regions"};
  outcome.fields = {{"resume_step", resume_step}};
  return outcome;
}

void Session::CountSteps(const std::vector<Transfer>& transfers) {
  if (!context_.metrics) return;
  for (const Transfer& transfer : transfers) {
    uint64_t completed = 0;  // the step whose parameters just arrived, if any
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (transfer.kind == Kind::kPush) {
        pushed_since_step_ = true;
        last_push_step_ = transfer.step;
        continue;
      }
      if (transfer.kind == Kind::kPull && !pushed_since_step_) continue;
      completed = (transfer.kind == Kind::kPushPull ? transfer.step : last_push_step_) + 1;
      pushed_since_step_ = false;
      if (completed == counted_step_) continue;  // another layer of a step already counted
      counted_step_ = completed;
    }
    context_.metrics->StepCompleted(completed);
  }
}

Status Session::Recover(uint64_t recoveries, uint64_t* resume_step) {
  std::lock_guard<std::mutex> lock(recovery_mutex_);
  if (recoveries_ > recoveries) {
    // This request belonged to a generation this session recovered from
    // already: the values regions hold the resume step's parameters.
    *resume_step = resume_step_;
    return Status::Ok();
  }
  for (;;) {
    if (Status s = context_.kv->Recover(resume_step); !s.ok()) return s;
    uint64_t version = 0;
    // Async: a worker's step is its own, no version of the servers.
    Status pulled = PullAll(context_.sync ? *resume_step : 0, &version);
    if (pulled.IsAborted()) continue;  // rolled back again meanwhile
    if (!pulled.ok()) return pulled;
    break;
  }
  resume_step_ = *resume_step;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counted_step_ = *resume_step;  // the steps redone after it are counted again
  }
  ++recoveries_;
  if (context_.metrics) context_.metrics->RolledBack(*resume_step);
  return Status::Ok();
}

std::optional<Session::Outcome> Session::StartBarrier(const json& id, const json& request) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!said_hello_) return Outcome{kFailedPrecondition, "barrier before hello"};
    Fields fields(request, "barrier");
    if (!fields.String("name", &name, true)) return Outcome{kInvalidArgument, fields.error};
    if (name.empty()) return Outcome{kInvalidArgument, "barrier: \"name\" is empty"};
  }
  RunLater(id, [this, name]() -> Outcome {
    // Apart from the agent's own barriers ("init").
    Status s = context_.kv->Barrier("sidecar/" + name);
    if (s.ok()) return {};
    return Failed(s, "barrier " + Quote(name) + ": ");
  });
  return std::nullopt;
}

std::optional<Session::Outcome> Session::StartFinish(const json& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (init_ != InitState::kDone) return Outcome{kFailedPrecondition, "finish before init"};
    finished_ = true;
  }
  RunLater(id, [this]() -> Outcome {
    // Scaled away: the scheduler reads this worker's finish as its leaving.
    std::optional<uint64_t> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      left = scaled_away_at_;
    }
    if (left && context_.on_scaled_away) context_.on_scaled_away(*left);
    // As the built-in trainer: when the last worker's answer is lost, the
    // scheduler may have ended the job and gone before our resend. The
    // training is over either way.
    if (Status s = context_.kv->Finish(); !s.ok()) {
      KLOG_INFO << "could not tell the scheduler this worker finished (the job may be over "
                   "already): "
                << s.message();
    }
    return {};
  });
  return std::nullopt;
}

void Session::RunLater(const json& id, std::function<Outcome()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_flight_;
  }
  context_.pool->Run([this, id, work = std::move(work)] {
    send_(ToReply(id, NamingAnIncurableStop(work())));
    std::lock_guard<std::mutex> lock(mutex_);
    if (--in_flight_ == 0) idle_.notify_all();
  });
}

void Session::Close() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return in_flight_ == 0; });
  std::map<uint64_t, Transfer> unwaited;
  unwaited.swap(transfers_);
  lock.unlock();
  // The KV client may still be reading or writing the regions of requests
  // the client never waited for.
  for (const auto& [handle, transfer] : unwaited) (void)context_.kv->Wait(transfer.ticket);
  lock.lock();
  tensors_.reset();
}

}  // namespace kubeps::sidecar
