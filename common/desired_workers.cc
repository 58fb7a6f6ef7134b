#include "common/desired_workers.h"

#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace kubeps {

std::string ParseDesiredWorkers(const std::string& text, DesiredWorkers* out) {
  std::istringstream in(text);
  long long workers = 0;
  DesiredWorkers parsed;
  std::string from, step_word, rest;
  if (!(in >> workers) || workers < 1 || workers > 1000000) {
    return "want the number of workers the job should have, a whole number from 1";
  }
  parsed.workers = static_cast<int>(workers);
  if (in >> from) {
    long long step = -1;
    if (from != "from" || !(in >> step_word) || step_word != "step" || !(in >> step) || step < 0)
      return "want \"N\" or \"N from step S\"";
    parsed.at_step = static_cast<uint64_t>(step);
  }
  if (in >> rest) return "want \"N\" or \"N from step S\", with nothing after";
  *out = parsed;
  return "";
}

std::string FormatDesiredWorkers(const DesiredWorkers& desired) {
  std::string text = std::to_string(desired.workers);
  if (desired.at_step) text += " from step " + std::to_string(*desired.at_step);
  return text;
}

std::optional<DesiredWorkers> DesiredWorkersFile::Changed() {
  if (path_.empty()) return std::nullopt;
  std::ifstream in(path_);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  if (value.empty() || value == last_) return std::nullopt;
  last_ = value;
  DesiredWorkers desired;
  if (std::string wrong = ParseDesiredWorkers(value, &desired); !wrong.empty()) {
    KLOG_ERROR << path_ << " holds \"" << value << "\": " << wrong;
    return std::nullopt;
  }
  return desired;
}

}  // namespace kubeps
