// The tensor-carrying calls of the KV client, Push and Pull, without the
// copies protobuf's generated stubs make. A stub's Push copies the gradients
// into the request's bytes field and serializes it into gRPC's buffers (two
// copies of every byte before the kernel's); its Pull parses the answer's
// bytes field into a string that the caller copies into its tensors again.
// Here the request is the same protobuf message on the wire, but its data
// field is a list of gRPC slices over the tensors' own memory, and the
// answer's data field is read from gRPC's buffers straight into the
// tensors: the kernel's copy and one more on the way in, none on the way out.
// The servers see the same bytes and parse them as before.
//
// Internal to the KV client (kv_worker.cc). Thread-safe: plain functions.
#ifndef KUBEPS_WORKER_AGENT_KV_TENSOR_WIRE_H_
#define KUBEPS_WORKER_AGENT_KV_TENSOR_WIRE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/grpcpp.h>

#include "common/gradient_codec.h"
#include "kubeps.pb.h"
#include "worker-agent/kv/placement.h"

namespace kubeps {

// A PushRequest: `header` (every field but data) followed by the data
// field, whose bytes are the parts' values read in place from `tensors`.
// REQUIRES: the tensors' memory outlives every call made with the buffer.
grpc::ByteBuffer PushRequestOverTensors(const v1::PushRequest& header,
                                        const std::vector<const Part*>& batch,
                                        const std::vector<const float*>& tensors);

// The same with the parts' values encoded as header.encoding() says
// (spec.compression), into a buffer of the request's own. Two-bit reads and
// updates each part's residual, residuals[key] + offset.
grpc::ByteBuffer PushRequestEncoded(const v1::PushRequest& header,
                                    const std::vector<const Part*>& batch,
                                    const std::vector<const float*>& tensors,
                                    GradientEncoding encoding,
                                    std::vector<std::vector<float>>* residuals);

// The same with `data` as the data field (empty: none, for a push whose
// bytes lie in shared memory).
grpc::ByteBuffer PushRequestWithBytes(const v1::PushRequest& header, std::string data);

// ParameterServer.Push with a request made by any of them.
grpc::Status CallPush(grpc::Channel* channel, grpc::ClientContext* context,
                      const grpc::ByteBuffer& request);

// What a Pull answered. When `ready`, the values are in the tensors, or,
// when `landed`, in the landing regions the request named (shared memory).
struct PullAnswer {
  bool ready = false;
  bool landed = false;
  uint64_t version = 0;
  uint64_t bytes = 0;                    // of data received
  std::vector<v1::MappedValues> mapped;  // landed: the parts to map instead
};

// ParameterServer.Pull of `request`'s parts; a ready answer's data are
// written into `values` (the parts' places in each key's tensor), after
// `before_writing` is called. A data field of another length than the
// parts' is an INTERNAL error naming both, and a malformed answer one that
// says so; neither writes any value.
grpc::Status CallPull(grpc::Channel* channel, grpc::ClientContext* context,
                      const v1::PullRequest& request, const std::vector<const Part*>& batch,
                      const std::vector<float*>& values, PullAnswer* answer,
                      const std::function<void()>& before_writing = {});

// `bytes` from `in` into `to`, as ReadRaw reads them, but copied by
// CopyBytes straight from the stream's buffers (an answer's gRPC slices):
// every pulled byte over TCP passes here, and glibc's memcpy is the slower
// copy where this was measured (bench/pull_answer_bench.cc). False where
// the stream ends first.
bool ReadBytes(google::protobuf::io::CodedInputStream& in, void* to, size_t bytes);

// ParameterServer.PushPull: `request` is a push made by one of the above
// whose header carries then_pull (`pull`, of the parts of `batch`); its
// answer is read as CallPull's.
grpc::Status CallPushPull(grpc::Channel* channel, grpc::ClientContext* context,
                          const grpc::ByteBuffer& request, const v1::PullRequest& pull,
                          const std::vector<const Part*>& batch, const std::vector<float*>& values,
                          PullAnswer* answer, const std::function<void()>& before_writing = {});

}  // namespace kubeps

#endif  // KUBEPS_WORKER_AGENT_KV_TENSOR_WIRE_H_
