// Resend on timeout, the PS_RESEND idea made safe: every attempt has a
// deadline; when it passes or the channel breaks, the same request (same
// RequestId, so the receiver applies it once) is sent again after an
// exponential backoff with jitter, up to max_resends times. Then the call
// fails with a message naming the peer, the RPC and the number of tries. It
// never aborts and never waits forever, and with a StopToken it ends as soon
// as the token is stopped (kAborted): the attempt in flight is cancelled and
// no backoff is waited out.
//
// Thread-safe: Call() is const and keeps no state between calls, so many
// threads share one ResendCaller.
#ifndef KUBEPS_COMMON_RESEND_H_
#define KUBEPS_COMMON_RESEND_H_

#include <functional>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/job_token.h"
#include "common/metrics.h"
#include "common/resend_policy.h"
#include "common/status.h"
#include "common/stop_token.h"
#include "common/transport_security.h"

namespace kubeps {

inline constexpr const char* kTokenMetadataKey = "x-kubeps-token";

class ResendCaller {
 public:
  // `stop`, when given, outlives the caller. `token` may be null (no token).
  ResendCaller(ResendPolicy policy, std::shared_ptr<JobToken> token, MetricsServer* metrics,
               StopToken* stop = nullptr);

  // One attempt: fill the request (already built by the caller) and call the
  // stub with `context`. Called again, unchanged, for every resend.
  using Attempt = std::function<grpc::Status(grpc::ClientContext& context)>;

  // `long_poll_ms` extends each attempt's deadline for calls that wait on
  // the server side (pull, barrier, cluster view).
  // ABORTED (a shard whose job rolled back to a checkpoint) comes back at
  // once as an aborted Status. Other failures carry CodeOf() the last
  // attempt. `abandon`, when given, is asked before every resend: true gives
  // up at once (the caller knows the answer no longer matters).
  Status Call(const std::string& peer, const char* rpc, const Attempt& attempt,
              int long_poll_ms = 0, const std::function<bool()>& abandon = nullptr) const;

  // One attempt, prepared as each of Call's: for a call whose loss the next
  // one replaces (a heartbeat). Fails with CodeOf() its status.
  Status CallOnce(const std::string& peer, const char* rpc, const Attempt& attempt) const;

  const ResendPolicy& policy() const { return policy_; }

 private:
  // One attempt within the policy's timeout plus `long_poll_ms`: the token,
  // waiting for the channel, cancelled by a stop; counts a timeout.
  grpc::Status Try(const std::string& peer, const char* rpc, const Attempt& attempt,
                   int long_poll_ms) const;

  ResendPolicy policy_;
  std::shared_ptr<JobToken> token_;
  MetricsServer* metrics_;
  StopToken* stop_;
};

// True for the failures a resend can cure: a passed deadline, a broken or
// not yet open channel, an overloaded peer. Not ABORTED: a shard answers
// that when the job has rolled back, and resending cannot change it.
bool IsRetryable(const grpc::Status& status);

// The Status code for a failed call: kUnavailable for what a resend could
// have cured (it was tried), else the nearest canonical code.
Status::Code CodeOf(const grpc::Status& status);

// Client side: puts the tokens `token` presents (job_token.h) into the
// request's metadata. Nothing when `token` is null.
void AddToken(JobToken* token, grpc::ClientContext& context);

// Server side: UNAUTHENTICATED unless the request carries a token that
// `token` accepts. OK when `token` is null.
grpc::Status CheckToken(const grpc::ServerContextBase& context, JobToken* token);

// Whether a channel shares its TCP connection: gRPC gives a process's
// channels to one address with the same settings one connection (its global
// subchannel pool), so that two clients in one process (the KV clients of a
// benchmark's workers) would take turns on one socket, read by one thread of
// the server at a time, where two processes each have their own.
enum class Connection { kShared, kOwn };

// Opens a channel to `address` with message limits large enough for big
// tensor parts.
std::shared_ptr<grpc::Channel> OpenChannel(const std::string& address,
                                           const TransportSecurity* security = nullptr,
                                           Connection connection = Connection::kShared);

// The settings of every kubeps gRPC server (kubeps-server, and the
// benchmarks that stand in for it): the same message limits.
void ConfigureServer(grpc::ServerBuilder* builder);

}  // namespace kubeps

#endif  // KUBEPS_COMMON_RESEND_H_
