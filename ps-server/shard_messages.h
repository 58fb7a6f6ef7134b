// The words a shard's errors use for a request's parts, shared by the files
// that implement Shard (ps-server/shard.h).
#ifndef KUBEPS_PS_SERVER_SHARD_MESSAGES_H_
#define KUBEPS_PS_SERVER_SHARD_MESSAGES_H_

#include <string>

#include <grpcpp/support/status.h>

#include "kubeps.pb.h"

namespace kubeps::shard_messages {

inline grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

inline std::string Describe(const v1::PartRef& ref) {
  return "part (key " + std::to_string(ref.key()) + ", offset " + std::to_string(ref.offset()) +
         ", length " + std::to_string(ref.length()) + ")";
}

}  // namespace kubeps::shard_messages

#endif  // KUBEPS_PS_SERVER_SHARD_MESSAGES_H_
