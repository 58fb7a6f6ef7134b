// Helpers shared by the Kubernetes client's tests: temporary files,
// environment variables for one scope, and kubeconfig text.
#ifndef KUBEPS_TESTS_UNIT_KUBE_TEST_UTIL_H_
#define KUBEPS_TESTS_UNIT_KUBE_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <cpprest/asyncrt_utils.h>

#include <gtest/gtest.h>

namespace kubeps::kube::testing_util {

// ---------------------------------------------------------------------------
// Helpers.

inline std::string MakeTempDir() {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "kube_client_test.XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string Base64(const std::string& in) {
  return utility::conversions::to_base64(std::vector<unsigned char>(in.begin(), in.end()));
}

// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

inline constexpr char kFakeCa[] =
    "-----BEGIN CERTIFICATE-----\nZmFrZSBjYQ==\n-----END CERTIFICATE-----\n";
inline constexpr char kFakeCert[] =
    "-----BEGIN CERTIFICATE-----\nZmFrZSBjZXJ0\n-----END CERTIFICATE-----\n";
inline constexpr char kFakeKey[] =
    "-----BEGIN PRIVATE KEY-----\nZmFrZSBrZXk=\n-----END PRIVATE KEY-----\n";

// A kubeconfig with one context "ctx" -> cluster "c1", user "u1";
// `cluster` and `user` are the indented bodies of their maps.
inline std::string Kubeconfig(const std::string& cluster, const std::string& user,
                              const std::string& current = "ctx",
                              const std::string& extra_context = "") {
  std::string out = "apiVersion: v1\nkind: Config\n";
  if (!current.empty()) out += "current-context: " + current + "\n";
  out += "clusters:\n- name: other\n  cluster:\n    server: https://other.example:6443\n";
  out += "- name: c1\n  cluster:\n" + cluster;
  out +=
      "contexts:\n- name: ctx\n  context:\n    cluster: c1\n    user: u1\n    namespace: team-a\n";
  out += extra_context;
  out += "users:\n- name: u1\n  user:\n" + user;
  return out;
}

}  // namespace kubeps::kube::testing_util

#endif  // KUBEPS_TESTS_UNIT_KUBE_TEST_UTIL_H_
