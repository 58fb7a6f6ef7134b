#include "ps-server/ps_service.h"

#include <cmath>
#include <optional>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "common/resend.h"
#include "kubeps.grpc.pb.h"

namespace kubeps {
namespace {

using google::protobuf::MessageLite;
using google::protobuf::internal::WireFormatLite;

// Field numbers of kubeps.proto that this file reads or writes by hand.
constexpr int kPushRequestDataField = 5;
constexpr int kPullResponseReadyField = 1;
constexpr int kPullResponseVersionField = 2;
constexpr int kPullResponseDataField = 3;
constexpr int kPullResponseLandedField = 4;
constexpr int kPullResponseMappedField = 5;

// "/kubeps.v1.ParameterServer/Push": what the generated stub calls.
std::string MethodPath(const char* rpc) {
  return std::string("/") + v1::ParameterServer::service_full_name() + "/" + rpc;
}

template <typename Request, typename Response, typename BaseRequest, typename BaseResponse>
using Handler = grpc::internal::RpcMethodHandler<ParameterServerService, Request, Response,
                                                 BaseRequest, BaseResponse>;

// gRPC keeps `path`'s pointer: it must live as long as the service.
template <typename Request, typename Response, typename BaseRequest, typename BaseResponse>
grpc::internal::RpcServiceMethod* Method(const std::string& path, ParameterServerService* service,
                                         grpc::Status (*call)(ParameterServerService*,
                                                              grpc::ServerContext*, const Request*,
                                                              Response*)) {
  return new grpc::internal::RpcServiceMethod(
      path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC,
      new Handler<Request, Response, BaseRequest, BaseResponse>(call, service));
}

}  // namespace

ParameterServerService::ParameterServerService(Shard* shard, std::shared_ptr<JobToken> token,
                                               FaultInjector* faults)
    : shard_(shard), token_(std::move(token)), faults_(faults) {
  // Registered as the generated service registers them: same paths, same
  // order; only the message types of Push's request and Pull's answer are
  // raw bytes.
  static const std::string init = MethodPath("Init"), push = MethodPath("Push"),
                           pull = MethodPath("Pull"), push_pull = MethodPath("PushPull");
  AddMethod(Method<v1::InitRequest, v1::InitResponse, MessageLite, MessageLite>(
      init, this,
      [](ParameterServerService* s, grpc::ServerContext* c, const v1::InitRequest* q,
         v1::InitResponse* r) { return s->Init(c, q, r); }));
  AddMethod(Method<grpc::ByteBuffer, v1::PushResponse, grpc::ByteBuffer, MessageLite>(
      push, this,
      [](ParameterServerService* s, grpc::ServerContext* c, const grpc::ByteBuffer* q,
         v1::PushResponse* r) { return s->Push(c, q, r); }));
  AddMethod(Method<v1::PullRequest, grpc::ByteBuffer, MessageLite, grpc::ByteBuffer>(
      pull, this,
      [](ParameterServerService* s, grpc::ServerContext* c, const v1::PullRequest* q,
         grpc::ByteBuffer* r) { return s->Pull(c, q, r); }));
  AddMethod(Method<grpc::ByteBuffer, grpc::ByteBuffer, grpc::ByteBuffer, grpc::ByteBuffer>(
      push_pull, this,
      [](ParameterServerService* s, grpc::ServerContext* c, const grpc::ByteBuffer* q,
         grpc::ByteBuffer* r) { return s->PushPull(c, q, r); }));
}

grpc::Status ParameterServerService::Init(grpc::ServerContext* context,
                                          const v1::InitRequest* request,
                                          v1::InitResponse* response) {
  if (auto s = CheckToken(*context, token_.get()); !s.ok()) return s;
  return WithFaults(faults_, context, "Init", response,
                    [&](auto* r) { return shard_->Init(*request, r); });
}

grpc::Status ParameterServerService::DecodePushRequest(const grpc::ByteBuffer& request,
                                                       DecodedPush* push) {
  if (!wire::DecodePush(request, &push->header, &push->slices, &push->pieces)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "malformed PushRequest");
  }
  if (grpc::Status s = wire::CheckEncoding(push->header, &push->encoding); !s.ok()) return s;
  if (!push->header.has_shared()) return grpc::Status::OK;
  // FAILED_PRECONDITION with this prefix tells the worker to send the same
  // push again with its data in the request (kv_worker.cc).
  if (Status s = segments_.Get(push->header.shared(), &push->segment); !s.ok()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "shared memory: " + s.message());
  }
  return wire::SharedPieces(push->header, push->encoding, *push->segment, &push->pieces);
}

grpc::Status ParameterServerService::ApplyPush(const DecodedPush& push) {
  // Each handling (a duplicate too) reads the data anew.
  PushData data(push.pieces, push.encoding, push.header.threshold());
  return shard_->Push(push.header, data);
}

grpc::Status ParameterServerService::LandingSegment(const v1::PullRequest& request,
                                                    std::shared_ptr<const SharedSegment>* segment) {
  if (request.has_shared() && !segments_.Get(request.shared(), segment).ok()) segment->reset();
  return *segment ? wire::CheckLanding(request, **segment) : grpc::Status::OK;
}

grpc::Status ParameterServerService::AnswerPull(grpc::ServerContext* context,
                                                const v1::PullRequest& request,
                                                const SharedSegment* segment,
                                                grpc::ByteBuffer* response) {
  PullAnswer answer;
  std::optional<wire::SegmentLanding> landing;
  if (segment) landing.emplace(request, *segment);
  grpc::Status status = shard_->Pull(
      request, &answer, [context] { return context->IsCancelled(); },
      landing ? &*landing : nullptr);
  if (status.ok()) *response = wire::EncodePull(std::move(answer));
  return status;
}

grpc::Status ParameterServerService::Push(grpc::ServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          v1::PushResponse* response) {
  if (auto s = CheckToken(*context, token_.get()); !s.ok()) return s;
  DecodedPush push;
  if (grpc::Status s = DecodePushRequest(*request, &push); !s.ok()) return s;
  return WithFaults(faults_, context, "Push", response, [&](auto*) { return ApplyPush(push); });
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext* context,
                                          const v1::PullRequest* request,
                                          grpc::ByteBuffer* response) {
  if (auto s = CheckToken(*context, token_.get()); !s.ok()) return s;
  std::shared_ptr<const SharedSegment> segment;
  if (grpc::Status s = LandingSegment(*request, &segment); !s.ok()) return s;
  return WithFaults(faults_, context, "Pull", response, [&](grpc::ByteBuffer* r) {
    return AnswerPull(context, *request, segment.get(), r);
  });
}

grpc::Status ParameterServerService::PushPull(grpc::ServerContext* context,
                                              const grpc::ByteBuffer* request,
                                              grpc::ByteBuffer* response) {
  if (auto s = CheckToken(*context, token_.get()); !s.ok()) return s;
  DecodedPush push;
  if (grpc::Status s = DecodePushRequest(*request, &push); !s.ok()) return s;
  if (!push.header.has_then_pull()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a PushPull without then_pull");
  }
  std::shared_ptr<const SharedSegment> landing;
  if (grpc::Status s = LandingSegment(push.header.then_pull(), &landing); !s.ok()) return s;
  return WithFaults(faults_, context, "PushPull", response, [&](grpc::ByteBuffer* r) {
    if (grpc::Status s = ApplyPush(push); !s.ok()) return s;
    return AnswerPull(context, push.header.then_pull(), landing.get(), r);
  });
}

namespace wire {

grpc::Status CheckEncoding(const v1::PushRequest& header, GradientEncoding* encoding) {
  switch (header.encoding()) {
    case v1::FLOAT32:
      *encoding = GradientEncoding::kFloat32;
      return grpc::Status::OK;
    case v1::FLOAT16:
      *encoding = GradientEncoding::kFloat16;
      return grpc::Status::OK;
    case v1::BFLOAT16:
      *encoding = GradientEncoding::kBFloat16;
      return grpc::Status::OK;
    case v1::TWO_BIT:
      *encoding = GradientEncoding::kTwoBit;
      if (std::isfinite(header.threshold()) && header.threshold() > 0) return grpc::Status::OK;
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          "a TWO_BIT push needs a threshold above 0, got " + std::to_string(header.threshold()));
    default:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "push encoding " + std::to_string(header.encoding()) +
                              " is not one this server knows (FLOAT32, FLOAT16, BFLOAT16, "
                              "TWO_BIT)");
  }
}

bool DecodePush(const grpc::ByteBuffer& request, v1::PushRequest* header,
                std::vector<grpc::Slice>* slices, std::vector<std::string_view>* pieces) {
  if (!request.Dump(slices).ok()) return false;
  // Every field but data is copied, as it is, into `rest` (a few hundred
  // bytes) and parsed from there; data's place is only noted.
  std::string rest;
  uint64_t data_begin = 0, data_length = 0;
  {
    grpc::ByteBuffer reading(request);  // shares the slices
    grpc::ProtoBufferReader reader(&reading);
    google::protobuf::io::CodedInputStream in(&reader);
    google::protobuf::io::StringOutputStream sink(&rest);
    google::protobuf::io::CodedOutputStream out(&sink);
    while (const uint32_t tag = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(tag) == kPushRequestDataField &&
          WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        uint32_t length = 0;
        if (!in.ReadVarint32(&length)) return false;
        data_begin = static_cast<uint64_t>(in.CurrentPosition());
        data_length = length;  // a later data field wins, as in protobuf
        if (!in.Skip(static_cast<int>(length))) return false;
      } else if (!WireFormatLite::SkipField(&in, tag, &out)) {
        return false;
      }
    }
    if (!in.ConsumedEntireMessage()) return false;
  }
  if (!header->ParseFromString(rest)) return false;
  pieces->clear();
  uint64_t position = 0;  // of the slice's first byte in the message
  for (const grpc::Slice& slice : *slices) {
    const uint64_t begin = std::max(position, data_begin);
    const uint64_t end = std::min(position + slice.size(), data_begin + data_length);
    if (begin < end) {
      pieces->emplace_back(reinterpret_cast<const char*>(slice.begin()) + (begin - position),
                           end - begin);
    }
    position += slice.size();
  }
  return true;
}

grpc::Status SharedPieces(const v1::PushRequest& header, GradientEncoding encoding,
                          const SharedSegment& segment, std::vector<std::string_view>* pieces) {
  if (!pieces->empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a push names shared memory and carries data too");
  }
  if (header.shared().offsets_size() != header.parts_size()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a push names " + std::to_string(header.shared().offsets_size()) +
                            " shared memory offsets for " + std::to_string(header.parts_size()) +
                            " parts");
  }
  for (int i = 0; i < header.parts_size(); ++i) {
    const uint64_t offset = header.shared().offsets(i);
    const uint64_t length = header.parts(i).length();
    // Bounded first: EncodedBytes must not overflow.
    const uint64_t bytes = length > kMaxRequestBytes ? UINT64_MAX : EncodedBytes(encoding, length);
    if (!segment.Holds(offset, bytes)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "part " + std::to_string(i) + " of a push lies outside " +
                              segment.name() + " (offset " + std::to_string(offset) + ", " +
                              std::to_string(length) + " values)");
    }
    pieces->emplace_back(segment.base() + offset, bytes);
  }
  return grpc::Status::OK;
}

grpc::Status CheckLanding(const v1::PullRequest& request, const SharedSegment& segment) {
  const v1::SharedMemoryRef& ref = request.shared();
  const bool apart = ref.value_offsets_size() != 0;
  if (ref.offsets_size() != request.parts_size() || ref.ticket() == 0 ||
      (apart && ref.value_offsets_size() != request.parts_size()) ||
      (ref.mappable_size() != 0 && ref.mappable_size() != request.parts_size())) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a pull names " + std::to_string(ref.offsets_size()) +
                            " landing regions, " + std::to_string(ref.value_offsets_size()) +
                            " value offsets and " + std::to_string(ref.mappable_size()) +
                            " mappable flags for " + std::to_string(request.parts_size()) +
                            " parts, ticket " + std::to_string(ref.ticket()));
  }
  for (int i = 0; i < request.parts_size(); ++i) {
    const uint64_t offset = ref.offsets(i);
    const uint64_t values = apart ? ref.value_offsets(i) : offset + sizeof(LandingHeader);
    const uint64_t length = std::min(request.parts(i).length(), kMaxRequestBytes);
    if (offset % kSharedAlignment != 0 || values % sizeof(float) != 0 ||
        !segment.Holds(offset, sizeof(LandingHeader)) ||
        !segment.Holds(values, length * sizeof(float))) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "landing region " + std::to_string(i) + " of a pull lies outside " +
                              segment.name() + " or off its alignment (header at " +
                              std::to_string(offset) + ", values at " + std::to_string(values) +
                              ")");
    }
  }
  return grpc::Status::OK;
}

LandingHeader* SegmentLanding::Header(int index) const {
  return reinterpret_cast<LandingHeader*>(segment_.base() + ref_.offsets(index));
}

float* SegmentLanding::Values(int index) const {
  if (ref_.value_offsets_size() == 0) return reinterpret_cast<float*>(Header(index) + 1);
  return reinterpret_cast<float*>(segment_.base() + ref_.value_offsets(index));
}

grpc::Status SegmentLanding::Begin(int index, float** region) {
  *region = nullptr;
  switch (landing::Begin(Header(index), ref_.ticket())) {
    case landing::Claim::kWrite:
      *region = Values(index);
      return grpc::Status::OK;
    case landing::Claim::kWrittenToo:
      return grpc::Status::OK;
    case landing::Claim::kSuperseded:
      break;
  }
  return grpc::Status(grpc::StatusCode::ABORTED,
                      "the worker has moved on from pull " + std::to_string(ref_.ticket()));
}

void SegmentLanding::Done(int index, uint64_t version) { landing::Done(Header(index), version); }

grpc::ByteBuffer EncodePull(PullAnswer answer) {
  size_t bytes = 0;
  for (const PartValues& values : answer.values) bytes += values->size() * sizeof(float);
  std::string head;
  {
    google::protobuf::io::StringOutputStream sink(&head);
    google::protobuf::io::CodedOutputStream out(&sink);
    // proto3 leaves out fields at their defaults; so does this.
    if (answer.ready) {
      out.WriteTag(
          WireFormatLite::MakeTag(kPullResponseReadyField, WireFormatLite::WIRETYPE_VARINT));
      out.WriteVarint32(1);
    }
    if (answer.version != 0) {
      out.WriteTag(
          WireFormatLite::MakeTag(kPullResponseVersionField, WireFormatLite::WIRETYPE_VARINT));
      out.WriteVarint64(answer.version);
    }
    if (answer.landed) {
      out.WriteTag(
          WireFormatLite::MakeTag(kPullResponseLandedField, WireFormatLite::WIRETYPE_VARINT));
      out.WriteVarint32(1);
    }
    for (const v1::MappedValues& mapped : answer.mapped) {
      out.WriteTag(WireFormatLite::MakeTag(kPullResponseMappedField,
                                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      out.WriteVarint64(mapped.ByteSizeLong());
      mapped.SerializeWithCachedSizes(&out);
    }
    // Last: the data's bytes follow the head, in slices of their own.
    if (bytes > 0) {
      out.WriteTag(WireFormatLite::MakeTag(kPullResponseDataField,
                                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
      out.WriteVarint64(bytes);
    }
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + answer.values.size());
  slices.emplace_back(head);
  for (PartValues& values : answer.values) {
    if (values->empty()) continue;
    // The slice reads the values where they lie and holds a reference to
    // them until gRPC has sent them.
    float* data = const_cast<float*>(values->data());  // gRPC's type; never written through
    const size_t length = values->size() * sizeof(float);
    slices.emplace_back(
        data, length, [](void* held) { delete static_cast<PartValues*>(held); },
        new PartValues(std::move(values)));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace wire
}  // namespace kubeps
