#include "operator/kubeclient/bearer_token.h"

#include <fstream>
#include <sstream>
#include <utility>

namespace kubeps::kube {

Status ReadTokenFile(const std::string& path, std::string* token) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("cannot read " + path);
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) return Status::Error("error reading " + path);
  const std::string text = content.str();
  const char* space = " \t\r\n";
  const size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return Status::Error(path + " is empty");
  *token = text.substr(begin, text.find_last_not_of(space) - begin + 1);
  return Status::Ok();
}

BearerToken::BearerToken(std::string token, std::string file, Clock::duration reread_period)
    : file_(std::move(file)),
      period_(reread_period),
      token_(std::move(token)),
      last_read_(Clock::now()) {}

std::string BearerToken::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_.empty() && Clock::now() - last_read_ >= period_) ReadLocked();
  return token_;
}

bool BearerToken::ReloadAfterRefusal(const std::string& refused) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_.empty()) ReadLocked();
  return token_ != refused;
}

void BearerToken::ReadLocked() {
  last_read_ = Clock::now();
  std::string fresh;
  if (ReadTokenFile(file_, &fresh).ok()) token_ = std::move(fresh);
}

}  // namespace kubeps::kube
