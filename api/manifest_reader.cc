#include "api/manifest_reader.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <system_error>
#include <utility>

namespace kubeps::api::internal {
namespace {

const char* kStrTag = "tag:yaml.org,2002:str";

std::string FormatNumber(double value) {
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  return std::string(buf.data(), res.ptr);
}

bool IsBoolWord(const std::string& text) {
  return text == "true" || text == "True" || text == "TRUE" || text == "false" || text == "False" ||
         text == "FALSE";
}

bool IsNullWord(const std::string& text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// Folds case and drops '-' and '_', so "learning_rate" matches "learningRate".
std::string Normalize(const std::string& word) {
  std::string out;
  for (char c : word) {
    if (c == '-' || c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

bool Absent(const YAML::Node& node) { return !node.IsDefined() || node.IsNull(); }

}  // namespace

std::string JoinPath(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string Quote(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool IsPlain(const YAML::Node& node) {
  if (!node.IsDefined() || !node.IsScalar()) return false;
  const std::string& tag = node.Tag();
  return tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float";
}

bool LooksLikeInteger(const std::string& text) {
  static const std::regex re("[-+]?[0-9]+");
  return std::regex_match(text, re);
}

bool LooksLikeFloat(const std::string& text) {
  static const std::regex re(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?"
      "|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  return std::regex_match(text, re);
}

std::optional<double> ParseDouble(const std::string& text) {
  if (!LooksLikeFloat(text)) return std::nullopt;
  std::string_view view(text);
  bool negative = false;
  if (!view.empty() && (view[0] == '+' || view[0] == '-')) {
    negative = view[0] == '-';
    view.remove_prefix(1);
  }
  if (view.size() == 4 && view[0] == '.' && (view[1] == 'i' || view[1] == 'I')) {
    double inf = std::numeric_limits<double>::infinity();
    return negative ? -inf : inf;
  }
  if (view.size() == 4 && view[0] == '.' && (view[1] == 'n' || view[1] == 'N')) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  double value = 0;
  auto res = std::from_chars(view.data(), view.data() + view.size(), value);
  if (res.ec != std::errc() || res.ptr != view.data() + view.size()) return std::nullopt;
  return negative ? -value : value;
}

std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (IsPlain(node) && (LooksLikeInteger(text) || LooksLikeFloat(text) || IsBoolWord(text))) {
        return text;
      }
      return Quote(text);
    }
    default:
      return "an unknown value";
  }
}

size_t EditDistance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::optional<std::string> Suggest(const std::string& word,
                                   const std::vector<std::string>& candidates) {
  const std::string norm = Normalize(word);
  for (const auto& c : candidates) {
    if (Normalize(c) == norm) return c;
  }
  // Allow about one typo per four characters, at least one and at most three.
  const size_t limit = std::clamp<size_t>(norm.size() / 4, 1, 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    size_t dist = EditDistance(norm, Normalize(c));
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  return best;
}

nlohmann::json YamlToJson(const YAML::Node& node, const std::string& path,
                          std::vector<FieldError>* errors) {
  if (Absent(node)) return nullptr;
  if (node.IsSequence()) {
    nlohmann::json array = nlohmann::json::array();
    size_t i = 0;
    for (const auto& item : node) {
      array.push_back(YamlToJson(item, path + "[" + std::to_string(i) + "]", errors));
      ++i;
    }
    return array;
  }
  if (node.IsMap()) {
    nlohmann::json object = nlohmann::json::object();
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        errors->push_back({path, "keys must be strings, got " + Describe(kv.first)});
        continue;
      }
      const std::string& key = kv.first.Scalar();
      if (object.contains(key)) {
        errors->push_back({JoinPath(path, key), "duplicate field"});
        continue;
      }
      object[key] = YamlToJson(kv.second, JoinPath(path, key), errors);
    }
    return object;
  }
  const std::string& text = node.Scalar();
  if (!IsPlain(node) || node.Tag() == kStrTag) return text;
  if (IsNullWord(text)) return nullptr;
  if (IsBoolWord(text)) return text[0] == 't' || text[0] == 'T';
  if (LooksLikeInteger(text)) {
    std::string_view digits(text);
    if (digits[0] == '+') digits.remove_prefix(1);
    int64_t value = 0;
    auto res = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (res.ec == std::errc()) return value;
    uint64_t uvalue = 0;
    res = std::from_chars(digits.data(), digits.data() + digits.size(), uvalue);
    if (res.ec == std::errc()) return uvalue;
  }
  if (auto value = ParseDouble(text); value && std::isfinite(*value)) return *value;
  return text;
}

MapReader::MapReader(const YAML::Node& node, std::string path, std::vector<FieldError>* errors)
    : node_(node), path_(std::move(path)), errors_(errors) {
  if (Absent(node_)) return;
  if (!node_.IsMap()) {
    errors_->push_back({path_, "must be a mapping, got " + Describe(node_)});
    bad_type_ = true;
    return;
  }
  is_mapping_ = true;
}

void MapReader::AddError(const std::string& key, const std::string& message) const {
  errors_->push_back({FieldPath(key), message});
}

void MapReader::Allow(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (known_set_.insert(key).second) known_.push_back(key);
  }
}

YAML::Node MapReader::Get(const std::string& key) {
  Allow({key});
  if (!is_mapping_) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node& map = node_;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool MapReader::Has(const std::string& key) { return !Absent(Get(key)); }

void MapReader::MissingRequired(const std::string& key) const {
  // A mapping of the wrong type was already reported; its fields are not
  // reported again as missing.
  if (!bad_type_) AddError(key, "required");
}

bool MapReader::ReadString(const std::string& key, std::string* out, bool required) {
  YAML::Node value = Get(key);
  if (Absent(value)) {
    if (required) MissingRequired(key);
    return false;
  }
  if (!value.IsScalar()) {
    AddError(key, "must be a string, got " + Describe(value));
    return false;
  }
  if (required && value.Scalar().empty()) {
    MissingRequired(key);
    return false;
  }
  *out = value.Scalar();
  return true;
}

bool MapReader::ReadBool(const std::string& key, bool* out) {
  YAML::Node value = Get(key);
  if (Absent(value)) return false;
  if (value.IsScalar() && value.Tag() != "!" &&
      (value.Scalar() == "true" || value.Scalar() == "false")) {
    *out = value.Scalar() == "true";
    return true;
  }
  AddError(key, "must be true or false, got " + Describe(value));
  return false;
}

bool MapReader::ReadEnum(const std::string& key, const std::vector<std::string>& allowed,
                         std::string* out) {
  std::string text;
  if (!ReadString(key, &text)) return false;
  if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) {
    *out = text;
    return true;
  }
  std::string message = "must be one of ";
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (i > 0) message += i + 1 == allowed.size() ? " or " : ", ";
    message += Quote(allowed[i]);
  }
  message += ", got " + Quote(text);
  if (auto suggestion = Suggest(text, allowed)) {
    message += " (did you mean " + Quote(*suggestion) + "?)";
  }
  AddError(key, message);
  return false;
}

std::optional<int64_t> MapReader::ReadIntegerIn(const std::string& key, int64_t min, int64_t max) {
  YAML::Node value = Get(key);
  if (Absent(value)) return std::nullopt;
  if (!IsPlain(value) || !LooksLikeInteger(value.Scalar())) {
    AddError(key, "must be an integer, got " + Describe(value));
    return std::nullopt;
  }
  const std::string& text = value.Scalar();
  std::string_view digits(text);
  if (digits[0] == '+') digits.remove_prefix(1);
  int64_t parsed = 0;
  auto res = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
  const bool overflow = res.ec != std::errc();
  if ((overflow && digits[0] == '-') || (!overflow && parsed < min)) {
    AddError(key, "must be >= " + std::to_string(min) + ", got " + text);
    return std::nullopt;
  }
  if (overflow || parsed > max) {
    AddError(key, "must be at most " + std::to_string(max) + ", got " + text);
    return std::nullopt;
  }
  return parsed;
}

bool MapReader::ReadInt(const std::string& key, int* out, int64_t min) {
  auto value = ReadIntegerIn(key, min, std::numeric_limits<int>::max());
  if (!value) return false;
  *out = static_cast<int>(*value);
  return true;
}

bool MapReader::ReadInt64(const std::string& key, int64_t* out, int64_t min) {
  auto value = ReadIntegerIn(key, min, std::numeric_limits<int64_t>::max());
  if (!value) return false;
  *out = *value;
  return true;
}

bool MapReader::ReadUint64(const std::string& key, uint64_t* out) {
  YAML::Node value = Get(key);
  if (Absent(value)) return false;
  if (!IsPlain(value) || !LooksLikeInteger(value.Scalar())) {
    AddError(key, "must be an integer, got " + Describe(value));
    return false;
  }
  const std::string& text = value.Scalar();
  std::string_view digits(text);
  if (digits[0] == '+') digits.remove_prefix(1);
  if (digits[0] == '-') {
    // "-0" is zero; any other negative number is out of range.
    if (digits.find_first_not_of("0", 1) != std::string_view::npos) {
      AddError(key, "must be >= 0, got " + text);
      return false;
    }
    *out = 0;
    return true;
  }
  uint64_t parsed = 0;
  auto res = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
  if (res.ec != std::errc()) {
    AddError(key, "must be at most " + std::to_string(std::numeric_limits<uint64_t>::max()) +
                      ", got " + text);
    return false;
  }
  *out = parsed;
  return true;
}

bool MapReader::ReadDouble(const std::string& key, double* out, double min, bool min_exclusive,
                           std::optional<double> max_exclusive) {
  YAML::Node value = Get(key);
  if (Absent(value)) return false;
  const std::string text = value.IsScalar() ? value.Scalar() : std::string();
  if (!IsPlain(value) || !(LooksLikeFloat(text) || LooksLikeInteger(text))) {
    AddError(key, "must be a number, got " + Describe(value));
    return false;
  }
  std::optional<double> parsed = ParseDouble(text);
  if (!parsed) {
    AddError(key, "must be a number within the range of a double, got " + text);
    return false;
  }
  if (!std::isfinite(*parsed)) {
    AddError(key, "must be a finite number, got " + text);
    return false;
  }
  const double v = *parsed;
  const bool below = min_exclusive ? !(v > min) : !(v >= min);
  const bool above = max_exclusive && !(v < *max_exclusive);
  if (below || above) {
    std::string message;
    if (max_exclusive) {
      message = std::string("must be in ") + (min_exclusive ? "(" : "[") + FormatNumber(min) +
                ", " + FormatNumber(*max_exclusive) + ")";
    } else {
      message = std::string("must be ") + (min_exclusive ? "> " : ">= ") + FormatNumber(min);
    }
    AddError(key, message + ", got " + text);
    return false;
  }
  *out = v;
  return true;
}

void MapReader::Finish() {
  if (!is_mapping_) return;
  std::set<std::string> seen;
  const YAML::Node& map = node_;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      errors_->push_back({path_, "keys must be strings, got " + Describe(it->first)});
      continue;
    }
    const std::string& key = it->first.Scalar();
    if (!seen.insert(key).second) {
      AddError(key, "duplicate field");
      continue;
    }
    if (known_set_.count(key)) continue;
    std::string message = "unknown field";
    if (auto suggestion = Suggest(key, known_)) {
      message += " (did you mean " + Quote(*suggestion) + "?)";
    }
    AddError(key, message);
  }
}

}  // namespace kubeps::api::internal
