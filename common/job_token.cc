#include "common/job_token.h"

#include <openssl/crypto.h>

#include "common/logging.h"
#include "common/private_file.h"

namespace kubeps {
namespace {

// Constant time in the contents; the length of a token is not a secret.
bool SameToken(std::string_view a, std::string_view b) {
  return !a.empty() && a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

Status ReadTokenFile(const std::string& path, std::string* token) {
  std::string text;
  if (Status s = ReadPrivateFile(path, "token file", "the job's token", 4096, &text); !s.ok())
    return s;
  std::string line = text.substr(0, text.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) return Status::InvalidArgument("token file " + path + ": it holds no token");
  *token = std::move(line);
  return Status::Ok();
}

std::shared_ptr<JobToken> JobToken::None() { return std::shared_ptr<JobToken>(new JobToken()); }

std::shared_ptr<JobToken> JobToken::Fixed(std::string token) {
  std::shared_ptr<JobToken> t(new JobToken());
  t->enabled_ = !token.empty();
  t->current_ = std::move(token);
  return t;
}

Status JobToken::FromFile(const std::string& path, std::shared_ptr<JobToken>* out, Timing timing) {
  std::string token;
  if (Status s = ReadTokenFile(path, &token); !s.ok()) return s;
  std::shared_ptr<JobToken> t(new JobToken());
  t->enabled_ = true;
  t->path_ = path;
  t->timing_ = timing;
  t->current_ = std::move(token);
  t->read_at_ = Clock::now();
  *out = std::move(t);
  return Status::Ok();
}

void JobToken::RefreshLocked(Clock::time_point now) {
  if (path_.empty() || now - read_at_ < timing_.reread_after) return;
  read_at_ = now;
  std::string token;
  if (Status s = ReadTokenFile(path_, &token); !s.ok()) {
    // Once per distinct problem, not once a second.
    if (s.message() != last_error_) KLOG_ERROR << "keeping the job's token: " << s.message();
    last_error_ = s.message();
    return;
  }
  last_error_.clear();
  if (token == current_) return;
  previous_ = std::move(current_);
  current_ = std::move(token);
  changed_at_ = now;
  KLOG_INFO << "the job's token changed (" << path_ << "); the previous one stays valid for "
            << std::chrono::duration_cast<std::chrono::seconds>(timing_.rotation_grace).count()
            << " s";
}

bool JobToken::PreviousValidLocked(Clock::time_point now) const {
  return !previous_.empty() && now - changed_at_ < timing_.rotation_grace;
}

std::vector<std::string> JobToken::Presented() {
  if (!enabled_) return {};
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  RefreshLocked(now);
  std::vector<std::string> tokens{current_};
  if (PreviousValidLocked(now)) tokens.push_back(previous_);
  return tokens;
}

bool JobToken::Accepts(const std::vector<std::string_view>& presented) {
  if (!enabled_) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  RefreshLocked(now);
  const bool previous_valid = PreviousValidLocked(now);
  bool accepted = false;
  for (std::string_view p : presented) {
    // No early exit: every presented value is compared with both.
    accepted |= SameToken(p, current_);
    accepted |= previous_valid && SameToken(p, previous_);
  }
  return accepted;
}

}  // namespace kubeps
