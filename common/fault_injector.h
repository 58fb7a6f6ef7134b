// Seeded fault injection on the receiving side of every RPC, for tests and
// for users who want to see a job survive a bad network. Configured by
// KUBEPS_FAULTS (off when unset: the services then hold a null injector and
// pay one pointer test per request):
//
//   KUBEPS_FAULTS="drop_request=0.2,drop_response=0.2,duplicate=0.05,delay=0.1,delay_max_ms=2000,seed=7"
//
//   drop_request   share of requests dropped before any work (the sender times out)
//   drop_response  share of answers dropped after the work is done (the lost ACK)
//   duplicate      share of requests handled twice, as if they arrived twice
//   delay          share of requests held for a random time up to delay_max_ms
//                  before they are handled (they may overtake each other)
//   seed           the random sequence, so a failing run can be replayed
//
// A dropped message is simulated the way the sender sees it: the handler
// holds the call until the sender's deadline has passed.
//
// Thread-safe: the services of one process share one injector; its random
// stream is drawn under a lock.
#ifndef KUBEPS_COMMON_FAULT_INJECTOR_H_
#define KUBEPS_COMMON_FAULT_INJECTOR_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/metrics.h"
#include "common/status.h"

namespace kubeps {

struct FaultConfig {
  double drop_request = 0;
  double drop_response = 0;
  double duplicate = 0;
  double delay = 0;
  int delay_max_ms = 0;
  uint64_t seed = 1;
};

// Parses the KUBEPS_FAULTS syntax; errors name the bad entry.
Status ParseFaultConfig(const std::string& text, FaultConfig* config);

class FaultInjector {
 public:
  FaultInjector(const FaultConfig& config, MetricsServer* metrics);

  // Reads KUBEPS_FAULTS; null (no faults) when unset or empty.
  static Status FromEnvironment(MetricsServer* metrics, std::unique_ptr<FaultInjector>* out);

  // Runs `handle(response)` as the faults dictate and returns what the
  // sender sees. A duplicate is handled like a second arrival of the same
  // request: into its own response, which nobody reads.
  template <typename Response, typename Handler>
  grpc::Status Handle(grpc::ServerContext* context, const char* rpc, Response* response,
                      Handler handle) {
    if (Roll(config_.delay)) SleepRandom(rpc);
    if (Roll(config_.drop_request)) return Drop(context, rpc, "request");
    grpc::Status status = handle(response);
    if (Roll(config_.duplicate)) {
      Count("duplicate", rpc);
      Response second;
      handle(&second);  // must change nothing
    }
    if (Roll(config_.drop_response)) return Drop(context, rpc, "response");
    return status;
  }

 private:
  bool Roll(double probability);
  void SleepRandom(const char* rpc);
  grpc::Status Drop(grpc::ServerContext* context, const char* rpc, const char* what);
  void Count(const char* fault, const char* rpc);

  const FaultConfig config_;
  MetricsServer* metrics_;
  std::mutex mutex_;
  std::mt19937_64 random_;
};

// Handles a request through `faults` when there is one, directly otherwise.
template <typename Response, typename Handler>
grpc::Status WithFaults(FaultInjector* faults, grpc::ServerContext* context, const char* rpc,
                        Response* response, Handler handle) {
  return faults ? faults->Handle(context, rpc, response, handle) : handle(response);
}

}  // namespace kubeps

#endif  // KUBEPS_COMMON_FAULT_INJECTOR_H_
