#include "operator/kubeclient/informer.h"

#include <cctype>
#include <chrono>
#include <random>
#include <thread>

#include <cpprest/base_uri.h>

#include "common/logging.h"

namespace kubeps::kube {

using nlohmann::json;

namespace {

// A reflector's pauses after a failed watch (client-go: 800 ms to 30 s).
constexpr std::chrono::milliseconds kWatchRetryFirst{800};
constexpr std::chrono::milliseconds kWatchRetryMax{30000};
// How often a kind that may be missing (MayBeMissing) is looked for.
constexpr std::chrono::milliseconds kMissingKindRetry{30000};

void SleepUnlessStopped(const std::atomic<bool>& stop, std::chrono::milliseconds total) {
  for (auto waited = std::chrono::milliseconds(0); waited < total && !stop;
       waited += std::chrono::milliseconds(50)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string ObjectKey(const json& object) {
  const json& meta = object["metadata"];
  return meta.value("namespace", "") + "/" + meta.value("name", "");
}

Informer::Informer(KubeClient* client, std::string collection, std::string label_selector,
                   Handler on_change)
    : client_(client),
      collection_(std::move(collection)),
      label_selector_(std::move(label_selector)),
      on_change_(std::move(on_change)) {}

std::string Informer::Query(bool watch) const {
  std::string query = collection_;
  if (!label_selector_.empty())
    query += "?labelSelector=" + web::uri::encode_data_string(label_selector_);
  return query;
}

Status Informer::List(std::string* resource_version) {
  if (locate_ && !synced_) collection_ = locate_();
  Response response;
  if (Status s = client_->Get(Query(false), &response); !s.ok()) return s;
  if (response.code == 404 && may_be_missing_) {
    // Served elsewhere now (a new version of its kind): located and listed
    // again at once, not after the wait for a kind not served.
    if (synced_.exchange(false) && locate_) return List(resource_version);
    std::lock_guard<std::mutex> lock(mutex_);
    cache_.clear();  // a kind no longer served has no objects
    return Status::NotFound("list " + collection_ + ": the kind is not served (not installed?)");
  }
  if (!response.ok()) return Status::Error("list " + collection_ + ": " + response.Describe());
  ++lists_;
  std::map<std::string, json> fresh;
  for (const auto& item : response.body.value("items", json::array()))
    fresh[ObjectKey(item)] = item;
  std::vector<json> changed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Objects deleted while we were not watching: tell the handler too.
    for (const auto& [key, old] : cache_) {
      if (!fresh.count(key)) changed.push_back(old);
    }
    for (const auto& [key, item] : fresh) changed.push_back(item);
    cache_ = std::move(fresh);
  }
  *resource_version = response.body["metadata"].value("resourceVersion", "");
  synced_ = true;
  for (const auto& object : changed) on_change_(object);
  return Status::Ok();
}

Informer::WatchEnd Informer::Watch(std::string* resource_version, const std::atomic<bool>& stop) {
  bool gone = false;
  Response response;
  ++watches_;
  Status s = client_->Watch(
      Query(true), *resource_version,
      [&](const WatchEvent& event) {
        if (event.type == "ERROR") {
          // 410 Gone: our resourceVersion was compacted away.
          gone = true;
          return false;
        }
        const std::string rv = event.object["metadata"].value("resourceVersion", "");
        if (!rv.empty()) *resource_version = rv;
        if (event.type == "BOOKMARK") return true;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (event.type == "DELETED")
            cache_.erase(ObjectKey(event.object));
          else
            cache_[ObjectKey(event.object)] = event.object;
        }
        on_change_(event.object);
        return true;
      },
      stop, &response);
  if (!s.ok()) {
    KLOG_ERROR << "watch " << collection_ << ": " << s.message() << "; listing again";
    return WatchEnd::kFailed;
  }
  if (response.code == 410 || gone) return WatchEnd::kGone;
  if (response.code == 429) {
    KLOG_INFO << "watch " << collection_ << ": " << response.Describe() << "; watching again later";
    watch_retry_after_seconds_ = response.retry_after_seconds;
    return WatchEnd::kThrottled;
  }
  if (response.code != 0 && !response.ok()) {
    KLOG_ERROR << "watch " << collection_ << ": " << response.Describe() << "; listing again";
    return WatchEnd::kFailed;
  }
  return WatchEnd::kEnded;
}

void Informer::Run(const std::atomic<bool>& stop) {
  std::string resource_version;
  auto list_backoff = std::chrono::milliseconds(200);
  auto watch_backoff = kWatchRetryFirst;
  std::minstd_rand jitter(std::random_device{}());
  bool said_missing = false;
  while (!stop) {
    if (Status s = List(&resource_version); s.code() == Status::Code::kNotFound) {
      if (!said_missing) KLOG_INFO << s.message() << "; looking again every 30 s";
      said_missing = true;
      SleepUnlessStopped(stop, kMissingKindRetry);
      continue;
    } else if (!s.ok()) {
      KLOG_ERROR << s.message() << "; retrying";
      SleepUnlessStopped(stop, list_backoff);
      list_backoff = std::min(list_backoff * 2, std::chrono::milliseconds(10000));
      continue;
    }
    list_backoff = std::chrono::milliseconds(200);
    said_missing = false;
    // A stream that simply ends is watched again from where it stopped.
    WatchEnd end = WatchEnd::kEnded;
    for (;;) {
      while (!stop && (end = Watch(&resource_version, stop)) == WatchEnd::kEnded) {
        watch_backoff = kWatchRetryFirst;  // a healthy stream: the server is fine
      }
      if (stop || end == WatchEnd::kGone) break;
      // Jittered, so that the operator's informers (and its replicas) do not
      // come back in step.
      auto pause =
          watch_backoff + std::chrono::milliseconds(jitter() % (watch_backoff.count() + 1));
      if (end == WatchEnd::kThrottled) {
        pause = std::max<std::chrono::milliseconds>(
            pause, std::chrono::seconds(std::max(watch_retry_after_seconds_, 0)));
      }
      SleepUnlessStopped(stop, pause);
      watch_backoff = std::min(watch_backoff * 2, kWatchRetryMax);
      if (end != WatchEnd::kThrottled) break;  // list again
    }
  }
}

std::vector<json> Informer::Select(const std::function<bool(const json&)>& keep) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<json> out;
  for (const auto& [key, object] : cache_) {
    if (keep(object)) out.push_back(object);
  }
  return out;
}

json Informer::Find(const std::string& namespace_, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(namespace_ + "/" + name);
  return it == cache_.end() ? json(nullptr) : it->second;
}

}  // namespace kubeps::kube
