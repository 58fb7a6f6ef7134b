// A cache of one kind of Kubernetes object, kept current by list + watch,
// as client-go's informers do: list (remember the resourceVersion), watch
// from there (bookmarks move the resourceVersion on), watch again when the
// stream ends, list again at once on 410 Gone, and after a pause that grows
// (0.8 s to 30 s, jittered, as a reflector's) when a watch fails: a 403, a
// 429, a 5xx or a broken connection must not turn into tens of LISTs a
// second against a struggling API server. Every change
// calls the handler, which only enqueues work: reconciles read the cache.
//
// Thread-safe: Run() owns its thread; the cache is read from any thread
// under the informer's lock.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_INFORMER_H_
#define KUBEPS_OPERATOR_KUBECLIENT_INFORMER_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

class Informer {
 public:
  using Handler = std::function<void(const nlohmann::json& object)>;

  // `collection` is a list path ("/api/v1/pods"); `label_selector` may be "".
  Informer(KubeClient* client, std::string collection, std::string label_selector,
           Handler on_change);

  // Lists and watches until `stop`; returns then.
  void Run(const std::atomic<bool>& stop);

  // For a kind the cluster may not serve (a CRD not installed yet): a list
  // answered 404 is said once, at info level, not as an error, and tried
  // again every 30 s; synced() is false until the kind is served, and false
  // again once it is no longer. `locate`, where given, is asked before each
  // list while not synced for the collection to list (a kind whose served
  // version may change with an upgrade: Kueue's).
  void MayBeMissing(std::function<std::string()> locate = {}) {
    may_be_missing_ = true;
    locate_ = std::move(locate);
  }

  bool synced() const { return synced_; }
  // Copies of the cached objects that `keep` accepts.
  std::vector<nlohmann::json> Select(const std::function<bool(const nlohmann::json&)>& keep) const;
  // The cached object namespace/name, or null.
  nlohmann::json Find(const std::string& namespace_, const std::string& name) const;
  // Counters, for tests and metrics.
  int lists() const { return lists_; }
  int watches() const { return watches_; }

 private:
  Status List(std::string* resource_version);
  enum class WatchEnd {
    kEnded,   // the server ended the stream (its timeout): watch again
    kGone,    // 410: our resourceVersion is too old; list again now
    kFailed,  // an HTTP error or a broken connection: pause, then list again
    // 429: the server turned the watch away before doing anything; our
    // resourceVersion is still good, so wait (Retry-After at least) and
    // watch again without a list, which would only add to its load.
    kThrottled,
  };
  WatchEnd Watch(std::string* resource_version, const std::atomic<bool>& stop);
  int watch_retry_after_seconds_ = -1;  // of the last throttled watch
  std::string Query(bool watch) const;

  KubeClient* client_;
  std::string collection_;  // read and, with locate_, written by Run's thread only
  const std::string label_selector_;
  const Handler on_change_;
  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> cache_;  // by namespace/name
  std::atomic<bool> synced_{false};
  bool may_be_missing_ = false;
  std::function<std::string()> locate_;
  std::atomic<int> lists_{0}, watches_{0};
};

std::string ObjectKey(const nlohmann::json& object);  // "namespace/name"

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_INFORMER_H_
