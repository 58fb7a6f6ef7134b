// A timeline of one training step, to read how communication overlaps
// computation: with KUBEPS_TRACE_STEP=N in a worker's environment, the
// training loop opens the trace at step N's start, the parameter store and
// the KV client record what they do (a layer's gradients ready, each push
// and pull request from start to end, a forward pass waiting for a layer),
// and the loop prints the table once step N+1's forward pass has taken
// every parameter step N's exchanges brought (docs/overlap.md, "Reading a step", shows one).
//
// Off by default: Record is then one relaxed atomic load. Thread-safe.
#ifndef KUBEPS_COMMON_STEP_TRACE_H_
#define KUBEPS_COMMON_STEP_TRACE_H_

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace kubeps {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // The process's trace.
  static StepTrace& Get();

  // Starts recording, from now.
  void Open(const std::string& title);
  bool open() const { return open_.load(std::memory_order_relaxed); }
  // Something that took from `start` to `end` (equal for a moment).
  void Record(const std::string& what, Clock::time_point start, Clock::time_point end);
  void Mark(const std::string& what) { Record(what, Clock::now(), Clock::now()); }
  // Stops recording; the table, events in order of their start, in ms
  // from Open. Empty when it was not open.
  std::string Close();

 private:
  struct Event {
    double start_ms, end_ms;
    std::string what;
  };
  std::atomic<bool> open_{false};
  std::mutex mutex_;
  std::string title_;
  Clock::time_point origin_;
  std::vector<Event> events_;
};

// Records the span from its construction to its end, when the trace is open.
class TraceSpan {
 public:
  explicit TraceSpan(std::string what) : what_(std::move(what)), start_(StepTrace::Clock::now()) {}
  ~TraceSpan() {
    if (StepTrace::Get().open()) StepTrace::Get().Record(what_, start_, StepTrace::Clock::now());
  }

 private:
  std::string what_;
  StepTrace::Clock::time_point start_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_STEP_TRACE_H_
