// Where the API server is and how to prove who we are: kubeconfig files
// and the in-cluster service account (the loaders declared in
// kube_client.h).
#include <sys/stat.h>

#include <algorithm>
#include <cctype>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <cpprest/asyncrt_utils.h>
#include <yaml-cpp/yaml.h>

#include "common/host_port.h"
#include "operator/kubeclient/bearer_token.h"
#include "operator/kubeclient/kube_client.h"

namespace kubeps::kube {

namespace internal {
// The in-cluster loader with the service-account folder as a parameter, so
// tests can point it at a fake one. Declared here (not in the header) on
// purpose: production code calls LoadInClusterConfig.
Status LoadInClusterConfigFrom(const std::string& service_account_dir, KubeConfig* config);
}  // namespace internal

namespace {

constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

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

// Standard base64 through cpprestsdk; line breaks and spaces (kubeconfigs
// written by hand wrap long values) are dropped first.
bool Base64Decode(std::string in, std::string* out) {
  in.erase(std::remove_if(in.begin(), in.end(), [](unsigned char c) { return std::isspace(c); }),
           in.end());
  try {
    std::vector<unsigned char> bytes = utility::conversions::from_base64(in);
    out->assign(bytes.begin(), bytes.end());
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// KUBERNETES_SERVICE_HOST is a bare address: "fd00::1" on an IPv6 cluster,
// which a URL writes in brackets.
std::string ServerUrl(const std::string& host, const std::string& port) {
  return "https://" + JoinHostPort(host, port);
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

}  // namespace

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
      return Status::Error(path + ": context \"" + current +
                           "\" (the current-context) is not in contexts");
    }
    const std::string cluster_name = Scalar(context, "cluster");
    if (cluster_name.empty())
      return Status::Error(path + ": context \"" + current + "\" has no cluster");
    YAML::Node cluster;
    if (!FindNamed(root, "clusters", "cluster", cluster_name, &cluster) || !cluster.IsMap()) {
      return Status::Error(path + ": cluster \"" + cluster_name + "\" (of context \"" + current +
                           "\") is not in clusters");
    }
    const std::string user_name = Scalar(context, "user");
    YAML::Node user;
    if (!user_name.empty()) {
      if (!FindNamed(root, "users", "user", user_name, &user)) {
        return Status::Error(path + ": user \"" + user_name + "\" (of context \"" + current +
                             "\") is not in users");
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
      s = LoadPemField(path, user_where, base_dir, user, "client-certificate",
                       &out.client_cert_data);
      if (!s.ok()) return s;
      s = LoadPemField(path, user_where, base_dir, user, "client-key", &out.client_key_data);
      if (!s.ok()) return s;
      if (out.client_cert_data.empty() != out.client_key_data.empty()) {
        return Status::Error(path + ": " + user_where +
                             " needs both client-certificate and client-key");
      }
      out.token = TrimSpace(Scalar(user, "token"));
      const std::string token_file = Scalar(user, "tokenFile");
      if (out.token.empty() && !token_file.empty()) {
        out.token_file = ResolvePath(base_dir, token_file);
        s = ReadTokenFile(out.token_file, &out.token);
        if (!s.ok()) return Status::Error(path + ": " + user_where + ".tokenFile: " + s.message());
      }
      const bool has_credentials = !out.token.empty() || !out.client_cert_data.empty();
      if (!has_credentials) {
        for (const char* unsupported : {"exec", "auth-provider", "username"}) {
          if (user[unsupported]) {
            return Status::Error(
                path + ": " + user_where + " uses " + unsupported +
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
    return Status::Error(
        "in-cluster config: KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
  }
  if (port == nullptr || *port == '\0') {
    return Status::Error("in-cluster config: KUBERNETES_SERVICE_PORT is not set");
  }
  KubeConfig out;
  out.server = ServerUrl(host, port);
  out.token_file = service_account_dir + "/token";
  Status s = ReadTokenFile(out.token_file, &out.token);
  if (!s.ok()) return Status::Error("in-cluster config: service account token: " + s.message());
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
      "no Kubernetes configuration: pass --kubeconfig, set $KUBECONFIG, run in a pod, or create "
      "~/.kube/config";
  if (!in_cluster_error.empty()) message += " (" + in_cluster_error + ")";
  return Status::Error(message);
}

}  // namespace kubeps::kube
