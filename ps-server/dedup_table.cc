#include "ps-server/dedup_table.h"

namespace kubeps {

DedupTable::Verdict DedupTable::Begin(const v1::RequestId& id) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    Sender& sender = senders_[id.node_id()];
    auto current = current_.find(id.node_id());
    const bool confirmed = current != current_.end() && current->second == id.incarnation();
    // A life the scheduler called current once and has replaced since, even
    // while its successor has not been heard from here (the sender's record
    // still the old life's): a late request of it is never applied.
    const auto& known = known_[id.node_id()];
    if (!confirmed && current != current_.end() && known.count(id.incarnation())) {
      return Verdict::kStale;
    }
    if (id.incarnation() != sender.incarnation) {
      const bool first_contact = sender.incarnation == 0;
      if (!first_contact && !confirmed) {
        return known.count(id.incarnation()) ? Verdict::kStale : Verdict::kNotYetKnown;
      }
      // A restarted process numbers its requests from scratch; what its
      // previous life sent has been settled or will never be resent.
      sender = Sender{id.incarnation(), 0, {}, {}};
      // A resend of the previous life waiting below is judged again.
      done_.notify_all();
    }
    if (id.acked_below() > sender.floor) {
      sender.floor = id.acked_below();
      sender.applied.erase(sender.applied.begin(), sender.applied.lower_bound(sender.floor));
    }
    if (id.seq() < sender.floor) return Verdict::kDuplicate;
    const uint64_t restores = restores_;
    // `sender` is gone once a Restore replaced the records, and is another
    // life's once a restarted process's first request reset it: looked at
    // only while neither happened. Either way the request is judged again.
    auto replaced = [&] { return restores_ != restores || sender.incarnation != id.incarnation(); };
    done_.wait(lock, [&] { return replaced() || !sender.in_flight.count(id.seq()); });
    if (replaced()) continue;
    // While we waited, the original may have settled and the floor moved past
    // it (its record then dropped): both mean it was applied.
    if (id.seq() < sender.floor || sender.applied.count(id.seq())) return Verdict::kDuplicate;
    sender.in_flight.insert(id.seq());
    return Verdict::kApply;
  }
}

void DedupTable::Done(const v1::RequestId& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Sender& sender = senders_[id.node_id()];
    // A request of an incarnation that has since been replaced: the reset
    // already dropped its record, and its seq may now be the new one's.
    if (id.incarnation() == sender.incarnation) {
      sender.in_flight.erase(id.seq());
      if (id.seq() >= sender.floor) sender.applied.insert(id.seq());
    }
  }
  done_.notify_all();
}

void DedupTable::Abandon(const v1::RequestId& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Sender& sender = senders_[id.node_id()];
    if (id.incarnation() == sender.incarnation) sender.in_flight.erase(id.seq());
  }
  done_.notify_all();
}

void DedupTable::SetCurrentIncarnations(const std::map<std::string, uint64_t>& current) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [node_id, incarnation] : current) {
    current_[node_id] = incarnation;
    known_[node_id].insert(incarnation);
  }
}

uint64_t DedupTable::CurrentIncarnation(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = current_.find(node_id);
  return it == current_.end() ? 0 : it->second;
}

size_t DedupTable::TrackedRequests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& [name, sender] : senders_)
    total += sender.applied.size() + sender.in_flight.size();
  return total;
}

bool DedupTable::Settled(const std::string& node_id, uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = senders_.find(node_id);
  return it != senders_.end() && (seq < it->second.floor || it->second.applied.count(seq) > 0);
}

void DedupTable::Save(v1::ShardCheckpoint* checkpoint) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [node_id, sender] : senders_) {
    auto* saved = checkpoint->add_senders();
    saved->set_node_id(node_id);
    saved->set_incarnation(sender.incarnation);
    saved->set_floor(sender.floor);
    for (uint64_t seq : sender.applied) saved->add_applied(seq);
  }
}

void DedupTable::Restore(const v1::ShardCheckpoint& checkpoint) {
  std::lock_guard<std::mutex> lock(mutex_);
  senders_.clear();
  ++restores_;
  for (const auto& saved : checkpoint.senders()) {
    Sender& sender = senders_[saved.node_id()];
    sender.incarnation = saved.incarnation();
    sender.floor = saved.floor();
    sender.applied.insert(saved.applied().begin(), saved.applied().end());
  }
  done_.notify_all();
}

}  // namespace kubeps
