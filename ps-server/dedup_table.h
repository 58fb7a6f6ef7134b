// Exactly-once bookkeeping for a shard: remembers, per sender, which
// request sequence numbers were already applied, so that a resent request
// is answered without being applied again.
//
// Memory stays bounded: a sender reports with every request the lowest
// sequence number it may still resend (acked_below); everything below it is
// forgotten and any request below it is a stale duplicate.
//
// A restarted process numbers its requests from scratch under a new
// incarnation (a random number, never a clock: a clock set behind would
// make the new life look older than the old). Which life is current is the
// scheduler's word, learnt through the shard's heartbeats
// (SetCurrentIncarnations): a request of the current incarnation replaces
// the sender's record, one of an incarnation the scheduler has since
// replaced is refused (kStale), even before its successor's first request
// reaches this shard, and one the scheduler has not confirmed yet
// waits for the next heartbeat (kNotYetKnown, resent by the client).
//
// Thread-safe: the shard's RPC threads check and record under one lock.
#ifndef KUBEPS_PS_SERVER_DEDUP_TABLE_H_
#define KUBEPS_PS_SERVER_DEDUP_TABLE_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "kubeps.pb.h"

namespace kubeps {

class DedupTable {
 public:
  enum class Verdict { kApply, kDuplicate, kStale, kNotYetKnown };

  // kApply: the caller must apply the request, then call Done(). A
  // duplicate of a request still being applied waits for that to finish, so
  // its answer is never sent before the original's effect exists.
  Verdict Begin(const v1::RequestId& id);
  void Done(const v1::RequestId& id);
  // After kApply, for a request refused instead of applied: it is forgotten,
  // so that its resend (or a corrected one with the same id) is applied.
  void Abandon(const v1::RequestId& id);

  size_t TrackedRequests() const;  // for tests: proves the table stays bounded
  // Whether request `seq` of `node_id`'s recorded life is settled (applied).
  bool Settled(const std::string& node_id, uint64_t seq) const;

  // The scheduler's view: every registered node's current incarnation.
  // Merged in: a node the view leaves out keeps what was known of it.
  void SetCurrentIncarnations(const std::map<std::string, uint64_t>& current);
  // For messages: the current incarnation of `node_id` by the view, 0 if unknown.
  uint64_t CurrentIncarnation(const std::string& node_id) const;

  // The settled requests, for a shard checkpoint; in-flight ones are not
  // settled and are left out.
  void Save(v1::ShardCheckpoint* checkpoint) const;
  void Restore(const v1::ShardCheckpoint& checkpoint);

 private:
  struct Sender {
    uint64_t incarnation = 0;
    uint64_t floor = 0;            // every seq below is settled
    std::set<uint64_t> applied;    // settled seqs >= floor
    std::set<uint64_t> in_flight;  // being applied now
  };

  mutable std::mutex mutex_;
  std::condition_variable done_;
  std::map<std::string, Sender> senders_;
  uint64_t restores_ = 0;  // Restore calls so far: a waiting Begin's Sender may be gone
  // By node: the incarnation the scheduler calls current, and every one it
  // ever did (a request of a replaced one is refused, not waited for).
  std::map<std::string, uint64_t> current_;
  std::map<std::string, std::set<uint64_t>> known_;
};

}  // namespace kubeps

#endif  // KUBEPS_PS_SERVER_DEDUP_TABLE_H_
