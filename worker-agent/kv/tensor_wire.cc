#include "worker-agent/kv/tensor_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <cstdlib>

#include "common/copy_bytes.h"
#include "kubeps.grpc.pb.h"

namespace kubeps {
namespace {

using google::protobuf::internal::WireFormatLite;

// Field numbers of kubeps.proto that this file writes or reads by hand.
constexpr int kPushRequestDataField = 5;
constexpr int kPullResponseReadyField = 1;
constexpr int kPullResponseVersionField = 2;
constexpr int kPullResponseDataField = 3;
constexpr int kPullResponseLandedField = 4;
constexpr int kPullResponseMappedField = 5;

// "/kubeps.v1.ParameterServer/Push": the path the generated stub calls.
std::string MethodPath(const char* rpc) {
  return std::string("/") + v1::ParameterServer::service_full_name() + "/" + rpc;
}

// A unary call whose request and answer are the serialized messages.
grpc::Status CallRaw(grpc::Channel* channel, const std::string& path, grpc::ClientContext* context,
                     const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
  const grpc::internal::RpcMethod method(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  return grpc::internal::BlockingUnaryCall(channel, method, context, request, response);
}

grpc::Status Malformed(const std::string& what) {
  return grpc::Status(grpc::StatusCode::INTERNAL, "malformed Pull answer: " + what);
}

// Protobuf reads fields in any order: the header's, then the data field's
// tag and length, then its bytes, which may span any number of slices.
std::string HeaderAndDataTag(const v1::PushRequest& header, uint64_t data_bytes) {
  std::string head = header.SerializeAsString();
  {
    google::protobuf::io::StringOutputStream sink(&head);  // appends
    google::protobuf::io::CodedOutputStream out(&sink);
    out.WriteTag(
        WireFormatLite::MakeTag(kPushRequestDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    out.WriteVarint64(data_bytes);
  }  // the stream's end puts its last bytes into head
  return head;
}

}  // namespace

grpc::ByteBuffer PushRequestOverTensors(const v1::PushRequest& header,
                                        const std::vector<const Part*>& batch,
                                        const std::vector<const float*>& tensors) {
  uint64_t bytes = 0;
  for (const Part* part : batch) bytes += part->length * sizeof(float);
  std::vector<grpc::Slice> slices;
  slices.reserve(batch.size() + 1);
  slices.emplace_back(HeaderAndDataTag(header, bytes));
  for (const Part* part : batch) {
    slices.emplace_back(tensors[part->key] + part->offset, part->length * sizeof(float),
                        grpc::Slice::STATIC_SLICE);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer PushRequestEncoded(const v1::PushRequest& header,
                                    const std::vector<const Part*>& batch,
                                    const std::vector<const float*>& tensors,
                                    GradientEncoding encoding,
                                    std::vector<std::vector<float>>* residuals) {
  uint64_t bytes = 0;
  for (const Part* part : batch) bytes += EncodedBytes(encoding, part->length);
  char* data = static_cast<char*>(std::malloc(std::max<uint64_t>(bytes, 1)));
  char* out = data;
  for (const Part* part : batch) {
    float* residual = encoding == GradientEncoding::kTwoBit
                          ? (*residuals)[part->key].data() + part->offset
                          : nullptr;
    EncodeGradient(encoding, tensors[part->key] + part->offset, part->length, header.threshold(),
                   residual, out);
    out += EncodedBytes(encoding, part->length);
  }
  grpc::Slice slices[2] = {grpc::Slice(HeaderAndDataTag(header, bytes)),
                           grpc::Slice(data, bytes, std::free)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer PushRequestWithBytes(const v1::PushRequest& header, std::string data) {
  if (data.empty()) {
    grpc::Slice serialized(header.SerializeAsString());
    return grpc::ByteBuffer(&serialized, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(HeaderAndDataTag(header, data.size())),
                           grpc::Slice(std::move(data))};
  return grpc::ByteBuffer(slices, 2);
}

grpc::Status CallPush(grpc::Channel* channel, grpc::ClientContext* context,
                      const grpc::ByteBuffer& request) {
  static const std::string path = MethodPath("Push");
  grpc::ByteBuffer response;  // PushResponse has no fields
  return CallRaw(channel, path, context, request, &response);
}

bool ReadBytes(google::protobuf::io::CodedInputStream& in, void* to, size_t bytes) {
  char* out = static_cast<char*>(to);
  while (bytes > 0) {
    const void* data = nullptr;
    int size = 0;
    if (!in.GetDirectBufferPointer(&data, &size)) return false;
    const int take = static_cast<int>(std::min<size_t>(bytes, static_cast<size_t>(size)));
    CopyBytes(out, data, take);
    in.Skip(take);
    out += take;
    bytes -= take;
  }
  return true;
}

namespace {

// A PullResponse in `response` for the parts of `batch`, its data written
// into `values`.
grpc::Status ReadPullAnswer(grpc::ByteBuffer& response, const v1::PullRequest& request,
                            const std::vector<const Part*>& batch,
                            const std::vector<float*>& values, PullAnswer* answer,
                            const std::function<void()>& before_writing) {
  uint64_t want = 0;
  for (const Part* part : batch) want += part->length * sizeof(float);
  const uint64_t total = response.Length();
  *answer = PullAnswer{};
  grpc::ProtoBufferReader reader(&response);
  google::protobuf::io::CodedInputStream in(&reader);
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto type = WireFormatLite::GetTagWireType(tag);
    uint64_t number = 0;
    if (field == kPullResponseReadyField && type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&number)) return Malformed("ready");
      answer->ready = number != 0;
    } else if (field == kPullResponseVersionField && type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&number)) return Malformed("version");
      answer->version = number;
    } else if (field == kPullResponseLandedField && type == WireFormatLite::WIRETYPE_VARINT) {
      if (!in.ReadVarint64(&number)) return Malformed("landed");
      answer->landed = number != 0;
    } else if (field == kPullResponseMappedField &&
               type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadMessage(&in, &answer->mapped.emplace_back())) {
        return Malformed("mapped");
      }
    } else if (field == kPullResponseDataField &&
               type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return Malformed("data's length");
      if (length != want) {
        return grpc::Status(grpc::StatusCode::INTERNAL, "Pull returned " + std::to_string(length) +
                                                            " bytes, want " + std::to_string(want));
      }
      if (length > total - static_cast<uint64_t>(in.CurrentPosition())) {
        return Malformed("data ends early");
      }
      if (before_writing) before_writing();
      for (const Part* part : batch) {
        if (!ReadBytes(in, values[part->key] + part->offset, part->length * sizeof(float))) {
          return Malformed("data");
        }
      }
      answer->bytes = length;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return Malformed("field " + std::to_string(field));
    }
  }
  if (!in.ConsumedEntireMessage()) return Malformed("a bad tag");
  if (answer->landed && (answer->bytes != 0 || !request.has_shared())) {
    return Malformed("landed, but with data or for a pull that named no landing regions");
  }
  if (!answer->mapped.empty() && !answer->landed) return Malformed("mapped, but not landed");
  if (answer->ready && !answer->landed && answer->bytes != want) {
    return grpc::Status(
        grpc::StatusCode::INTERNAL,
        "Pull returned " + std::to_string(answer->bytes) + " bytes, want " + std::to_string(want));
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status CallPull(grpc::Channel* channel, grpc::ClientContext* context,
                      const v1::PullRequest& request, const std::vector<const Part*>& batch,
                      const std::vector<float*>& values, PullAnswer* answer,
                      const std::function<void()>& before_writing) {
  static const std::string path = MethodPath("Pull");
  grpc::Slice serialized(request.SerializeAsString());
  grpc::ByteBuffer response;
  if (grpc::Status s = CallRaw(channel, path, context, grpc::ByteBuffer(&serialized, 1), &response);
      !s.ok()) {
    return s;
  }
  return ReadPullAnswer(response, request, batch, values, answer, before_writing);
}

grpc::Status CallPushPull(grpc::Channel* channel, grpc::ClientContext* context,
                          const grpc::ByteBuffer& request, const v1::PullRequest& pull,
                          const std::vector<const Part*>& batch, const std::vector<float*>& values,
                          PullAnswer* answer, const std::function<void()>& before_writing) {
  static const std::string path = MethodPath("PushPull");
  grpc::ByteBuffer response;
  if (grpc::Status s = CallRaw(channel, path, context, request, &response); !s.ok()) return s;
  return ReadPullAnswer(response, pull, batch, values, answer, before_writing);
}

}  // namespace kubeps
