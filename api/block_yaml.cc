#include "api/block_yaml.h"

#include <array>
#include <charconv>
#include <regex>

namespace kubeps::api {
namespace {

using Json = nlohmann::ordered_json;

// Words that some YAML version reads as a boolean or null.
bool IsReservedWord(const std::string& text) {
  static const std::regex words(
      "y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|"
      "null|Null|NULL|~");
  return std::regex_match(text, words);
}

bool IsPlainSafe(const std::string& text, bool in_flow) {
  if (text.empty() || IsReservedWord(text)) return false;
  // Anything starting like a number may be one (ints, floats, octal, hex,
  // YAML 1.1's 1_000 and 1:30): quoted.
  static const std::regex numeric("[-+.]?[0-9].*|[-+]?\\.(inf|Inf|INF|nan|NaN|NAN)");
  if (std::regex_match(text, numeric)) return false;
  // Not an indicator (quotes, "-", "[", "&", "!", ...) first.
  static const std::regex first("[A-Za-z_/(.]");
  if (!std::regex_match(text.substr(0, 1), first)) return false;
  if (text.back() == ' ') return false;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || c == ':' || c == '#' || c == '\\') return false;
    if (in_flow && (c == ',' || c == '[' || c == ']' || c == '{' || c == '}')) return false;
  }
  return true;
}

// Shortest exact form; a '.' before the exponent so that YAML 1.1 also
// reads a float ("1.0e-08", not "1e-08").
std::string FormatDouble(double value) {
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  std::string text(buf.data(), res.ptr);
  const size_t e = text.find('e');
  if (e == std::string::npos) return text;
  // "1e-08" -> "1.0e-8"
  size_t digits = e + 2;
  while (digits + 1 < text.size() && text[digits] == '0') text.erase(digits, 1);
  if (text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}

std::string Scalar(const Json& value, bool in_flow) {
  switch (value.type()) {
    case Json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      return IsPlainSafe(text, in_flow) ? text : value.dump();
    }
    case Json::value_t::number_float:
      return FormatDouble(value.get<double>());
    default:
      return value.dump();  // integers, booleans, null
  }
}

bool IsScalar(const Json& value) { return !value.is_object() && !value.is_array(); }

bool IsScalarList(const Json& value) {
  if (!value.is_array()) return false;
  for (const Json& item : value) {
    if (!IsScalar(item)) return false;
  }
  return true;
}

// The text after "key:" when it fits on the key's line, or "" when the
// value is a block below it.
std::string Inline(const Json& value) {
  if (IsScalar(value)) return " " + Scalar(value, false);
  if (value.empty()) return value.is_object() ? " {}" : " []";
  if (IsScalarList(value)) {
    std::string out = " [";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      out += Scalar(value[i], true);
    }
    return out + "]";
  }
  return "";
}

void WriteMapping(const Json& object, int indent, bool first_line_written, std::string* out);

void WriteValue(const Json& value, int indent, std::string* out) {
  if (value.is_object()) {
    WriteMapping(value, indent, false, out);
    return;
  }
  // A list of mappings: "- " then the mapping's keys, aligned after it.
  for (const Json& item : value) {
    out->append(indent, ' ');
    out->append("-");
    if (item.is_object() && !item.empty()) {
      out->append(" ");
      WriteMapping(item, indent + 2, true, out);
    } else {
      out->append(Inline(item) + "\n");
    }
  }
}

void WriteMapping(const Json& object, int indent, bool first_line_written, std::string* out) {
  bool first = true;
  for (const auto& [key, value] : object.items()) {
    if (!(first && first_line_written)) out->append(indent, ' ');
    first = false;
    const std::string rest = Inline(value);
    out->append(Scalar(Json(key), false) + ":" + rest + "\n");
    if (rest.empty()) WriteValue(value, indent + 2, out);
  }
}

}  // namespace

std::string ToBlockYaml(const nlohmann::ordered_json& document) {
  std::string out;
  WriteMapping(document, 0, false, &out);
  return out;
}

}  // namespace kubeps::api
