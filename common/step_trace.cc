#include "common/step_trace.h"

#include <algorithm>
#include <cstdio>

namespace kubeps {

StepTrace& StepTrace::Get() {
  static StepTrace trace;
  return trace;
}

void StepTrace::Open(const std::string& title) {
  std::lock_guard<std::mutex> lock(mutex_);
  title_ = title;
  origin_ = Clock::now();
  events_.clear();
  open_ = true;
}

void StepTrace::Record(const std::string& what, Clock::time_point start, Clock::time_point end) {
  if (!open()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - origin_).count();
  };
  events_.push_back({ms(start), ms(end), what});
}

std::string StepTrace::Close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!open_) return "";
  open_ = false;
  std::stable_sort(events_.begin(), events_.end(),
                   [](const Event& a, const Event& b) { return a.start_ms < b.start_ms; });
  std::string table = title_ + "\n   start ms    end ms  what\n";
  char line[64];
  for (const Event& e : events_) {
    if (e.end_ms > e.start_ms) {
      std::snprintf(line, sizeof line, "%10.2f %9.2f  ", e.start_ms, e.end_ms);
    } else {
      std::snprintf(line, sizeof line, "%10.2f %9s  ", e.start_ms, "");
    }
    table += line + e.what + "\n";
  }
  return table;
}

}  // namespace kubeps
