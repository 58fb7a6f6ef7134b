// How the agent reads a sidecar request's fields and names its errors
// (docs/sidecar-protocol.md, "Framing"): the protocol's error codes, and a
// reader whose first problem becomes the reply's message, naming the op and
// the field. Shared by the session's requests (session.cc,
// session_membership.cc).
#ifndef KUBEPS_WORKER_AGENT_SIDECAR_REQUEST_FIELDS_H_
#define KUBEPS_WORKER_AGENT_SIDECAR_REQUEST_FIELDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kubeps::sidecar {

// The protocol's error codes.
inline constexpr const char* kInvalidArgument = "InvalidArgument";
inline constexpr const char* kFailedPrecondition = "FailedPrecondition";
inline constexpr const char* kNotFound = "NotFound";
inline constexpr const char* kAborted = "Aborted";
inline constexpr const char* kUnavailable = "Unavailable";
inline constexpr const char* kInternal = "Internal";

inline std::string Quote(const std::string& s) { return nlohmann::json(s).dump(); }

// Reads a request's fields; the first problem becomes `error`, naming the
// op and the field.
class Fields {
 public:
  Fields(const nlohmann::json& request, const char* op) : request_(request), op_(op) {}

  bool Has(const char* name) const { return request_.contains(name); }

  bool Unsigned(const char* name, uint64_t* out, bool required) {
    if (!Has(name)) return !required || Missing(name);
    const nlohmann::json& value = request_[name];
    if (!value.is_number_unsigned()) {
      return Bad(std::string(op_) + ": \"" + name + "\" must be an unsigned integer, got " +
                 value.dump());
    }
    *out = value.get<uint64_t>();
    return true;
  }

  bool Bool(const char* name, bool* out, bool required) {
    if (!Has(name)) return !required || Missing(name);
    const nlohmann::json& value = request_[name];
    if (!value.is_boolean()) {
      return Bad(std::string(op_) + ": \"" + name + "\" must be true or false, got " +
                 value.dump());
    }
    *out = value.get<bool>();
    return true;
  }

  bool String(const char* name, std::string* out, bool required) {
    if (!Has(name)) return !required || Missing(name);
    const nlohmann::json& value = request_[name];
    if (!value.is_string()) {
      return Bad(std::string(op_) + ": \"" + name + "\" must be a string, got " + value.dump());
    }
    *out = value.get<std::string>();
    return true;
  }

  bool UnsignedList(const char* name, std::vector<uint64_t>* out, bool required) {
    if (!Has(name)) return !required || Missing(name);
    const nlohmann::json& value = request_[name];
    bool ok = value.is_array();
    for (size_t i = 0; ok && i < value.size(); ++i) ok = value[i].is_number_unsigned();
    if (!ok) {
      return Bad(std::string(op_) + ": \"" + name + "\" must be a list of unsigned integers, got " +
                 value.dump());
    }
    out->clear();
    for (const nlohmann::json& v : value) out->push_back(v.get<uint64_t>());
    return true;
  }

  bool Bad(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }

  std::string error;

 private:
  bool Missing(const char* name) {
    return Bad(std::string(op_) + ": the field \"" + name + "\" is required");
  }

  const nlohmann::json& request_;
  const char* op_;
};

// The protocol's code for a failure of the KV client (Aborted is handled
// apart: it comes with a resume step).
inline const char* CodeOf(const Status& status) {
  return status.code() == Status::Code::kUnavailable ? kUnavailable : kInternal;
}

}  // namespace kubeps::sidecar

#endif  // KUBEPS_WORKER_AGENT_SIDECAR_REQUEST_FIELDS_H_
