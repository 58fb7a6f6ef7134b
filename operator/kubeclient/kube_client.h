// A small Kubernetes REST client (cpprestsdk): what kubeps-operator needs
// and nothing more. JSON in, JSON out; paths are API paths such as
// "/api/v1/namespaces/default/pods" or
// "/apis/kubeps.io/v1alpha1/trainingjobs".
//
// Implementations are thread-safe: the informers, the lease and the reconcile
// worker share one client.
#ifndef KUBEPS_OPERATOR_KUBECLIENT_KUBE_CLIENT_H_
#define KUBEPS_OPERATOR_KUBECLIENT_KUBE_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kubeps::kube {

// Where the API server is and how to prove who we are.
struct KubeConfig {
  std::string server;            // https://host:port
  std::string ca_data;           // PEM; empty = system trust store
  std::string token;             // bearer token (re-read from token_file as it rotates), or
  std::string token_file;        // where the token came from: tokenFile or in-cluster
  std::string client_cert_data;  // PEM client certificate and
  std::string client_key_data;   // its PEM key
  bool insecure_skip_tls_verify = false;
  std::string namespace_ = "default";  // of the current context
};

// In-cluster: the service account's token and CA, KUBERNETES_SERVICE_HOST
// and _PORT. Errors name what is missing.
Status LoadInClusterConfig(KubeConfig* config);
// A kubeconfig file's current context (certificate-authority[-data],
// client-certificate[-data], client-key[-data], token, tokenFile).
Status LoadKubeconfig(const std::string& path, KubeConfig* config);
// --kubeconfig, else $KUBECONFIG, else in-cluster, else ~/.kube/config.
Status LoadConfig(const std::string& kubeconfig_flag, KubeConfig* config);

// The result of one request: HTTP status and parsed body (null when the
// body is not JSON). ok() for 2xx.
struct Response {
  int code = 0;
  std::string reason;  // the server's reason phrase, e.g. "Conflict"
  nlohmann::json body;
  // The Retry-After header in seconds (429 Too Many Requests, some 5xx); -1
  // when there is none.
  int retry_after_seconds = -1;
  bool ok() const { return code >= 200 && code < 300; }
  // "409 Conflict: <message from the Status object>"
  std::string Describe() const;
};

// One event of a watch stream.
struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

// client-go's default (rest.Request maxRetries).
constexpr int kMaxThrottledRetries = 10;

class KubeClient {
 public:
  static Status Create(const KubeConfig& config, std::unique_ptr<KubeClient>* out);
  virtual ~KubeClient() = default;

  // Transport failures (connection refused, TLS) are a non-ok Status; HTTP
  // errors are a Response with its code. A 429 Too Many Requests (API
  // Priority and Fairness turning the request away before doing anything)
  // is waited out and sent again, as client-go does: after the server's
  // Retry-After, up to kMaxThrottledRetries times; only then is the 429
  // returned.
  virtual Status Get(const std::string& path, Response* response) = 0;
  virtual Status Post(const std::string& path, const nlohmann::json& body, Response* response) = 0;
  virtual Status Put(const std::string& path, const nlohmann::json& body, Response* response) = 0;
  // JSON merge patch (application/merge-patch+json).
  virtual Status Patch(const std::string& path, const nlohmann::json& body, Response* response) = 0;
  virtual Status Delete(const std::string& path, Response* response) = 0;
  // DELETE with a DeleteOptions body (gracePeriodSeconds, preconditions).
  // Test fakes that take no options may leave it: it deletes as Delete does.
  virtual Status DeleteWithOptions(const std::string& path, const nlohmann::json& options,
                                   Response* response) {
    (void)options;
    return Delete(path, response);
  }

  // Streams `path` with ?watch=1&resourceVersion=...&allowWatchBookmarks=true
  // (query is appended to path's own), calling on_event for every event,
  // until the server ends the stream, `stop` becomes true, or on_event
  // returns false. An HTTP error before streaming (e.g. 410) is returned in
  // *response with a non-2xx code.
  virtual Status Watch(const std::string& path, const std::string& resource_version,
                       const std::function<bool(const WatchEvent&)>& on_event,
                       const std::atomic<bool>& stop, Response* response) = 0;

  // True while the API server answers 401 even to a freshly re-read token:
  // every call fails, so the operator must not report itself ready.
  virtual bool credentials_refused() const { return false; }
};

// DeleteOptions for DeleteWithOptions that delete the object of `uid` only:
// one made again under its name meanwhile is left alone (409).
inline nlohmann::json DeleteOnlyUid(const std::string& uid) {
  return {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"preconditions", {{"uid", uid}}}};
}

}  // namespace kubeps::kube

#endif  // KUBEPS_OPERATOR_KUBECLIENT_KUBE_CLIENT_H_
