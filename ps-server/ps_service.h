// The ParameterServer gRPC service: checks the job token and hands each
// request to the shard.
//
// Thread-safe: gRPC calls it from many threads; the shard does the locking.
#ifndef KUBEPS_PS_SERVER_PS_SERVICE_H_
#define KUBEPS_PS_SERVER_PS_SERVICE_H_

#include <string>

#include "common/fault_injector.h"
#include "common/resend.h"
#include "kubeps.grpc.pb.h"
#include "ps-server/shard.h"

namespace kubeps {

class ParameterServerService final : public v1::ParameterServer::Service {
 public:
  // `faults` may be null (no fault injection).
  ParameterServerService(Shard* shard, std::string token, FaultInjector* faults)
      : shard_(shard), token_(std::move(token)), faults_(faults) {}

  grpc::Status Init(grpc::ServerContext* context, const v1::InitRequest* request,
                    v1::InitResponse* response) override {
    if (auto s = CheckToken(*context, token_); !s.ok()) return s;
    return WithFaults(faults_, context, "Init", response,
                      [&](auto* r) { return shard_->Init(*request, r); });
  }
  grpc::Status Push(grpc::ServerContext* context, const v1::PushRequest* request,
                    v1::PushResponse* response) override {
    if (auto s = CheckToken(*context, token_); !s.ok()) return s;
    return WithFaults(faults_, context, "Push", response,
                      [&](auto* r) { return shard_->Push(*request, r); });
  }
  grpc::Status Pull(grpc::ServerContext* context, const v1::PullRequest* request,
                    v1::PullResponse* response) override {
    if (auto s = CheckToken(*context, token_); !s.ok()) return s;
    return WithFaults(faults_, context, "Pull", response,
                      [&](auto* r) { return shard_->Pull(*request, r); });
  }

 private:
  Shard* shard_;
  std::string token_;
  FaultInjector* faults_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_PS_SERVICE_H_
