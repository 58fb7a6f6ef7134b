#include "worker-agent/kv/rollback_copies.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "worker-agent/kv/kv_worker.h"

namespace kubeps {
namespace {

// KUBEPS_ROLLBACK_COPIES, as kubeps.torch reads it. A value that is no
// count is said once, and the default kept: the copies cost memory, not
// correctness, and a constructor has no error to return.
int KeptFromEnvironment() {
  const char* text = std::getenv("KUBEPS_ROLLBACK_COPIES");
  if (text == nullptr || *text == '\0') return RollbackCopies::kDefaultKept;
  char* end = nullptr;
  const long kept = std::strtol(text, &end, 10);
  if (*end == '\0' && kept >= 0 && kept <= 1000) return static_cast<int>(kept);
  std::fprintf(stderr,
               "[kubeps] KUBEPS_ROLLBACK_COPIES=%s: expected the number of copies of the "
               "program's state kept for a rollback (0 or more); keeping %d\n",
               text, RollbackCopies::kDefaultKept);
  return RollbackCopies::kDefaultKept;
}

}  // namespace

RollbackCopies::RollbackCopies(const KVWorker& kv, int kept)
    : RollbackCopies(
          kv.CheckpointInterval(), [&kv] { return kv.NewestCommonCheckpoint(); }, kept) {}

RollbackCopies::RollbackCopies(uint64_t interval, std::function<int64_t()> newest_common, int kept)
    : interval_(interval),
      newest_common_(std::move(newest_common)),
      kept_(kept >= 0 ? kept : KeptFromEnvironment()) {}

void RollbackCopies::Track(void* data, size_t bytes) {
  regions_.push_back({data, bytes});
  copies_.clear();  // of other regions: they would put back the wrong bytes
}

void RollbackCopies::BeforeStep(uint64_t step) {
  const bool starts_run = !started_;
  if (starts_run) {
    started_ = true;
    state_from_ = step;
  }
  const uint64_t from = std::min(state_from_, step);
  state_from_ = step + 1;  // what the program computes now changes it
  if (kept_ == 0 || regions_.empty()) return;
  for (const Copy& copy : copies_) {
    if (copy.first <= from && step <= copy.last) return;  // the one put back by a rollback
  }
  const bool holds_multiple =
      interval_ > 0 && (from + interval_ - 1) / interval_ * interval_ <= step;
  if (!starts_run && !holds_multiple) return;
  DropUnlikely();
  Copy copy;
  copy.first = from;
  copy.last = step;
  copy.bytes = std::move(spare_);
  spare_.clear();
  size_t total = 0;
  for (const Region& region : regions_) total += region.bytes;
  copy.bytes.resize(total);
  char* out = copy.bytes.data();
  for (const Region& region : regions_) {
    std::memcpy(out, region.data, region.bytes);
    out += region.bytes;
  }
  copies_.push_back(std::move(copy));
}

void RollbackCopies::DropUnlikely() {
  const size_t room = kept_ > 1 ? static_cast<size_t>(kept_ - 1) : 0;
  const int64_t floor = newest_common_ ? newest_common_() : -1;
  // Oldest first, so newest first is from the back.
  std::vector<size_t> order;
  if (floor < 0) {
    for (size_t i = copies_.size(); i-- > 0;) order.push_back(i);
  } else {
    const uint64_t at = static_cast<uint64_t>(floor);
    for (size_t i = 0; i < copies_.size(); ++i) {
      if (copies_[i].first <= at && at <= copies_[i].last) order.push_back(i);
    }
    for (size_t i = copies_.size(); i-- > 0;) {
      if (copies_[i].first > at) order.push_back(i);
    }
    for (size_t i = copies_.size(); i-- > 0;) {
      if (copies_[i].last < at) {
        order.push_back(i);
        break;
      }
    }
  }
  if (order.size() > room) order.resize(room);
  std::vector<Copy> kept;
  for (size_t i = 0; i < copies_.size(); ++i) {
    if (std::find(order.begin(), order.end(), i) != order.end()) {
      kept.push_back(std::move(copies_[i]));
    } else if (copies_[i].bytes.capacity() > spare_.capacity()) {
      spare_ = std::move(copies_[i].bytes);  // fresh memory costs a page fault a page
    }
  }
  copies_ = std::move(kept);
}

bool RollbackCopies::RollBack(uint64_t resume_step) {
  started_ = false;
  std::vector<Copy> kept;
  const Copy* back = nullptr;
  for (Copy& copy : copies_) {
    if (copy.first > resume_step) {  // another timeline's
      if (copy.bytes.capacity() > spare_.capacity()) spare_ = std::move(copy.bytes);
      continue;
    }
    copy.last = std::min(copy.last, resume_step);
    kept.push_back(std::move(copy));
  }
  copies_ = std::move(kept);
  for (const Copy& copy : copies_) {
    if (copy.first <= resume_step && resume_step <= copy.last) back = &copy;
  }
  if (back == nullptr) return false;
  const char* in = back->bytes.data();
  for (const Region& region : regions_) {
    std::memcpy(region.data, in, region.bytes);
    in += region.bytes;
  }
  return true;
}

std::vector<std::pair<uint64_t, uint64_t>> RollbackCopies::kept_steps() const {
  std::vector<std::pair<uint64_t, uint64_t>> steps;
  for (const Copy& copy : copies_) steps.emplace_back(copy.first, copy.last);
  return steps;
}

}  // namespace kubeps
