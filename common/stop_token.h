// A request to stop that ends every wait at once. A process that was asked
// to stop (SIGTERM, SIGINT) must not sit out a resend loop, a backoff or a
// call's deadline first: Kubernetes kills it after its grace period, and
// `kubeps run` after a fraction of a second, without the clean exit.
//
//   StopToken stop;
//   StopOnSignals(&stop);                    // SIGTERM/SIGINT call RequestStop
//   ResendCaller caller(policy, token, metrics, &stop);
//   while (stop.SleepFor(interval)) { ... }  // false as soon as it is stopped
//
// Calls made through a ResendCaller (or a SchedulerClient) given the token
// are cancelled when it stops and come back as kAborted.
//
// Thread-safe: any thread may stop it, sleep on it or register a call.
#ifndef KUBEPS_COMMON_STOP_TOKEN_H_
#define KUBEPS_COMMON_STOP_TOKEN_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

namespace grpc {
class ClientContext;
}

namespace kubeps {

class StopToken {
 public:
  StopToken() = default;
  StopToken(const StopToken&) = delete;
  StopToken& operator=(const StopToken&) = delete;

  // Wakes every SleepFor and cancels every registered call; idempotent.
  void RequestStop();
  bool stop_requested() const { return stopped_.load(); }

  // Sleeps for `duration` unless a stop comes first; true when it slept the
  // whole time, false when it is stopped.
  bool SleepFor(std::chrono::milliseconds duration);

  // Ties one call to the token for the guard's life: a stop cancels it (a
  // call not started yet is cancelled as it starts). A null token does
  // nothing.
  class CallGuard {
   public:
    CallGuard(StopToken* token, grpc::ClientContext* context);
    ~CallGuard();
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;

   private:
    StopToken* const token_;
    grpc::ClientContext* const context_;
  };

 private:
  std::atomic<bool> stopped_{false};
  std::mutex mutex_;
  std::condition_variable stopping_;
  std::set<grpc::ClientContext*> calls_;  // in flight, cancelled by a stop
};

// Makes SIGTERM and SIGINT stop `token`. A signal handler may take no lock,
// so the handler only writes to a pipe, and a thread of its own calls
// RequestStop. Call once per process, before the waits it must end.
void StopOnSignals(StopToken* token);

// The signal that stopped the process (SIGTERM or SIGINT), 0 if none did.
int StopSignal();

}  // namespace kubeps

#endif  // KUBEPS_COMMON_STOP_TOKEN_H_
