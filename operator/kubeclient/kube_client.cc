// The Kubernetes REST client (kube_client.h) on cpprestsdk's asio backend.
//
// TLS: the kubeconfig's CA replaces the system trust store (as kubectl
// does); the server is checked against the host of `server` with boost's
// RFC 2818 verification, which matches IP subjectAltNames for IP hosts and
// DNS names otherwise. Client certificates and keys are loaded from memory
// into every connection's ssl::context.
//
// Watches read the chunked body as it arrives: cpprestsdk completes the
// request at the headers and feeds each chunk into a producer/consumer
// buffer, which is drained here line by line (one JSON event per line).
// cpprestsdk's timeout is an idle timeout (reset on every chunk), so a watch
// asks the server to end the stream after kWatchServerTimeoutSeconds and
// gives up on a silent connection a little after that.
#include "operator/kubeclient/kube_client.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "operator/kubeclient/bearer_token.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <cpprest/http_client.h>
#include <cpprest/uri_builder.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <yaml-cpp/yaml.h>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

namespace kubeps::kube {

namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(30);
// The server ends every watch after this long; the client waits this plus
// kWatchGraceSeconds for the next byte before it declares the stream dead.
constexpr int kWatchServerTimeoutSeconds = 300;
constexpr int kWatchGraceSeconds = 30;
constexpr auto kStopPollInterval = std::chrono::milliseconds(200);
// The wait before a throttled request is sent again: the server's
// Retry-After, but never less than this (a "Retry-After: 0" must not make
// the operator spin against a server that is already overloaded), and never
// more than kThrottleWaitMax (a reconcile worker waits here).
constexpr auto kThrottleWaitMin = std::chrono::milliseconds(200);
constexpr auto kThrottleWaitMax = std::chrono::seconds(60);
// Without a Retry-After (a proxy's 429) the wait is client-go's first backoff.
constexpr auto kThrottleWaitDefault = std::chrono::seconds(1);
constexpr char kUserAgent[] = "kubeps-operator";

// ---------------------------------------------------------------------------
// TLS.

struct TlsMaterial {
  std::string ca_pem;    // empty: the system trust store
  std::string cert_pem;  // client certificate chain, or empty
  std::string key_pem;
};

std::string OpenSslErrors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// Applies the CA and client certificate to a fresh ssl::context. Returns
// false with *error set when the PEM data is unusable.
bool ConfigureSslContext(const TlsMaterial& tls, boost::asio::ssl::context& ctx,
                         std::string* error) {
  ctx.set_options(boost::asio::ssl::context::default_workarounds |
                  boost::asio::ssl::context::no_sslv2 | boost::asio::ssl::context::no_sslv3 |
                  boost::asio::ssl::context::no_tlsv1 | boost::asio::ssl::context::no_tlsv1_1);
  ERR_clear_error();
  if (!tls.ca_pem.empty()) {
    // Trust exactly the kubeconfig's CA bundle, not the system store.
    X509_STORE* store = X509_STORE_new();
    BIO* bio = BIO_new_mem_buf(tls.ca_pem.data(), static_cast<int>(tls.ca_pem.size()));
    int count = 0;
    while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
      X509_STORE_add_cert(store, cert);
      X509_free(cert);
      ++count;
    }
    BIO_free(bio);
    ERR_clear_error();  // the loop ends on a "no start line" error
    if (count == 0) {
      X509_STORE_free(store);
      *error = "certificate-authority holds no PEM certificate";
      return false;
    }
    SSL_CTX_set_cert_store(ctx.native_handle(), store);  // takes ownership
  }
  if (!tls.cert_pem.empty() || !tls.key_pem.empty()) {
    if (tls.cert_pem.empty() || tls.key_pem.empty()) {
      *error = "client-certificate and client-key must be given together";
      return false;
    }
    boost::system::error_code ec;
    ctx.use_certificate_chain(boost::asio::buffer(tls.cert_pem), ec);
    if (ec) {
      *error = "client-certificate: " + ec.message();
      return false;
    }
    ctx.use_private_key(boost::asio::buffer(tls.key_pem), boost::asio::ssl::context::pem, ec);
    if (ec) {
      *error = "client-key: " + ec.message();
      return false;
    }
    if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
      *error = "client-key does not match client-certificate (" + OpenSslErrors() + ")";
      return false;
    }
  }
  return true;
}

std::string CertSubject(X509* cert) {
  if (cert == nullptr) return "?";
  char buf[512];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return buf;
}

// cpprestsdk reports a failed handshake as "Error in SSL handshake" and
// nothing more. This repeats the handshake alone, with the same trust and
// client certificate, to say why: the verification error, the host
// mismatch, or OpenSSL's alert.
std::string DiagnoseTls(const TlsMaterial& tls, const std::string& host, int port) {
  namespace ssl = boost::asio::ssl;
  using boost::asio::ip::tcp;
  try {
    boost::asio::io_context io;
    ssl::context ctx(ssl::context::tls_client);
    ctx.set_default_verify_paths();
    std::string error;
    if (!ConfigureSslContext(tls, ctx, &error)) return error;
    ssl::stream<tcp::socket> stream(io, ctx);
    SSL_set_tlsext_host_name(stream.native_handle(), host.c_str());
    std::string verify_error;
    stream.set_verify_mode(ssl::verify_peer);
    stream.set_verify_callback([&](bool preverified, ssl::verify_context& vc) {
      X509_STORE_CTX* store_ctx = vc.native_handle();
      X509* cert = X509_STORE_CTX_get_current_cert(store_ctx);
      if (!preverified) {
        if (verify_error.empty()) {
          verify_error = std::string("certificate verify failed: ") +
                         X509_verify_cert_error_string(X509_STORE_CTX_get_error(store_ctx)) + " (" +
                         CertSubject(cert) + "); is certificate-authority the cluster's CA?";
        }
        return false;
      }
      bool ok = ssl::rfc2818_verification(host)(preverified, vc);
      if (!ok && verify_error.empty()) {
        verify_error = "server certificate " + CertSubject(cert) + " is not valid for host " +
                       host + " (no matching subjectAltName)";
      }
      return ok;
    });
    boost::system::error_code result = boost::asio::error::timed_out;
    tcp::resolver resolver(io);
    resolver.async_resolve(
        host, std::to_string(port),
        [&](const boost::system::error_code& ec, tcp::resolver::results_type endpoints) {
          if (ec) {
            result = ec;
            return;
          }
          boost::asio::async_connect(
              stream.lowest_layer(), endpoints,
              [&](const boost::system::error_code& ec2, const tcp::endpoint&) {
                if (ec2) {
                  result = ec2;
                  return;
                }
                stream.async_handshake(ssl::stream_base::client,
                                       [&](const boost::system::error_code& ec3) { result = ec3; });
              });
        });
    io.run_for(std::chrono::seconds(5));
    if (!verify_error.empty()) return verify_error;
    if (result) return "TLS handshake: " + result.message();
    return "";  // the handshake worked this time
  } catch (const std::exception& e) {
    return std::string("TLS diagnosis failed: ") + e.what();
  }
}

// ---------------------------------------------------------------------------
// Waiting on pplx tasks without giving up `stop`.

struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

// Waits for `task`, checking `stop` every kStopPollInterval. False when stop
// became true first. `stop` may be null (wait unconditionally).
template <typename T>
bool WaitOrStop(const pplx::task<T>& task, const std::atomic<bool>* stop) {
  if (task.is_done()) return true;
  if (stop == nullptr) {
    task.wait();
    return true;
  }
  auto signal = std::make_shared<Signal>();
  task.then([signal](pplx::task<T> done) {
    // Observe a failure here: pplx aborts the process when a task's
    // exception is never looked at (we may have stopped waiting for it).
    try {
      done.wait();
    } catch (...) {
    }
    std::lock_guard<std::mutex> lock(signal->mu);
    signal->done = true;
    signal->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(signal->mu);
  while (!signal->done) {
    if (stop->load()) return false;
    signal->cv.wait_for(lock, kStopPollInterval);
  }
  return true;
}

// Retry-After in whole seconds (its HTTP-date form is not used by the API
// server); -1 when absent or unreadable.
int RetryAfterSeconds(const web::http::http_headers& headers) {
  auto it = headers.find("Retry-After");
  if (it == headers.end()) return -1;
  const std::string value = utility::conversions::to_utf8string(it->second);
  char* end = nullptr;
  const long seconds = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || seconds < 0) return -1;
  return static_cast<int>(std::min<long>(seconds, 24 * 3600));
}

std::chrono::milliseconds ThrottleWait(int retry_after_seconds) {
  if (retry_after_seconds < 0) return kThrottleWaitDefault;
  return std::clamp<std::chrono::milliseconds>(std::chrono::seconds(retry_after_seconds),
                                               kThrottleWaitMin, kThrottleWaitMax);
}

nlohmann::json ParseBody(const std::vector<unsigned char>& bytes) {
  if (bytes.empty()) return nullptr;
  nlohmann::json j =
      nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return nullptr;
  return j;
}

// ---------------------------------------------------------------------------
// The client.

// The server's URI as cpprestsdk's asio client can reach it. An IPv6 literal
// ("https://[fd00::1]:443", what the in-cluster config of a single-stack
// IPv6 cluster gives) keeps its brackets in web::uri::host(), and the client
// hands that host as it is to the resolver, which knows no "[fd00::1]". Built
// from its parts, the URI holds the bare address: the resolver takes it as
// a number, and the certificate is checked against that address (boost's
// RFC 2818 check matches an IP host to IP subjectAltNames). The one cost:
// the client writes the Host header from that bare host ("fd00::1:443");
// the API server (Go's net/http) accepts it and does not route by Host. A
// Host header of our own would not do: cpprestsdk would then check the
// certificate against it, brackets and port included.
web::uri ReachableUri(const std::string& server) {
  web::uri parsed(server);
  if (!IsIpv6Literal(parsed.host())) return parsed;
  web::uri_builder bare(parsed);
  bare.set_host(Unbracketed(parsed.host()));
  return bare.to_uri();
}

class CppRestKubeClient : public KubeClient {
 public:
  CppRestKubeClient(const std::string& server, const TlsMaterial& tls, const KubeConfig& config,
                    const web::http::client::http_client_config& request_config,
                    const web::http::client::http_client_config& watch_config)
      : server_(server),
        tls_(tls),
        token_(config.token, config.token_file),
        client_(ReachableUri(server), request_config),
        watch_client_(ReachableUri(server), watch_config) {
    web::uri u(server);
    host_ = Unbracketed(u.host());
    port_ = u.port() > 0 ? u.port() : (u.scheme() == "https" ? 443 : 80);
    https_ = u.scheme() == "https";
  }

  Status Get(const std::string& path, Response* response) override {
    return Do(web::http::methods::GET, path, nullptr, "", response);
  }
  Status Post(const std::string& path, const nlohmann::json& body, Response* response) override {
    return Do(web::http::methods::POST, path, &body, "application/json", response);
  }
  Status Put(const std::string& path, const nlohmann::json& body, Response* response) override {
    return Do(web::http::methods::PUT, path, &body, "application/json", response);
  }
  Status Patch(const std::string& path, const nlohmann::json& body, Response* response) override {
    return Do(web::http::methods::PATCH, path, &body, "application/merge-patch+json", response);
  }
  Status Delete(const std::string& path, Response* response) override {
    return Do(web::http::methods::DEL, path, nullptr, "", response);
  }
  Status DeleteWithOptions(const std::string& path, const nlohmann::json& options,
                           Response* response) override {
    return Do(web::http::methods::DEL, path, &options, "application/json", response);
  }

  Status Watch(const std::string& path, const std::string& resource_version,
               const std::function<bool(const WatchEvent&)>& on_event,
               const std::atomic<bool>& stop, Response* response) override;

  bool credentials_refused() const override { return refused_.load(); }

 private:
  // A 401 means the token expired or was revoked: read the file again, and
  // say whether the request is worth repeating. Any other answer clears the
  // refusal, so /readyz turns red only while the API server refuses us.
  bool RetryAfterRefusal(int code, const std::string& sent_token);
  Status Prepare(const web::http::method& method, const std::string& path,
                 const nlohmann::json* body, const std::string& content_type,
                 web::http::http_request* request, std::string* sent_token);
  Status Do(const web::http::method& method, const std::string& path, const nlohmann::json* body,
            const std::string& content_type, Response* response);
  Status TransportError(const std::string& method, const std::string& path,
                        const std::exception& e) const;

  std::string server_;
  TlsMaterial tls_;
  BearerToken token_;
  std::atomic<bool> refused_{false};
  std::string host_;
  int port_ = 0;
  bool https_ = false;
  web::http::client::http_client client_;
  web::http::client::http_client watch_client_;
};

Status CppRestKubeClient::Prepare(const web::http::method& method, const std::string& path,
                                  const nlohmann::json* body, const std::string& content_type,
                                  web::http::http_request* request, std::string* sent_token) {
  if (path.empty() || path[0] != '/') {
    return Status::Error("kube: " + method + " " + path + ": the path must start with '/'");
  }
  try {
    request->set_method(method);
    request->set_request_uri(web::uri(path));
    request->headers().add("Accept", "application/json");
    request->headers().add("User-Agent", kUserAgent);
    *sent_token = token_.Get();
    if (!sent_token->empty()) request->headers().add("Authorization", "Bearer " + *sent_token);
    if (body != nullptr) request->set_body(body->dump(), content_type);
  } catch (const std::exception& e) {
    return Status::Error("kube: " + method + " " + path + ": " + e.what());
  }
  return Status::Ok();
}

Status CppRestKubeClient::TransportError(const std::string& method, const std::string& path,
                                         const std::exception& e) const {
  const std::string what = e.what();
  std::string detail;
  if (const auto* he = dynamic_cast<const web::http::http_exception*>(&e)) {
    const std::error_code& code = he->error_code();
    if (code) {
      // TLS failures arrive as OpenSSL error numbers in the system category
      // ("Unknown error 167772294"); OpenSSL can name them.
      const char* tls_reason = nullptr;
      if (code.value() > 0 &&
          ERR_GET_LIB(static_cast<unsigned long>(code.value())) == ERR_LIB_SSL) {
        tls_reason = ERR_reason_error_string(static_cast<unsigned long>(code.value()));
      }
      detail = tls_reason != nullptr ? std::string("TLS: ") + tls_reason : code.message();
      // cpprestsdk reports a refused connection as "host unreachable".
      if (what.find("Failed to connect") != std::string::npos &&
          code == std::make_error_code(std::errc::host_unreachable)) {
        detail = "connection refused or host unreachable";
      }
    }
  }
  if (https_ && what.find("SSL") != std::string::npos) {
    const std::string why = DiagnoseTls(tls_, host_, port_);
    if (!why.empty()) detail = why;
  }
  std::string message = "kube: " + method + " " + server_ + path + ": " + what;
  if (!detail.empty() && what.find(detail) == std::string::npos) message += ": " + detail;
  return Status::Error(message);
}

Status CppRestKubeClient::Do(const web::http::method& method, const std::string& path,
                             const nlohmann::json* body, const std::string& content_type,
                             Response* response) {
  bool reloaded_token = false;
  int throttled = 0;
  for (;;) {
    *response = Response();
    web::http::http_request request;
    std::string sent_token;
    Status s = Prepare(method, path, body, content_type, &request, &sent_token);
    if (!s.ok()) return s;
    try {
      web::http::http_response r = client_.request(request).get();
      response->code = r.status_code();
      response->reason = utility::conversions::to_utf8string(r.reason_phrase());
      response->retry_after_seconds = RetryAfterSeconds(r.headers());
      response->body = ParseBody(r.extract_vector().get());
    } catch (const std::exception& e) {
      return TransportError(method, path, e);
    }
    if (response->code == 429 || (response->code >= 500 && response->retry_after_seconds >= 0)) {
      // The server did nothing with the request (a write included), or, for
      // a 5xx, asks to be asked again: client-go retries both (checkWait),
      // and waiting is what the server asked for. A write that the 5xx hid
      // having done comes back 409 or is recomputed by the next reconcile.
      if (throttled == kMaxThrottledRetries) {
        KLOG_ERROR << "kube: " << method << " " << path << ": still " << response->Describe()
                   << " after " << kMaxThrottledRetries << " retries";
        return Status::Ok();
      }
      ++throttled;
      const auto wait = ThrottleWait(response->retry_after_seconds);
      KLOG_INFO << "kube: " << method << " " << path << ": " << response->Describe() << "; retry "
                << throttled << " of " << kMaxThrottledRetries << " in " << wait.count() << " ms";
      std::this_thread::sleep_for(wait);
      continue;
    }
    if (reloaded_token || !RetryAfterRefusal(response->code, sent_token)) return Status::Ok();
    reloaded_token = true;
  }
}

bool CppRestKubeClient::RetryAfterRefusal(int code, const std::string& sent_token) {
  if (code != 401) {
    refused_.store(false);
    return false;
  }
  if (token_.ReloadAfterRefusal(sent_token)) return true;
  if (!refused_.exchange(true)) {
    KLOG_ERROR << "kube: the API server refuses this operator's credentials (401 Unauthorized)"
               << (token_.file().empty() ? std::string()
                                         : "; " + token_.file() + " holds no newer token");
  }
  return false;
}

Status CppRestKubeClient::Watch(const std::string& path, const std::string& resource_version,
                                const std::function<bool(const WatchEvent&)>& on_event,
                                const std::atomic<bool>& stop, Response* response) {
  *response = Response();
  if (stop.load()) return Status::Ok();
  std::string full = path + (path.find('?') == std::string::npos ? "?" : "&") +
                     "watch=1&allowWatchBookmarks=true&timeoutSeconds=" +
                     std::to_string(kWatchServerTimeoutSeconds);
  if (!resource_version.empty())
    full += "&resourceVersion=" + web::uri::encode_data_string(resource_version);
  const std::string method = web::http::methods::GET;
  web::http::http_request request;
  std::string sent_token;
  Status s = Prepare(method, full, nullptr, "", &request, &sent_token);
  if (!s.ok()) return s;

  // Aborts the request (closes the connection) on every early return.
  pplx::cancellation_token_source cts;
  struct CancelOnExit {
    pplx::cancellation_token_source& cts;
    bool armed = true;
    ~CancelOnExit() {
      if (armed) cts.cancel();
    }
  } cancel_on_exit{cts};

  web::http::http_response r;
  try {
    pplx::task<web::http::http_response> headers = watch_client_.request(request, cts.get_token());
    if (!WaitOrStop(headers, &stop)) return Status::Ok();
    r = headers.get();
  } catch (const std::exception& e) {
    if (stop.load()) return Status::Ok();
    return TransportError(method, full, e);
  }
  response->code = r.status_code();
  response->reason = utility::conversions::to_utf8string(r.reason_phrase());
  response->retry_after_seconds = RetryAfterSeconds(r.headers());
  // A refused watch is not repeated here: the informer lists again, and that
  // request carries the token this re-read found.
  RetryAfterRefusal(response->code, sent_token);
  if (!response->ok()) {
    try {
      pplx::task<std::vector<unsigned char>> body = r.extract_vector();
      if (!WaitOrStop(body, &stop)) return Status::Ok();
      response->body = ParseBody(body.get());
    } catch (const std::exception&) {
      // The code says enough; the body is a bonus.
    }
    return Status::Ok();
  }

  concurrency::streams::streambuf<uint8_t> buf = r.body().streambuf();
  std::string pending;  // bytes of the line not yet complete
  std::vector<uint8_t> chunk(64 * 1024);

  // Hands every complete line in `pending` to on_event. False: stop now.
  auto deliver = [&](bool flush, Status* error) -> bool {
    size_t start = 0;
    for (;;) {
      size_t nl = pending.find('\n', start);
      std::string line;
      if (nl == std::string::npos) {
        if (!flush || start >= pending.size()) break;
        line = pending.substr(start);
        start = pending.size();
      } else {
        line = pending.substr(start, nl - start);
        start = nl + 1;
      }
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
        *error =
            Status::Error("kube: watch " + path + ": not a watch event: " + line.substr(0, 200));
        return false;
      }
      WatchEvent event;
      event.type = j["type"].get<std::string>();
      if (j.contains("object")) event.object = std::move(j["object"]);
      if (!on_event(event) || stop.load()) {
        pending.clear();
        return false;
      }
    }
    pending.erase(0, start);
    return true;
  };

  for (;;) {
    if (stop.load()) return Status::Ok();
    try {
      const size_t avail = buf.in_avail();
      if (avail > 0) {
        const size_t n = buf.getn(chunk.data(), std::min(avail, chunk.size())).get();
        pending.append(reinterpret_cast<const char*>(chunk.data()), n);
        Status error;
        if (!deliver(false, &error)) return error;
        continue;
      }
      // Nothing buffered: wait for the next byte (or the end).
      using Traits = concurrency::streams::streambuf<uint8_t>::traits;
      pplx::task<Traits::int_type> next = buf.getc();
      if (!WaitOrStop(next, &stop)) return Status::Ok();
      if (next.get() == Traits::eof()) break;
    } catch (const std::exception& e) {
      if (stop.load()) return Status::Ok();
      return TransportError(method, full, e);
    }
  }
  // The server ended the stream: a clean end, or did the transfer fail?
  try {
    pplx::task<web::http::http_response> done = r.content_ready();
    if (!WaitOrStop(done, &stop)) return Status::Ok();
    done.get();
  } catch (const std::exception& e) {
    if (stop.load()) return Status::Ok();
    return TransportError(method, full, e);
  }
  cancel_on_exit.armed = false;  // finished cleanly: the connection may be reused
  Status error;
  deliver(true, &error);
  return error;
}

}  // namespace

// ---------------------------------------------------------------------------
// Public functions.

std::string Response::Describe() const {
  std::string out;
  if (code == 0) {
    out = "no response";
  } else {
    out = std::to_string(code);
    if (!reason.empty()) out += " " + reason;
  }
  if (body.is_object()) {
    auto it = body.find("message");
    if (it != body.end() && it->is_string() && !it->get<std::string>().empty()) {
      out += ": " + it->get<std::string>();
    }
  }
  return out;
}

Status KubeClient::Create(const KubeConfig& config, std::unique_ptr<KubeClient>* out) {
  if (config.server.empty()) return Status::Error("kube: no API server address");
  std::string server = config.server;
  while (server.size() > 1 && server.back() == '/') server.pop_back();
  try {
    web::uri u(server);
    if (u.scheme() != "https" && u.scheme() != "http") {
      return Status::Error("kube: server " + server + ": the scheme must be https or http");
    }
    if (u.host().empty()) return Status::Error("kube: server " + server + ": no host");
  } catch (const std::exception& e) {
    return Status::Error("kube: server " + server + ": " + e.what());
  }

  TlsMaterial tls{config.ca_data, config.client_cert_data, config.client_key_data};
  {
    // Check the PEM data now, so a bad certificate is an error here rather
    // than a failing connection later.
    boost::asio::ssl::context probe(boost::asio::ssl::context::tls_client);
    std::string error;
    if (!ConfigureSslContext(tls, probe, &error)) return Status::Error("kube: " + error);
  }

  auto make_config = [&](std::chrono::seconds timeout) {
    web::http::client::http_client_config c;
    c.set_timeout(timeout);
    c.set_validate_certificates(!config.insecure_skip_tls_verify);
    c.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
      std::string ignored;  // checked in Create
      ConfigureSslContext(tls, ctx, &ignored);
    });
    return c;
  };
  try {
    out->reset(new CppRestKubeClient(
        server, tls, config, make_config(kRequestTimeout),
        make_config(std::chrono::seconds(kWatchServerTimeoutSeconds + kWatchGraceSeconds))));
  } catch (const std::exception& e) {
    return Status::Error("kube: " + server + ": " + e.what());
  }
  return Status::Ok();
}

}  // namespace kubeps::kube
