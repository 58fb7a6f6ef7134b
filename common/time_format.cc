#include "common/time_format.h"

#include <absl/time/time.h>

namespace kubeps {

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

std::string MicroTime(std::chrono::system_clock::time_point t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

std::chrono::system_clock::time_point ParseTime(const std::string& text) {
  absl::Time parsed;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &parsed, &error)) return {};
  return absl::ToChronoTime(parsed);
}

}  // namespace kubeps
