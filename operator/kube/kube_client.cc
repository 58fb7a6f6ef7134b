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
#include "operator/kube/kube_client.h"

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cpprest/http_client.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <yaml-cpp/yaml.h>

namespace kubeps::kube {

namespace internal {
// The in-cluster loader with the service-account folder as a parameter, so
// tests can point it at a fake one. Declared here (not in the header) on
// purpose: production code calls LoadInClusterConfig.
Status LoadInClusterConfigFrom(const std::string& service_account_dir, KubeConfig* config);
}  // namespace internal

namespace {

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr auto kRequestTimeout = std::chrono::seconds(30);
// The server ends every watch after this long; the client waits this plus
// kWatchGraceSeconds for the next byte before it declares the stream dead.
constexpr int kWatchServerTimeoutSeconds = 300;
constexpr int kWatchGraceSeconds = 30;
constexpr auto kStopPollInterval = std::chrono::milliseconds(200);
constexpr char kUserAgent[] = "kubeps-operator";

// ---------------------------------------------------------------------------
// Small helpers.

Status ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Error("error reading " + path);
  *out = ss.str();
  return Status::Ok();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string TrimSpace(const std::string& s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A kubeconfig's relative paths are relative to the kubeconfig's folder.
std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  if (path[0] == '~' && (path.size() == 1 || path[1] == '/')) {
    const char* home = std::getenv("HOME");
    if (home != nullptr) return std::string(home) + path.substr(1);
  }
  return base_dir + "/" + path;
}

// Standard base64 (whitespace ignored, padding optional).
bool Base64Decode(const std::string& in, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  unsigned int acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    if (padding) return false;  // data after padding
    int v = value(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<unsigned int>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return bits < 6;  // a single leftover sextet is not valid base64
}


std::string ServerUrl(const std::string& host, const std::string& port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "https://[" + host + "]:" + port;  // IPv6 literal
  }
  return "https://" + host + ":" + port;
}

// ---------------------------------------------------------------------------
// kubeconfig.

// Finds the entry `name` in a kubeconfig list ("clusters", "contexts",
// "users") and returns its inner map (entry[field]).
bool FindNamed(const YAML::Node& root, const char* list, const char* field, const std::string& name,
               YAML::Node* out) {
  const YAML::Node entries = root[list];
  if (!entries || !entries.IsSequence()) return false;
  for (const auto& entry : entries) {
    if (!entry.IsMap()) continue;
    const YAML::Node n = entry["name"];
    if (n && n.IsScalar() && n.as<std::string>() == name) {
      *out = entry[field];
      return true;
    }
  }
  return false;
}

std::string Scalar(const YAML::Node& map, const char* key) {
  if (!map || !map.IsMap()) return "";
  const YAML::Node n = map[key];
  if (!n || !n.IsScalar()) return "";
  return n.as<std::string>();
}

// Reads `<key>-data` (base64) or `<key>` (a file path) into *pem.
Status LoadPemField(const std::string& file, const std::string& where, const std::string& base_dir,
                    const YAML::Node& map, const std::string& key, std::string* pem) {
  const std::string data = Scalar(map, (key + "-data").c_str());
  if (!data.empty()) {
    if (!Base64Decode(data, pem)) {
      return Status::Error(file + ": " + where + "." + key + "-data is not valid base64");
    }
    return Status::Ok();
  }
  const std::string path = Scalar(map, key.c_str());
  if (!path.empty()) {
    const std::string resolved = ResolvePath(base_dir, path);
    Status s = ReadWholeFile(resolved, pem);
    if (!s.ok()) return Status::Error(file + ": " + where + "." + key + ": " + s.message());
  }
  return Status::Ok();
}

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
bool ConfigureSslContext(const TlsMaterial& tls, boost::asio::ssl::context& ctx, std::string* error) {
  ctx.set_options(boost::asio::ssl::context::default_workarounds | boost::asio::ssl::context::no_sslv2 |
                  boost::asio::ssl::context::no_sslv3 | boost::asio::ssl::context::no_tlsv1 |
                  boost::asio::ssl::context::no_tlsv1_1);
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
        verify_error = "server certificate " + CertSubject(cert) + " is not valid for host " + host +
                       " (no matching subjectAltName)";
      }
      return ok;
    });
    boost::system::error_code result = boost::asio::error::timed_out;
    tcp::resolver resolver(io);
    resolver.async_resolve(host, std::to_string(port),
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

nlohmann::json ParseBody(const std::vector<unsigned char>& bytes) {
  if (bytes.empty()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return nullptr;
  return j;
}

// ---------------------------------------------------------------------------
// The client.

class CppRestKubeClient : public KubeClient {
 public:
  CppRestKubeClient(const std::string& server, const TlsMaterial& tls, const std::string& token,
                    const web::http::client::http_client_config& request_config,
                    const web::http::client::http_client_config& watch_config)
      : server_(server),
        tls_(tls),
        token_(token),
        client_(web::uri(server), request_config),
        watch_client_(web::uri(server), watch_config) {
    web::uri u(server);
    host_ = u.host();
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

  Status Watch(const std::string& path, const std::string& resource_version,
               const std::function<bool(const WatchEvent&)>& on_event, const std::atomic<bool>& stop,
               Response* response) override;

 private:
  Status Prepare(const web::http::method& method, const std::string& path, const nlohmann::json* body,
                 const std::string& content_type, web::http::http_request* request) const;
  Status Do(const web::http::method& method, const std::string& path, const nlohmann::json* body,
            const std::string& content_type, Response* response);
  Status TransportError(const std::string& method, const std::string& path, const std::exception& e) const;

  std::string server_;
  TlsMaterial tls_;
  std::string token_;
  std::string host_;
  int port_ = 0;
  bool https_ = false;
  web::http::client::http_client client_;
  web::http::client::http_client watch_client_;
};

Status CppRestKubeClient::Prepare(const web::http::method& method, const std::string& path,
                                  const nlohmann::json* body, const std::string& content_type,
                                  web::http::http_request* request) const {
  if (path.empty() || path[0] != '/') {
    return Status::Error("kube: " + method + " " + path + ": the path must start with '/'");
  }
  try {
    request->set_method(method);
    request->set_request_uri(web::uri(path));
    request->headers().add("Accept", "application/json");
    request->headers().add("User-Agent", kUserAgent);
    if (!token_.empty()) request->headers().add("Authorization", "Bearer " + token_);
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
      if (code.value() > 0 && ERR_GET_LIB(static_cast<unsigned long>(code.value())) == ERR_LIB_SSL) {
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

Status CppRestKubeClient::Do(const web::http::method& method, const std::string& path, const nlohmann::json* body,
                             const std::string& content_type, Response* response) {
  *response = Response();
  web::http::http_request request;
  Status s = Prepare(method, path, body, content_type, &request);
  if (!s.ok()) return s;
  try {
    web::http::http_response r = client_.request(request).get();
    response->code = r.status_code();
    response->body = ParseBody(r.extract_vector().get());
  } catch (const std::exception& e) {
    return TransportError(method, path, e);
  }
  return Status::Ok();
}

Status CppRestKubeClient::Watch(const std::string& path, const std::string& resource_version,
                                const std::function<bool(const WatchEvent&)>& on_event,
                                const std::atomic<bool>& stop, Response* response) {
  *response = Response();
  if (stop.load()) return Status::Ok();
  std::string full = path + (path.find('?') == std::string::npos ? "?" : "&") +
                     "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(kWatchServerTimeoutSeconds);
  if (!resource_version.empty()) full += "&resourceVersion=" + UrlEncodeQueryValue(resource_version);
  const std::string method = web::http::methods::GET;
  web::http::http_request request;
  Status s = Prepare(method, full, nullptr, "", &request);
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
      line = TrimSpace(line);
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
        *error = Status::Error("kube: watch " + path + ": not a watch event: " + line.substr(0, 200));
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

const char* ReasonPhrase(int code) {
  switch (code) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Request Entity Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
  }
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
    const char* reason = ReasonPhrase(code);
    if (*reason != '\0') out += std::string(" ") + reason;
  }
  if (body.is_object()) {
    auto it = body.find("message");
    if (it != body.end() && it->is_string() && !it->get<std::string>().empty()) {
      out += ": " + it->get<std::string>();
    }
  }
  return out;
}

Status LoadKubeconfig(const std::string& path, KubeConfig* config) {
  std::string text;
  Status s = ReadWholeFile(path, &text);
  if (!s.ok()) return Status::Error("kubeconfig: " + s.message());
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const std::exception& e) {
    return Status::Error(path + ": not valid YAML: " + e.what());
  }
  if (!root.IsMap()) return Status::Error(path + ": not a kubeconfig (expected a YAML map)");
  const std::string base_dir = DirName(path);

  try {
    const std::string current = Scalar(root, "current-context");
    if (current.empty()) return Status::Error(path + ": current-context is not set");
    YAML::Node context;
    if (!FindNamed(root, "contexts", "context", current, &context)) {
      return Status::Error(path + ": context \"" + current + "\" (the current-context) is not in contexts");
    }
    const std::string cluster_name = Scalar(context, "cluster");
    if (cluster_name.empty()) return Status::Error(path + ": context \"" + current + "\" has no cluster");
    YAML::Node cluster;
    if (!FindNamed(root, "clusters", "cluster", cluster_name, &cluster) || !cluster.IsMap()) {
      return Status::Error(path + ": cluster \"" + cluster_name + "\" (of context \"" + current +
                           "\") is not in clusters");
    }
    const std::string user_name = Scalar(context, "user");
    YAML::Node user;
    if (!user_name.empty()) {
      if (!FindNamed(root, "users", "user", user_name, &user)) {
        return Status::Error(path + ": user \"" + user_name + "\" (of context \"" + current + "\") is not in users");
      }
    }

    KubeConfig out;
    const std::string cluster_where = "cluster \"" + cluster_name + "\"";
    out.server = Scalar(cluster, "server");
    if (out.server.empty()) return Status::Error(path + ": " + cluster_where + " has no server");
    while (out.server.size() > 1 && out.server.back() == '/') out.server.pop_back();
    const std::string insecure = Scalar(cluster, "insecure-skip-tls-verify");
    out.insecure_skip_tls_verify = insecure == "true" || insecure == "True" || insecure == "TRUE";
    s = LoadPemField(path, cluster_where, base_dir, cluster, "certificate-authority", &out.ca_data);
    if (!s.ok()) return s;

    if (user && user.IsMap()) {
      const std::string user_where = "user \"" + user_name + "\"";
      s = LoadPemField(path, user_where, base_dir, user, "client-certificate", &out.client_cert_data);
      if (!s.ok()) return s;
      s = LoadPemField(path, user_where, base_dir, user, "client-key", &out.client_key_data);
      if (!s.ok()) return s;
      if (out.client_cert_data.empty() != out.client_key_data.empty()) {
        return Status::Error(path + ": " + user_where + " needs both client-certificate and client-key");
      }
      out.token = TrimSpace(Scalar(user, "token"));
      const std::string token_file = Scalar(user, "tokenFile");
      if (out.token.empty() && !token_file.empty()) {
        std::string token;
        s = ReadWholeFile(ResolvePath(base_dir, token_file), &token);
        if (!s.ok()) return Status::Error(path + ": " + user_where + ".tokenFile: " + s.message());
        out.token = TrimSpace(token);
      }
      const bool has_credentials = !out.token.empty() || !out.client_cert_data.empty();
      if (!has_credentials) {
        for (const char* unsupported : {"exec", "auth-provider", "username"}) {
          if (user[unsupported]) {
            return Status::Error(path + ": " + user_where + " uses " + unsupported +
                                 ", which kubeps does not support (use a token, tokenFile or client certificate)");
          }
        }
      }
    }
    const std::string ns = Scalar(context, "namespace");
    if (!ns.empty()) out.namespace_ = ns;
    *config = std::move(out);
  } catch (const std::exception& e) {
    return Status::Error(path + ": malformed kubeconfig: " + e.what());
  }
  return Status::Ok();
}

namespace internal {

Status LoadInClusterConfigFrom(const std::string& service_account_dir, KubeConfig* config) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return Status::Error("in-cluster config: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
  }
  if (port == nullptr || *port == '\0') {
    return Status::Error("in-cluster config: KUBERNETES_SERVICE_PORT is not set");
  }
  KubeConfig out;
  out.server = ServerUrl(host, port);
  std::string token;
  Status s = ReadWholeFile(service_account_dir + "/token", &token);
  if (!s.ok()) return Status::Error("in-cluster config: service account token: " + s.message());
  out.token = TrimSpace(token);
  if (out.token.empty()) return Status::Error("in-cluster config: " + service_account_dir + "/token is empty");
  s = ReadWholeFile(service_account_dir + "/ca.crt", &out.ca_data);
  if (!s.ok()) return Status::Error("in-cluster config: service account CA: " + s.message());
  std::string ns;
  if (ReadWholeFile(service_account_dir + "/namespace", &ns).ok() && !TrimSpace(ns).empty()) {
    out.namespace_ = TrimSpace(ns);
  }
  *config = std::move(out);
  return Status::Ok();
}

}  // namespace internal

Status LoadInClusterConfig(KubeConfig* config) {
  return internal::LoadInClusterConfigFrom(kServiceAccountDir, config);
}

Status LoadConfig(const std::string& kubeconfig_flag, KubeConfig* config) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag, config);

  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    // A list like kubectl's; the first file that exists is used (kubectl
    // would merge them).
    std::stringstream list(env);
    std::string entry;
    while (std::getline(list, entry, ':')) {
      if (!entry.empty() && FileExists(entry)) return LoadKubeconfig(entry, config);
    }
    return Status::Error(std::string("$KUBECONFIG=") + env + ": no such file");
  }

  std::string in_cluster_error;
  const char* service_host = std::getenv("KUBERNETES_SERVICE_HOST");
  if (service_host != nullptr && *service_host != '\0') {
    Status s = LoadInClusterConfig(config);
    if (s.ok()) return s;
    in_cluster_error = s.message();
  }

  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') {
    const std::string path = std::string(home) + "/.kube/config";
    if (FileExists(path)) return LoadKubeconfig(path, config);
  }
  std::string message =
      "no Kubernetes configuration: pass --kubeconfig, set $KUBECONFIG, run in a pod, or create ~/.kube/config";
  if (!in_cluster_error.empty()) message += " (" + in_cluster_error + ")";
  return Status::Error(message);
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
    if (u.host().front() == '[') {
      // cpprestsdk 2.10 hands "[addr]" with its brackets to the resolver,
      // which fails: IPv6 literals cannot be reached, only names.
      return Status::Error("kube: server " + server +
                           ": IPv6 address literals are not supported by the HTTP library; use a DNS name "
                           "(in a pod: https://kubernetes.default.svc)");
    }
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
    out->reset(new CppRestKubeClient(server, tls, config.token, make_config(kRequestTimeout),
                                     make_config(std::chrono::seconds(kWatchServerTimeoutSeconds + kWatchGraceSeconds))));
  } catch (const std::exception& e) {
    return Status::Error("kube: " + server + ": " + e.what());
  }
  return Status::Ok();
}

std::string UrlEncodeQueryValue(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace kubeps::kube
