// An in-process stand-in for the Kubernetes API server, behind the same
// KubeClient interface the operator uses, so that the informer, leader
// election, reconciler and manager are unit-tested without HTTP.
//
// What it does as the real API server does (Kubernetes API conventions):
//  - objects live at their object paths (".../namespaces/<ns>/<plural>/<name>");
//    one resourceVersion counter for everything, bumped on every write;
//  - POST to a collection: 201, or 409 reason AlreadyExists; server fields
//    (uid, creationTimestamp, generation, resourceVersion) are set, and
//    "status" is dropped, as for resources with a status subresource;
//  - PUT: 404 when missing, 409 reason Conflict when metadata.resourceVersion
//    is stale (no resourceVersion: an unconditional update); PUT and PATCH of
//    the object keep the stored status, of ".../status" change only status;
//  - PATCH is a JSON merge patch (RFC 7386); GET and DELETE of a missing
//    object are 404 reason NotFound; errors carry a v1 Status body;
//  - a collection GET is a list with metadata.resourceVersion, across every
//    namespace when the path names none, filtered by ?labelSelector= ("key",
//    "key=value", "!key", comma-separated);
//  - WATCH streams ADDED/MODIFIED/DELETED after the given resourceVersion
//    (none: ADDED for every current object first) until `stop`, on_event
//    returns false, or the test ends the stream; a resourceVersion older
//    than the retained history gets, like the watch cache, HTTP 200 and one
//    ERROR event holding a 410 Status reason Expired ("too old resource
//    version"); with set_gone_before_streaming(true) an HTTP 410 instead.
// What it does not do: garbage collection runs only when the test calls
// CollectGarbage(); deletion is immediate (no grace period, no finalizers);
// no admission, defaulting or validation beyond the above.
//
// Thread-safe. Watch callbacks run on the watching thread without the
// fake's lock held, so they may call back into it.
#ifndef KUBEPS_TESTS_UNIT_FAKES_FAKE_KUBE_CLIENT_H_
#define KUBEPS_TESTS_UNIT_FAKES_FAKE_KUBE_CLIENT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube::fake {

// One request the code under test made, for the test to read back.
struct Request {
  std::string method;  // GET, POST, PUT, PATCH, DELETE or WATCH
  std::string path;    // as given, query included
  nlohmann::json body;
  std::string resource_version;  // WATCH only: where it asked to start
};

class FakeKubeClient : public KubeClient {
  // Runs `function` with mutex_ held (first: the accessors below use it).
  template <typename Function>
  auto Locked(Function function) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return function();
  }

 public:
  Status Get(const std::string& path, Response* response) override;
  Status Post(const std::string& path, const nlohmann::json& body, Response* response) override;
  Status Put(const std::string& path, const nlohmann::json& body, Response* response) override;
  Status Patch(const std::string& path, const nlohmann::json& body, Response* response) override;
  Status Delete(const std::string& path, Response* response) override;
  // Honours preconditions.uid (409 on another uid) and gracePeriodSeconds 0.
  Status DeleteWithOptions(const std::string& path, const nlohmann::json& options,
                           Response* response) override;
  Status Watch(const std::string& path, const std::string& resource_version,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>& stop, Response* response) override;

  // --- For tests: set up state without going through the request log. ---
  // Creates `object` in `collection`; the stored object, or null (409).
  nlohmann::json Create(const std::string& collection, nlohmann::json object);
  // Replaces the status of the object at `path`, as the kubelet would.
  nlohmann::json SetStatus(const std::string& path, const nlohmann::json& status);
  // Merge-patches the object at `path` (status included), unconditionally.
  nlohmann::json Modify(const std::string& path, const nlohmann::json& patch);
  // GET `group_version_path` ("/apis/GROUP/VERSION") answers `document`
  // (an APIResourceList), as the API server's discovery does for an
  // installed API; other such paths are 404.
  void ServeDiscovery(const std::string& group_version_path, const nlohmann::json& document) {
    Locked([&] { discovery_[group_version_path] = document; });
  }
  void Remove(const std::string& path) {
    Locked([&] { DoDelete(path, {{"gracePeriodSeconds", 0}}); });
  }
  // The stored object, or null.
  nlohmann::json Object(const std::string& path) const;
  // Objects of `collection` (any namespace when it names none).
  std::vector<nlohmann::json> List(const std::string& collection) const;
  std::string resource_version() const {
    return Locked([&] { return std::to_string(resource_version_); });
  }
  // Deletes every object whose controller ownerReference names a uid that
  // no longer exists, as the garbage collector does; returns how many.
  int CollectGarbage();

  // --- Faults. ---
  // The next `times` requests with this method ("" = any) and path (query
  // left out) fail: code 0 with a transport error Status, else with that
  // HTTP code and a Status body (with `details`, where given: an invalid
  // object's causes).
  void FailNext(const std::string& method, const std::string& path, int times, int code,
                nlohmann::json details = nullptr);
  void ClearFailures() {
    Locked([&] { failures_.clear(); });
  }
  // Forgets the history so far: a watch from an older version gets 410.
  void CompactHistory();
  // Keeps only the last `events` events of history (default: all).
  void set_history_limit(size_t events);
  void set_gone_before_streaming(bool http_410) {
    Locked([&] { gone_before_streaming_ = http_410; });
  }
  // Ends every open watch cleanly, as the server's timeoutSeconds does.
  void EndWatches();
  // Sends a BOOKMARK with the current resourceVersion to open watches.
  void SendBookmark();

  // --- Reading back. ---
  std::vector<Request> requests() const {
    return Locked([&] { return requests_; });
  }
  // Requests with this method whose path (query left out) starts with `prefix`.
  std::vector<Request> RequestsTo(const std::string& method, const std::string& prefix) const;
  void ClearRequests() {
    Locked([&] { requests_.clear(); });
  }
  int open_watches() const {
    return Locked([&] { return open_watches_; });
  }
  // Watch events handed to on_event so far (and returned from), all watches.
  int delivered_events() const {
    return Locked([&] { return delivered_events_; });
  }
  // Waits until at least `count` watches are open; false on timeout.
  bool AwaitOpenWatches(int count, std::chrono::milliseconds timeout);

 private:
  struct Event {
    uint64_t seq;  // position in history: watches resume by it
    int64_t resource_version;
    std::string type;
    std::string path;  // of the object
    nlohmann::json object;
  };
  struct Failure {
    std::string method, path;
    int remaining;
    int code;
    nlohmann::json details;
  };

  // The request's injected failure, if any (requires mutex_).
  bool Injected(const std::string& method, const std::string& path, Status* status,
                Response* response);
  // Logs the request, applies an injected failure or else `operation`.
  Status Serve(const char* method, const std::string& path, const nlohmann::json& body,
               Response* response, const std::function<Response()>& operation);
  // The operations themselves (require mutex_). A test write (`by_test`)
  // skips the resourceVersion check and may change the status with the rest.
  Response DoGet(const std::string& path) const;
  Response DoCreate(const std::string& path, nlohmann::json object);
  Response DoUpdate(const std::string& path, const nlohmann::json& body, bool merge_patch,
                    bool by_test = false);
  Response DoDelete(const std::string& path, const nlohmann::json& options);
  void Record(const std::string& type, const std::string& path, const nlohmann::json& object);
  void Trim();  // drops history beyond history_limit_

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, nlohmann::json> objects_;    // by object path
  std::map<std::string, nlohmann::json> discovery_;  // by group-version path
  int64_t resource_version_ = 1;
  int64_t next_uid_ = 1;
  std::deque<Event> history_;
  uint64_t next_seq_ = 0;
  int64_t compacted_through_ = 0;  // events up to this version are forgotten
  size_t history_limit_ = SIZE_MAX;
  bool gone_before_streaming_ = false;
  uint64_t watch_epoch_ = 0;  // EndWatches() moves it on
  int open_watches_ = 0;
  int delivered_events_ = 0;
  std::vector<Failure> failures_;
  std::vector<Request> requests_;
};

// Polls `condition` until it holds or `timeout` passes (generous by
// default: the CI machine is loaded). True when it held.
bool Eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace kubeps::kube::fake

#endif  // KUBEPS_TESTS_UNIT_FAKES_FAKE_KUBE_CLIENT_H_
