// What the RPC handlers' fuzz targets share: a gRPC service served in this
// process (no port; an in-process channel), and a call that sends any bytes
// as the request of any method, as a client that does not use the generated
// stubs could. Every request thus goes through gRPC's own parsing and the
// handler, the token check included, as it would on the network.
#ifndef KUBEPS_TESTS_FUZZ_RPC_FUZZING_H_
#define KUBEPS_TESTS_FUZZ_RPC_FUZZING_H_

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "common/job_token.h"
#include "common/resend.h"

namespace kubeps::fuzz {

inline constexpr const char* kToken = "fuzz-token";

class InProcessServer {
 public:
  explicit InProcessServer(grpc::Service* service) {
    grpc::ServerBuilder builder;
    builder.SetMaxReceiveMessageSize(256 << 20);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }
  ~InProcessServer() { server_->Shutdown(std::chrono::system_clock::now()); }

  // Sends `body` as the request of `method` ("/kubeps.v1.Scheduler/Register")
  // with the job's token, and waits for the answer (at most `deadline_ms`).
  grpc::Status Call(const std::string& method, const std::string& body, int deadline_ms) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    context.AddMetadata(kTokenMetadataKey, kToken);
    grpc::Slice slice(body);
    grpc::ByteBuffer request(&slice, 1), response;
    std::promise<grpc::Status> done;
    stub_->UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                     [&done](grpc::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

// The service under test, kept across inputs as a live one keeps its state,
// and made afresh every `every` inputs, so that its state (bounded per
// request) cannot add up over a long run.
template <typename Target, int every = 500>
Target& FreshEvery() {
  static std::unique_ptr<Target> target;
  static int inputs = 0;
  if (!target || ++inputs % every == 0) {
    target.reset();  // the old one's server stops before the new one starts
    target = std::make_unique<Target>();
  }
  return *target;
}

// The method an input addresses (its first byte), and the request body (the rest).
struct RpcInput {
  int method = 0;
  std::string body;
};

inline RpcInput SplitInput(const uint8_t* data, size_t size, int methods) {
  RpcInput in;
  if (size == 0) return in;
  in.method = data[0] % methods;
  in.body.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  return in;
}

// A long-polling request's wait, cut to a few milliseconds so that a run
// spends its time on inputs, not on waits (the handlers bound and cancel
// waits; common/long_poll.h). Leaves a body that does not parse as it is.
template <typename Request>
std::string WithShortWait(const std::string& body) {
  Request request;
  if (!request.ParseFromString(body)) return body;
  if (request.wait_ms() > 5) request.set_wait_ms(5);
  return request.SerializeAsString();
}

}  // namespace kubeps::fuzz

#endif  // KUBEPS_TESTS_FUZZ_RPC_FUZZING_H_
