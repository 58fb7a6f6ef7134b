// What a server checks of a pull's landing regions before it writes into a
// worker's segment (wire::CheckLanding): every header and every part's
// values inside the segment and aligned, one of each per part. A worker
// names them; a wrong one must be refused, never written through.
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/shared_memory.h"
#include "ps-server/ps_service.h"

namespace kubeps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSegmentBytes = 4096;

class CheckLandingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SharedSegment::Create("check-landing-test", kSegmentBytes, &segment_).ok());
    request_.add_parts()->set_length(16);
    request_.add_parts()->set_length(16);
    v1::SharedMemoryRef* ref = request_.mutable_shared();
    ref->set_ticket(1);
    ref->add_offsets(SharedSegment::FirstRegion());
    ref->add_offsets(SharedSegment::FirstRegion() + sizeof(LandingHeader));
  }
  // Both parts' values back to back after the two headers.
  void ValuesBackToBack() {
    const uint64_t values = SharedSegment::FirstRegion() + 2 * sizeof(LandingHeader);
    request_.mutable_shared()->add_value_offsets(values);
    request_.mutable_shared()->add_value_offsets(values + 16 * sizeof(float));
  }

  std::unique_ptr<SharedSegment> segment_;
  v1::PullRequest request_;
};

TEST_F(CheckLandingTest, ValuesRightAfterEachHeaderOrApartFromItAreAccepted) {
  EXPECT_TRUE(wire::CheckLanding(request_, *segment_).ok());
  ValuesBackToBack();
  EXPECT_TRUE(wire::CheckLanding(request_, *segment_).ok());
}

TEST_F(CheckLandingTest, ValuesPastTheSegmentsEndAreRefused) {
  ValuesBackToBack();
  request_.mutable_shared()->set_value_offsets(1, segment_->size() - 8);
  grpc::Status s = wire::CheckLanding(request_, *segment_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("landing region 1"));
  EXPECT_THAT(s.error_message(), HasSubstr("values at " + std::to_string(segment_->size() - 8)));
}

TEST_F(CheckLandingTest, ValuesOffTheAlignmentOfAFloatAreRefused) {
  ValuesBackToBack();
  request_.mutable_shared()->set_value_offsets(0, request_.shared().value_offsets(0) + 2);
  EXPECT_EQ(wire::CheckLanding(request_, *segment_).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CheckLandingTest, ValueOffsetsForOnlySomePartsAreRefused) {
  request_.mutable_shared()->add_value_offsets(SharedSegment::FirstRegion() + 1024);
  grpc::Status s = wire::CheckLanding(request_, *segment_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1 value offsets and 0 mappable flags for 2 parts"));
}

TEST_F(CheckLandingTest, MappableFlagsForOnlySomePartsAreRefused) {
  request_.mutable_shared()->add_mappable(true);
  grpc::Status s = wire::CheckLanding(request_, *segment_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("0 value offsets and 1 mappable flags for 2 parts"));
}

TEST_F(CheckLandingTest, AHeaderInsideTheHeaderOfTheSegmentIsRefused) {
  request_.mutable_shared()->set_offsets(0, 0);
  EXPECT_EQ(wire::CheckLanding(request_, *segment_).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kubeps
