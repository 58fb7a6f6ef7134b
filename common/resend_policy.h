// How hard a client tries before it fails (common/resend.h does the trying).
// Apart from resend.h so that public headers can take a policy without
// including gRPC. A plain value.
#ifndef KUBEPS_COMMON_RESEND_POLICY_H_
#define KUBEPS_COMMON_RESEND_POLICY_H_

namespace kubeps {

struct ResendPolicy {
  int timeout_ms = 1000;  // per attempt, on top of any long-poll wait
  int max_resends = 10;   // 0 = a single attempt
  int backoff_base_ms = 10;
  int backoff_cap_ms = 1000;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_RESEND_POLICY_H_
