#include "common/resend.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <string_view>
#include <thread>

namespace kubeps {

bool IsRetryable(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::CANCELLED:
      return true;
    default:
      return false;
  }
}

ResendCaller::ResendCaller(ResendPolicy policy, std::shared_ptr<JobToken> token,
                           MetricsServer* metrics, StopToken* stop)
    : policy_(policy),
      token_(std::move(token)),
      metrics_(metrics ? metrics : &NullMetrics()),
      stop_(stop) {}

grpc::Status ResendCaller::Try(const std::string& peer, const char* rpc, const Attempt& attempt,
                               int long_poll_ms) const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(policy_.timeout_ms + long_poll_ms));
  // Wait for a channel that is still connecting (a peer not yet up, or back
  // from a restart) instead of failing at once; the deadline still bounds
  // the wait. A call that fails at once on a channel in transient failure
  // leaves no call polling its reconnection, which then moves only at
  // gRPC's backup poll, every 5 s: a heartbeat that did so heard from a
  // restarted scheduler 30 s late over TLS, whose handshake takes several
  // round trips.
  context.set_wait_for_ready(true);
  AddToken(token_.get(), context);
  grpc::Status status;
  {
    StopToken::CallGuard cancelled_by_a_stop(stop_, &context);
    status = attempt(context);
  }
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    metrics_
        ->Counter("kubeps_rpc_timeouts_total", "Attempts whose deadline passed",
                  {{"rpc", rpc}, {"peer", peer}})
        .Increment();
  }
  return status;
}

Status ResendCaller::CallOnce(const std::string& peer, const char* rpc,
                              const Attempt& attempt) const {
  const grpc::Status status = Try(peer, rpc, attempt, 0);
  if (status.ok()) return Status::Ok();
  return Status(CodeOf(status), std::string(rpc) + " to " + peer + ": " + status.error_message());
}

Status ResendCaller::Call(const std::string& peer, const char* rpc, const Attempt& attempt,
                          int long_poll_ms, const std::function<bool()>& abandon) const {
  thread_local std::mt19937 jitter(std::random_device{}());
  grpc::Status last;
  const int tries = policy_.max_resends + 1;
  int made = 0;
  const auto stopped = [&] {
    return Status::Aborted("rpc " + std::string(rpc) + " to " + peer + " given up after " +
                           std::to_string(made) + (made == 1 ? " try" : " tries") +
                           ": this process is stopping");
  };
  for (int i = 0; i < tries; ++i) {
    if (stop_ && stop_->stop_requested()) return stopped();
    ++made;
    if (i > 0) {
      if (abandon && abandon()) {
        return Status::Error("rpc " + std::string(rpc) + " to " + peer + " abandoned after " +
                             std::to_string(made - 1) + " tries: " + last.error_message());
      }
      metrics_
          ->Counter("kubeps_rpc_resends_total",
                    "Requests sent again after a timeout or a broken channel",
                    {{"rpc", rpc}, {"peer", peer}})
          .Increment();
      int cap = std::min(policy_.backoff_cap_ms, policy_.backoff_base_ms << std::min(i - 1, 16));
      std::uniform_int_distribution<int> wait(cap / 2, cap);
      const std::chrono::milliseconds backoff(wait(jitter));
      if (stop_ && !stop_->SleepFor(backoff)) return stopped();
      if (!stop_) std::this_thread::sleep_for(backoff);
    }
    last = Try(peer, rpc, attempt, long_poll_ms);
    if (stop_ && stop_->stop_requested() && !last.ok()) return stopped();
    if (last.ok()) return Status::Ok();
    if (!IsRetryable(last)) break;
  }
  if (last.error_code() == grpc::StatusCode::ABORTED) {
    return Status::Aborted("rpc " + std::string(rpc) + " to " + peer + ": " + last.error_message());
  }
  return Status(CodeOf(last), "rpc " + std::string(rpc) + " to " + peer + " failed after " +
                                  std::to_string(made) + (made == 1 ? " try" : " tries") +
                                  " (resend timeout " + std::to_string(policy_.timeout_ms) +
                                  " ms, max resends " + std::to_string(policy_.max_resends) +
                                  "): " + std::to_string(static_cast<int>(last.error_code())) +
                                  " " + last.error_message());
}

Status::Code CodeOf(const grpc::Status& status) {
  if (IsRetryable(status)) return Status::Code::kUnavailable;
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Code::kOk;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return Status::Code::kInvalidArgument;
    case grpc::StatusCode::NOT_FOUND:
      return Status::Code::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS:
      return Status::Code::kAlreadyExists;
    case grpc::StatusCode::ABORTED:
      return Status::Code::kAborted;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return Status::Code::kFailedPrecondition;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      return Status::Code::kPermissionDenied;
    default:
      return Status::Code::kUnknown;
  }
}

void AddToken(JobToken* token, grpc::ClientContext& context) {
  if (token == nullptr) return;
  for (const std::string& t : token->Presented()) context.AddMetadata(kTokenMetadataKey, t);
}

grpc::Status CheckToken(const grpc::ServerContextBase& context, JobToken* token) {
  if (token == nullptr || !token->enabled()) return grpc::Status::OK;
  std::vector<std::string_view> presented;
  auto range = context.client_metadata().equal_range(kTokenMetadataKey);
  for (auto it = range.first; it != range.second; ++it) {
    presented.emplace_back(it->second.data(), it->second.size());
  }
  if (!token->Accepts(presented)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong job token");
  }
  return grpc::Status::OK;
}

// Large enough for the biggest tensor part a request carries.
constexpr int kMaxMessageBytes = 256 << 20;

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
}

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& address,
                                           const TransportSecurity* security,
                                           Connection connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Fast reconnects: a restarted shard should be reachable again quickly.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (connection == Connection::kOwn) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (security == nullptr) security = TransportSecurity::Insecure().get();
  if (security->tls()) args.SetSslTargetNameOverride(TransportSecurity::kServerName);
  return grpc::CreateCustomChannel(address, security->ChannelCredentials(), args);
}

}  // namespace kubeps
