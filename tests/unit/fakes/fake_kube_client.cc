#include "tests/unit/fakes/fake_kube_client.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>

#include <cpprest/asyncrt_utils.h>
#include <cpprest/base_uri.h>

#include "common/time_format.h"

namespace kubeps::kube::fake {
namespace {

using nlohmann::json;

// A request path taken apart.
struct ApiPath {
  std::string prefix;  // "/api/v1" or "/apis/<group>/<version>"
  std::string group;
  std::string namespace_;  // "" = every namespace (collections only)
  std::string plural;
  std::string name;  // "" for a collection
  std::string subresource;
  std::string selector;  // ?labelSelector=, decoded

  std::string ObjectPath() const {
    return prefix + (namespace_.empty() ? "" : "/namespaces/" + namespace_) + "/" + plural + "/" +
           name;
  }
  // As the API server names a resource in messages: pods, trainingjobs.kubeps.io.
  std::string Resource() const { return group.empty() ? plural : plural + "." + group; }
};

std::string WithoutQuery(const std::string& path) { return path.substr(0, path.find('?')); }

bool ParsePath(const std::string& full, ApiPath* out) {
  const size_t query = full.find('?');
  if (query != std::string::npos) {
    std::stringstream params(full.substr(query + 1));
    std::string param;
    const std::string key = "labelSelector=";
    while (std::getline(params, param, '&')) {
      if (param.rfind(key, 0) == 0) out->selector = web::uri::decode(param.substr(key.size()));
    }
  }
  std::vector<std::string> s;
  std::stringstream segments(WithoutQuery(full));
  for (std::string part; std::getline(segments, part, '/');) {
    if (!part.empty()) s.push_back(part);
  }
  size_t i = 0;
  if (s.size() >= 2 && s[0] == "api") {
    out->prefix = "/api/" + s[1];
    i = 2;
  } else if (s.size() >= 3 && s[0] == "apis") {
    out->prefix = "/apis/" + s[1] + "/" + s[2];
    out->group = s[1];
    i = 3;
  } else {
    return false;
  }
  if (s.size() > i + 2 && s[i] == "namespaces") {
    out->namespace_ = s[i + 1];
    i += 2;
  }
  if (i >= s.size() || s.size() - i > 3) return false;
  out->plural = s[i];
  if (s.size() > i + 1) out->name = s[i + 1];
  if (s.size() > i + 2) out->subresource = s[i + 2];
  return true;
}

json Labels(const json& object) {
  return object.value("metadata", json::object()).value("labels", json::object());
}

// "key", "!key", "key=value", "key==value", "key!=value", comma-separated.
bool SelectorMatches(const std::string& selector, const json& object) {
  const json labels = Labels(object);
  std::stringstream terms(selector);
  for (std::string term; std::getline(terms, term, ',');) {
    if (term.empty()) continue;
    const size_t eq = term.find('=');
    if (eq == std::string::npos) {
      const bool negated = term[0] == '!';
      if (labels.contains(term.substr(negated ? 1 : 0)) == negated) return false;
      continue;
    }
    const bool not_equal = eq > 0 && term[eq - 1] == '!';
    const std::string key = term.substr(0, not_equal ? eq - 1 : eq);
    const std::string value = term.substr(term.find_first_not_of('=', eq));
    const bool equal = labels.contains(key) && labels[key] == value;
    if (equal == not_equal) return false;
  }
  return true;
}

// Whether the object at `object_path` belongs to the listed or watched `collection`.
bool InCollection(const ApiPath& collection, const std::string& object_path, const json& object) {
  ApiPath p;
  return ParsePath(object_path, &p) && p.prefix == collection.prefix &&
         p.plural == collection.plural &&
         (collection.namespace_.empty() || collection.namespace_ == p.namespace_) &&
         SelectorMatches(collection.selector, object);
}

// The HTTP reason phrase of each code the fake answers, and the reason of
// the v1 Status an injected failure of that code carries.
struct CodeText {
  int code;
  const char* phrase;
  const char* reason;
};
constexpr CodeText kCodes[] = {
    {200, "OK", ""},
    {201, "Created", ""},
    {400, "Bad Request", "BadRequest"},
    {403, "Forbidden", "Forbidden"},
    {404, "Not Found", "NotFound"},
    {405, "Method Not Allowed", "MethodNotAllowed"},
    {409, "Conflict", "Conflict"},
    {410, "Gone", "Expired"},
    {422, "Unprocessable Entity", "Invalid"},
    {429, "Too Many Requests", "TooManyRequests"},
    {503, "Service Unavailable", "ServiceUnavailable"},
    {500, "Internal Server Error", "InternalError"}};  // the last: any other code

const CodeText& TextOf(int code) {
  for (const CodeText& text : kCodes) {
    if (text.code == code) return text;
  }
  return kCodes[std::size(kCodes) - 1];
}

json StatusBody(int code, const std::string& reason, const std::string& message) {
  return {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
          {"status", "Failure"}, {"message", message}, {"reason", reason},
          {"code", code}};
}

Response Error(int code, const std::string& reason, const std::string& message) {
  return Response{code, TextOf(code).phrase, StatusBody(code, reason, message)};
}

Response Success(int code, json body) {
  return Response{code, TextOf(code).phrase, std::move(body)};
}

json BodyIfOk(const Response& response) { return response.ok() ? response.body : json(nullptr); }

Response NotFound(const ApiPath& p) {
  return Error(404, "NotFound", p.Resource() + " \"" + p.name + "\" not found");
}

std::string Quoted(const std::string& text) { return "\"" + text + "\""; }

void CopyField(json* to, const json& from, const char* field) {
  if (from.contains(field)) {
    (*to)[field] = from[field];
  } else if (to->is_object()) {
    to->erase(field);
  }
}

// Everything a user sets apart from metadata and status: what moves metadata.generation.
json SpecPart(json object) {
  object.erase("metadata");
  object.erase("status");
  return object;
}

}  // namespace

// ---------------------------------------------------------------------------
// The operations, under mutex_.

Response FakeKubeClient::DoGet(const std::string& path) const {
  if (auto served = discovery_.find(path); served != discovery_.end())
    return Success(200, served->second);
  // A group, or a group's version, that is not served: the server's
  // not-found handler answers in plain text ("404 page not found"), no
  // Status, which the client reads as a null body.
  if (path.rfind("/apis/", 0) == 0 && std::count(path.begin(), path.end(), '/') <= 3) {
    Response plain;
    plain.code = 404;
    plain.reason = "Not Found";
    return plain;
  }
  ApiPath p;
  if (!ParsePath(path, &p)) return Error(404, "NotFound", "the server could not find " + path);
  if (p.name.empty()) {
    json items = json::array();
    for (const auto& [key, object] : objects_) {
      if (InCollection(p, key, object)) items.push_back(object);
    }
    return Success(200, {{"kind", "List"},
                         {"apiVersion", "v1"},
                         {"metadata", {{"resourceVersion", std::to_string(resource_version_)}}},
                         {"items", items}});
  }
  auto it = objects_.find(p.ObjectPath());
  return it == objects_.end() ? NotFound(p) : Success(200, it->second);
}

Response FakeKubeClient::DoCreate(const std::string& path, json object) {
  ApiPath p;
  if (!ParsePath(path, &p)) return Error(404, "NotFound", "the server could not find " + path);
  if (!p.name.empty()) return Error(405, "MethodNotAllowed", "POST is not supported on " + path);
  json& meta = object["metadata"];
  if (!meta.is_object()) meta = json::object();
  if (!p.namespace_.empty() && meta.value("namespace", p.namespace_) != p.namespace_) {
    return Error(400, "BadRequest",
                 "the namespace of the provided object does not match the namespace sent on "
                 "the request");
  }
  if (!p.namespace_.empty()) meta["namespace"] = p.namespace_;
  p.name = meta.value("name", "");
  p.namespace_ = meta.value("namespace", "");
  if (p.name.empty()) return Error(422, "Invalid", "metadata.name is required");
  if (objects_.count(p.ObjectPath())) {
    return Error(409, "AlreadyExists", p.Resource() + " " + Quoted(p.name) + " already exists");
  }
  meta["uid"] = "fake-uid-" + std::to_string(next_uid_++);
  meta["creationTimestamp"] = Rfc3339(std::chrono::system_clock::now());
  meta["generation"] = 1;
  object.erase("status");               // set through the status subresource only
  if (object.contains("stringData")) {  // as the API server stores a Secret: base64 in data
    for (const auto& [key, value] : object["stringData"].items()) {
      const std::string text = value.get<std::string>();
      object["data"][key] =
          utility::conversions::to_base64(std::vector<unsigned char>(text.begin(), text.end()));
    }
    object.erase("stringData");
  }
  meta["resourceVersion"] = std::to_string(++resource_version_);
  objects_[p.ObjectPath()] = object;
  Record("ADDED", p.ObjectPath(), object);
  return Success(201, object);
}

Response FakeKubeClient::DoUpdate(const std::string& path, const json& body, bool merge_patch,
                                  bool by_test) {
  ApiPath p;
  if (!ParsePath(path, &p)) return Error(404, "NotFound", "the server could not find " + path);
  if (p.name.empty()) return Error(405, "MethodNotAllowed", "no object named in " + path);
  auto it = objects_.find(p.ObjectPath());
  if (it == objects_.end()) return NotFound(p);
  const json& stored = it->second;
  const json body_meta = body.value("metadata", json::object());
  const std::string wanted = body_meta.value("resourceVersion", "");
  if (!by_test && !wanted.empty() && wanted != stored["metadata"]["resourceVersion"]) {
    return Error(409, "Conflict",
                 "Operation cannot be fulfilled on " + p.Resource() + " " + Quoted(p.name) +
                     ": the object has been modified; please apply your changes to the latest "
                     "version and try again");
  }
  json candidate = stored;
  if (merge_patch) {
    candidate.merge_patch(body);
  } else {
    candidate = body;
  }
  json next = stored;
  if (p.subresource == "status") {
    CopyField(&next, candidate, "status");
  } else {
    next = candidate;
    if (!by_test) CopyField(&next, stored, "status");
    for (const char* server_field : {"uid", "creationTimestamp", "generation", "namespace", "name"})
      CopyField(&next["metadata"], stored["metadata"], server_field);
    if (SpecPart(next) != SpecPart(stored))
      next["metadata"]["generation"] = stored["metadata"].value("generation", 1) + 1;
  }
  next["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"];
  if (next == stored) return Success(200, stored);  // a no-op write changes no version
  next["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  it->second = next;
  Record("MODIFIED", p.ObjectPath(), next);
  return Success(200, next);
}

Response FakeKubeClient::DoDelete(const std::string& path, const json& options) {
  ApiPath p;
  if (!ParsePath(path, &p)) return Error(404, "NotFound", "the server could not find " + path);
  auto it = objects_.find(p.ObjectPath());
  if (p.name.empty() || it == objects_.end()) return NotFound(p);
  const json& meta = it->second["metadata"];
  const json uid = options.is_object()
                       ? options.value("preconditions", json::object()).value("uid", json())
                       : json();
  if (uid.is_string() && uid != meta.value("uid", "")) {
    return Error(409, "Conflict",
                 "Operation cannot be fulfilled on " + p.Resource() + " \"" + p.name +
                     "\": Precondition failed: UID in precondition: " + uid.get<std::string>() +
                     ", UID in object meta: " + meta.value("uid", ""));
  }
  // Deleted already, with a grace period: a pod stays Terminating until its
  // kubelet ends it, which a test does with Remove, or a delete with
  // gracePeriodSeconds 0 does at once.
  const bool forced = options.is_object() && options.value("gracePeriodSeconds", -1) == 0;
  if (p.plural == "pods" && meta.contains("deletionTimestamp") && !forced) {
    return Success(200, it->second);
  }
  json object = std::move(it->second);
  objects_.erase(it);
  object["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  Record("DELETED", p.ObjectPath(), object);
  return Success(200, object);
}

void FakeKubeClient::Record(const std::string& type, const std::string& path, const json& object) {
  history_.push_back({next_seq_++, resource_version_, type, path, object});
  Trim();
  changed_.notify_all();
}

void FakeKubeClient::Trim() {
  while (history_.size() > history_limit_) {
    compacted_through_ = history_.front().resource_version;
    history_.pop_front();
  }
}

bool FakeKubeClient::Injected(const std::string& method, const std::string& path, Status* status,
                              Response* response) {
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if ((!it->method.empty() && it->method != method) || it->path != WithoutQuery(path)) continue;
    const int code = it->code;
    const json details = it->details;
    if (--it->remaining <= 0) failures_.erase(it);
    if (code == 0) {
      *status = Status::Error("kube: " + method + " " + path + ": connection reset (injected)");
    } else {
      *response = Error(code, TextOf(code).reason, "injected failure");
      if (!details.is_null()) response->body["details"] = details;
    }
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// KubeClient.

Status FakeKubeClient::Serve(const char* method, const std::string& path, const json& body,
                             Response* response, const std::function<Response()>& operation) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_.push_back({method, path, body, ""});
  *response = Response();
  Status status;
  if (!Injected(method, path, &status, response)) *response = operation();
  return status;
}

Status FakeKubeClient::Get(const std::string& path, Response* response) {
  return Serve("GET", path, nullptr, response, [&] { return DoGet(path); });
}
Status FakeKubeClient::Post(const std::string& path, const json& body, Response* response) {
  return Serve("POST", path, body, response, [&] { return DoCreate(path, body); });
}
Status FakeKubeClient::Put(const std::string& path, const json& body, Response* response) {
  return Serve("PUT", path, body, response, [&] { return DoUpdate(path, body, false); });
}
Status FakeKubeClient::Patch(const std::string& path, const json& body, Response* response) {
  return Serve("PATCH", path, body, response, [&] { return DoUpdate(path, body, true); });
}
Status FakeKubeClient::Delete(const std::string& path, Response* response) {
  return Serve("DELETE", path, nullptr, response, [&] { return DoDelete(path, nullptr); });
}
Status FakeKubeClient::DeleteWithOptions(const std::string& path, const json& options,
                                         Response* response) {
  return Serve("DELETE", path, options, response, [&] { return DoDelete(path, options); });
}

Status FakeKubeClient::Watch(const std::string& path, const std::string& resource_version,
                             const std::function<bool(const WatchEvent&)>& on_event,
                             const std::atomic<bool>& stop, Response* response) {
  *response = Response();
  ApiPath p;
  std::vector<WatchEvent> batch;
  uint64_t cursor = 0, epoch = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back({"WATCH", path, nullptr, resource_version});
    if (Status s; Injected("WATCH", path, &s, response)) return s;
    if (!ParsePath(path, &p) || !p.name.empty()) {
      *response = Error(404, "NotFound", "the server could not find " + path);
      return Status::Ok();
    }
    int64_t from = 0;
    const bool from_now = resource_version.empty() || resource_version == "0";
    try {
      if (!from_now) from = std::stoll(resource_version);
    } catch (const std::exception&) {
      *response = Error(400, "BadRequest", "invalid resource version: " + resource_version);
      return Status::Ok();
    }
    if (!from_now && from < compacted_through_) {
      const std::string message = "too old resource version: " + resource_version + " (" +
                                  std::to_string(compacted_through_) + ")";
      if (gone_before_streaming_) {
        *response = Error(410, "Expired", message);
        return Status::Ok();
      }
      batch.push_back({"ERROR", StatusBody(410, "Expired", message)});
    }
    *response = Success(200, nullptr);
    cursor = next_seq_;
    if (from_now) {
      for (const auto& [key, object] : objects_) {
        if (InCollection(p, key, object)) batch.push_back({"ADDED", object});
      }
    } else {
      for (const Event& event : history_) {
        if (event.resource_version > from) {
          cursor = event.seq;
          break;
        }
      }
    }
    epoch = watch_epoch_;
    ++open_watches_;
    changed_.notify_all();
  }
  bool streaming = true;
  while (streaming) {
    for (const WatchEvent& event : batch) {
      if (!on_event(event) || event.type == "ERROR") streaming = false;
      std::lock_guard<std::mutex> lock(mutex_);
      ++delivered_events_;
      if (!streaming) break;
    }
    batch.clear();
    if (!streaming) break;
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(20), [&] {
      return watch_epoch_ != epoch || (!history_.empty() && history_.back().seq >= cursor);
    });
    if (stop || watch_epoch_ != epoch) break;
    const uint64_t oldest = history_.empty() ? next_seq_ : history_.front().seq;
    if (cursor < oldest) {  // fell behind the retained history
      batch.push_back({"ERROR", StatusBody(410, "Expired", "too old resource version")});
      continue;
    }
    for (const Event& event : history_) {
      if (event.seq < cursor) continue;
      if (event.type == "BOOKMARK" || InCollection(p, event.path, event.object))
        batch.push_back({event.type, event.object});
    }
    cursor = next_seq_;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  --open_watches_;
  changed_.notify_all();
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Test controls.

json FakeKubeClient::Create(const std::string& collection, json object) {
  return Locked([&] { return BodyIfOk(DoCreate(collection, std::move(object))); });
}

json FakeKubeClient::SetStatus(const std::string& path, const json& status) {
  return Locked([&] {
    return BodyIfOk(DoUpdate(path + "/status", {{"status", status}}, false, true));
  });
}

json FakeKubeClient::Modify(const std::string& path, const json& patch) {
  return Locked([&] { return BodyIfOk(DoUpdate(path, patch, true, true)); });
}

json FakeKubeClient::Object(const std::string& path) const {
  return Locked([&] { return BodyIfOk(DoGet(WithoutQuery(path))); });
}

std::vector<json> FakeKubeClient::List(const std::string& collection) const {
  return Locked([&] { return DoGet(collection).body.value("items", json::array()); })
      .get<std::vector<json>>();
}

int FakeKubeClient::CollectGarbage() {
  std::lock_guard<std::mutex> lock(mutex_);
  int collected = 0;
  for (bool again = true; again;) {
    again = false;
    std::set<std::string> uids;
    for (const auto& [key, object] : objects_) uids.insert(object["metadata"].value("uid", ""));
    for (const auto& [key, object] : objects_) {
      const json owners = object["metadata"].value("ownerReferences", json::array());
      bool orphan = !owners.empty();
      for (const auto& owner : owners) orphan = orphan && !uids.count(owner.value("uid", ""));
      if (!orphan) continue;
      DoDelete(key, {{"gracePeriodSeconds", 0}});
      ++collected;
      again = true;
      break;  // objects_ changed under the loop
    }
  }
  return collected;
}

void FakeKubeClient::FailNext(const std::string& method, const std::string& path, int times,
                              int code, json details) {
  Locked([&] { failures_.push_back({method, WithoutQuery(path), times, code, details}); });
}

void FakeKubeClient::CompactHistory() {
  std::lock_guard<std::mutex> lock(mutex_);
  history_.clear();
  compacted_through_ = resource_version_;
}

void FakeKubeClient::set_history_limit(size_t events) {
  std::lock_guard<std::mutex> lock(mutex_);
  history_limit_ = events;
  Trim();
}

void FakeKubeClient::EndWatches() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++watch_epoch_;
  changed_.notify_all();
}

void FakeKubeClient::SendBookmark() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string rv = std::to_string(resource_version_);
  Record("BOOKMARK", "", {{"kind", "Bookmark"}, {"metadata", {{"resourceVersion", rv}}}});
}

std::vector<Request> FakeKubeClient::RequestsTo(const std::string& method,
                                                const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Request> out;
  for (const Request& r : requests_) {
    if (r.method == method && WithoutQuery(r.path).rfind(prefix, 0) == 0) out.push_back(r);
  }
  return out;
}

bool FakeKubeClient::AwaitOpenWatches(int count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return open_watches_ >= count; });
}

bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace kubeps::kube::fake
