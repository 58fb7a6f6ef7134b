// A one-method gRPC service of raw bytes, served in-process on loopback, for
// the tests of common/ (whose library has gRPC but not the kubeps protocol):
// the test decides what each call does, and calls it with a plain string.
#ifndef KUBEPS_TESTS_UNIT_COMMON_ECHO_SERVICE_H_
#define KUBEPS_TESTS_UNIT_COMMON_ECHO_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>

namespace kubeps::testing_util {

inline constexpr char kEchoMethod[] = "/kubeps.test.Echo/Call";

inline grpc::ByteBuffer ToBuffer(const std::string& text) {
  grpc::Slice slice(text);
  return grpc::ByteBuffer(&slice, 1);
}

inline std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

class EchoService : public grpc::Service {
 public:
  // Handles one call: the request's bytes in, the answer's bytes out.
  using Handler = std::function<grpc::Status(grpc::ServerContext*, const std::string& request,
                                             std::string* response)>;

  explicit EchoService(Handler handler) : handler_(std::move(handler)) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        kEchoMethod, grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<EchoService, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](EchoService* service, grpc::ServerContext* context, const grpc::ByteBuffer* request,
               grpc::ByteBuffer* response) {
              std::string answer;
              grpc::Status status = service->handler_(context, ToString(*request), &answer);
              *response = ToBuffer(answer);
              return status;
            },
            this)));
  }

  // Serves on a free loopback port; null when the server did not start.
  std::unique_ptr<grpc::Server> Serve(int* port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
    builder.RegisterService(this);
    return builder.BuildAndStart();
  }

 private:
  Handler handler_;
};

// One call of the echo method on `channel` with `context`.
inline grpc::Status CallEcho(grpc::Channel* channel, grpc::ClientContext* context,
                             const std::string& request, std::string* response) {
  grpc::internal::RpcMethod method(kEchoMethod, grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer answer;
  grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, method, context, ToBuffer(request), &answer);
  if (status.ok() && response != nullptr) *response = ToString(answer);
  return status;
}

}  // namespace kubeps::testing_util

#endif  // KUBEPS_TESTS_UNIT_COMMON_ECHO_SERVICE_H_
