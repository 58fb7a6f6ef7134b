#include "operator/kubeclient/time_format.h"

#include <cstdio>
#include <ctime>

namespace kubeps::kube {

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string MicroTime(std::chrono::system_clock::time_point t) {
  std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  const long micros = static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000);
  char text[64];  // room for any year the compiler can imagine
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, micros);
  return text;
}

std::chrono::system_clock::time_point ParseTime(const std::string& text) {
  std::tm utc{};
  double seconds = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%lf", &utc.tm_year, &utc.tm_mon, &utc.tm_mday,
                  &utc.tm_hour, &utc.tm_min, &seconds) != 6) {
    return {};
  }
  utc.tm_year -= 1900;
  utc.tm_mon -= 1;
  utc.tm_sec = static_cast<int>(seconds);
  auto t = std::chrono::system_clock::from_time_t(timegm(&utc));
  return t + std::chrono::microseconds(static_cast<int64_t>((seconds - utc.tm_sec) * 1e6));
}

}  // namespace kubeps::kube
