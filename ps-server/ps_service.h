// The ParameterServer gRPC service: checks the job token and hands each
// request to the shard.
//
// It serves kubeps.proto's ParameterServer (the same method paths and
// messages the generated stub sends), but Push and Pull carry their tensors
// without protobuf's copies: a Push's data field is read from gRPC's
// buffers straight into the shard's (PushData), and a Pull's answer is
// written around the shard's own buffer of values, which gRPC sends from
// where it lies. PushPull is a Push and then a Pull in one call, with
// Push's request and Pull's answer. Init, rare and small, is an ordinary
// protobuf method.
// A worker on this host may hand its tensors through shared memory instead
// (common/shared_memory.h): a push's bytes are read from its segment, and a
// pull is answered into it.
//
// Thread-safe: gRPC calls it from many threads; the shard does the locking.
#ifndef KUBEPS_PS_SERVER_PS_SERVICE_H_
#define KUBEPS_PS_SERVER_PS_SERVICE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>

#include "common/fault_injector.h"
#include "common/gradient_codec.h"
#include "common/job_token.h"
#include "kubeps.pb.h"
#include "ps-server/attached_segments.h"
#include "ps-server/shard.h"

namespace kubeps {

class ParameterServerService final : public grpc::Service {
 public:
  // `faults` may be null (no fault injection).
  // `token` may be null (no token).
  ParameterServerService(Shard* shard, std::shared_ptr<JobToken> token, FaultInjector* faults);

 private:
  grpc::Status Init(grpc::ServerContext* context, const v1::InitRequest* request,
                    v1::InitResponse* response);
  grpc::Status Push(grpc::ServerContext* context, const grpc::ByteBuffer* request,
                    v1::PushResponse* response);
  grpc::Status Pull(grpc::ServerContext* context, const v1::PullRequest* request,
                    grpc::ByteBuffer* response);
  grpc::Status PushPull(grpc::ServerContext* context, const grpc::ByteBuffer* request,
                        grpc::ByteBuffer* response);

  // A push's header and where its data lie: in the request's slices, or in
  // the worker's segment, held mapped.
  struct DecodedPush {
    v1::PushRequest header;
    std::vector<grpc::Slice> slices;
    std::vector<std::string_view> pieces;
    GradientEncoding encoding = GradientEncoding::kFloat32;
    std::shared_ptr<const SharedSegment> segment;
  };
  grpc::Status DecodePushRequest(const grpc::ByteBuffer& request, DecodedPush* push);
  grpc::Status ApplyPush(const DecodedPush& push);
  // The worker's segment a pull may be answered into, or null: none named,
  // or one this server cannot map (another host, another uid), which is no
  // error: the answer goes in the response, which tells the worker so.
  grpc::Status LandingSegment(const v1::PullRequest& request,
                              std::shared_ptr<const SharedSegment>* segment);
  grpc::Status AnswerPull(grpc::ServerContext* context, const v1::PullRequest& request,
                          const SharedSegment* segment, grpc::ByteBuffer* response);

  Shard* shard_;
  std::shared_ptr<JobToken> token_;
  FaultInjector* faults_;
  AttachedSegments segments_;
};

// The wire format of the two tensor methods, apart for its tests.
namespace wire {

// Splits a serialized PushRequest into every field but data (parsed into
// *header) and the data field's bytes, left where they lie in `request`'s
// slices (*pieces, valid while *slices lives). False for a malformed one.
bool DecodePush(const grpc::ByteBuffer& request, v1::PushRequest* header,
                std::vector<grpc::Slice>* slices, std::vector<std::string_view>* pieces);

// A push whose data lie in shared memory: each part's encoded bytes at its
// offset in `segment` (*pieces), or INVALID_ARGUMENT naming what is out of
// bounds or missing.
grpc::Status SharedPieces(const v1::PushRequest& header, GradientEncoding encoding,
                          const SharedSegment& segment, std::vector<std::string_view>* pieces);

// INVALID_ARGUMENT naming the first landing region of `request` that lies
// outside `segment` or off its alignment; OK otherwise.
grpc::Status CheckLanding(const v1::PullRequest& request, const SharedSegment& segment);

// A pull's landing regions in a worker's segment, for Shard::Pull: a part is
// written only while its region holds the pull's ticket (common/shared_memory.h).
// REQUIRES: CheckLanding passed.
class SegmentLanding final : public PullLanding {
 public:
  SegmentLanding(const v1::PullRequest& request, const SharedSegment& segment)
      : ref_(request.shared()), segment_(segment) {}
  grpc::Status Begin(int index, float** region) override;
  void Done(int index, uint64_t version) override;
  bool MayMap(int index) const override {
    return index < ref_.mappable_size() && ref_.mappable(index);
  }

 private:
  LandingHeader* Header(int index) const;
  float* Values(int index) const;  // at value_offsets, or right after the header
  const v1::SharedMemoryRef& ref_;
  const SharedSegment& segment_;
};

// The encoding of a push's data (spec.compression), or INVALID_ARGUMENT for
// one this server does not know or a TWO_BIT push without a threshold.
grpc::Status CheckEncoding(const v1::PushRequest& header, GradientEncoding* encoding);

// A serialized PullResponse of `answer`; its data field is answer.values,
// read in place (not copied) and held until gRPC is done with them, unless
// the answer landed in shared memory.
grpc::ByteBuffer EncodePull(PullAnswer answer);

}  // namespace wire
}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_PS_SERVICE_H_
