#include "api/training_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kubeps::api {
namespace {

// The number after "key=" in `message`, if the key is there and the value
// is a finite number.
std::optional<double> Field(const std::string& message, const std::string& key) {
  std::istringstream words(message);
  std::string word;
  while (words >> word) {
    if (word.rfind(key + "=", 0) != 0) continue;
    const std::string text = word.substr(key.size() + 1);
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(value)) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

}  // namespace

std::string FormatFixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

std::string FormatTrainingSummary(const TrainingSummary& summary) {
  std::string text =
      "step=" + std::to_string(summary.step) + " totalSteps=" + std::to_string(summary.total_steps);
  if (summary.steps_per_second)
    text += " stepsPerSecond=" + FormatFixed(*summary.steps_per_second, 2);
  if (summary.loss) text += " loss=" + FormatFixed(*summary.loss, 4);
  if (summary.test_accuracy) text += " testAccuracy=" + FormatFixed(*summary.test_accuracy, 4);
  return text;
}

std::optional<TrainingSummary> ParseTrainingSummary(const std::string& message) {
  const std::optional<double> step = Field(message, "step");
  const std::optional<double> total = Field(message, "totalSteps");
  if (!step || !total || *step < 0 || *total < 0) return std::nullopt;
  TrainingSummary summary;
  summary.step = static_cast<int64_t>(*step);
  summary.total_steps = static_cast<int64_t>(*total);
  summary.steps_per_second = Field(message, "stepsPerSecond");
  summary.loss = Field(message, "loss");
  summary.test_accuracy = Field(message, "testAccuracy");
  return summary;
}

std::string ProgressPercent(int64_t step, int64_t total_steps) {
  if (total_steps <= 0 || step < 0) return "";
  const int64_t percent = step >= total_steps ? 100 : step * 100 / total_steps;
  return std::to_string(percent) + "%";
}

std::string EstimatedTimeLeft(int64_t step, int64_t total_steps, double steps_per_second) {
  if (total_steps <= 0) return "";
  if (step >= total_steps) return "0s";
  if (!(steps_per_second > 0)) return "";
  return HumanDuration(std::ceil((total_steps - step) / steps_per_second));
}

// As apimachinery's duration.HumanDuration (what kubectl prints as an age).
std::string HumanDuration(double seconds_left) {
  const int64_t seconds = static_cast<int64_t>(std::max(0.0, seconds_left));
  const int64_t minutes = seconds / 60, hours = seconds / 3600, days = hours / 24;
  auto two = [](int64_t big, const char* big_unit, int64_t small, const char* small_unit) {
    std::string text = std::to_string(big) + big_unit;
    if (small != 0) text += std::to_string(small) + small_unit;
    return text;
  };
  if (seconds < 60 * 2) return std::to_string(seconds) + "s";
  if (minutes < 10) return two(minutes, "m", seconds % 60, "s");
  if (minutes < 60 * 3) return std::to_string(minutes) + "m";
  if (hours < 8) return two(hours, "h", minutes % 60, "m");
  if (hours < 48) return std::to_string(hours) + "h";
  if (hours < 24 * 8) return two(days, "d", hours % 24, "h");
  if (hours < 24 * 365 * 2) return std::to_string(days) + "d";
  if (hours < 24 * 365 * 8) return two(days / 365, "y", days % 365, "d");
  return std::to_string(days / 365) + "y";
}

}  // namespace kubeps::api
