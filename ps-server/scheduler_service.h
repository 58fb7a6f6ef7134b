// The Scheduler gRPC service: checks the job token, injects the configured
// faults and hands each request to the scheduler's logic (scheduler.h).
// Thread-safe, as gRPC calls it from its threads.
#ifndef KUBEPS_PS_SERVER_SCHEDULER_SERVICE_H_
#define KUBEPS_PS_SERVER_SCHEDULER_SERVICE_H_

#include "common/fault_injector.h"
#include "common/resend.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/scheduler.h"

namespace kubeps {

class SchedulerService final : public v1::Scheduler::Service {
 public:
  SchedulerService(const SchedulerOptions& options, MetricsServer* metrics)
      : options_(options), scheduler_(options, metrics) {}

  Scheduler& scheduler() { return scheduler_; }

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override {
    return Serve(context, "Register", response,
                 [&](auto* r) { return scheduler_.Register(request, r); });
  }
  grpc::Status GetClusterView(grpc::ServerContext* context, const v1::ClusterViewRequest* request,
                              v1::ClusterView* response) override {
    return Serve(context, "GetClusterView", response, [&](auto* r) {
      return scheduler_.GetClusterView(request, r, Cancelled(context));
    });
  }
  grpc::Status Barrier(grpc::ServerContext* context, const v1::BarrierRequest* request,
                       v1::BarrierResponse* response) override {
    return Serve(context, "Barrier", response,
                 [&](auto* r) { return scheduler_.Barrier(request, r, Cancelled(context)); });
  }
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    return Serve(context, "Heartbeat", response,
                 [&](auto* r) { return scheduler_.Heartbeat(request, r); });
  }
  grpc::Status Finish(grpc::ServerContext* context, const v1::FinishRequest* request,
                      v1::FinishResponse* response) override {
    return Serve(context, "Finish", response,
                 [&](auto* r) { return scheduler_.Finish(request, r); });
  }

 private:
  static std::function<bool()> Cancelled(grpc::ServerContext* context) {
    return [context] { return context->IsCancelled(); };
  }

  template <typename Response, typename Handler>
  grpc::Status Serve(grpc::ServerContext* context, const char* rpc, Response* response,
                     Handler handler) {
    if (auto s = CheckToken(*context, options_.token.get()); !s.ok()) return s;
    return WithFaults(options_.faults, context, rpc, response, handler);
  }

  const SchedulerOptions options_;
  Scheduler scheduler_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_SCHEDULER_SERVICE_H_
