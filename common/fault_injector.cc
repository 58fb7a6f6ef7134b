#include "common/fault_injector.h"

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace kubeps {

Status ParseFaultConfig(const std::string& text, FaultConfig* config) {
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    if (entry.empty()) continue;
    size_t eq = entry.find('=');
    std::string key = entry.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    char* end = nullptr;
    double number = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || number < 0) {
      return Status::Error("KUBEPS_FAULTS: \"" + entry + "\": want name=non-negative number");
    }
    bool probability = true;
    if (key == "drop_request")
      config->drop_request = number;
    else if (key == "drop_response")
      config->drop_response = number;
    else if (key == "duplicate")
      config->duplicate = number;
    else if (key == "delay")
      config->delay = number;
    else if (key == "delay_max_ms")
      config->delay_max_ms = static_cast<int>(number), probability = false;
    else if (key == "seed")
      config->seed = static_cast<uint64_t>(number), probability = false;
    else {
      return Status::Error(
          "KUBEPS_FAULTS: unknown fault \"" + key +
          "\" (want drop_request, drop_response, duplicate, delay, delay_max_ms, seed)");
    }
    if (probability && number > 1) {
      return Status::Error("KUBEPS_FAULTS: " + key + " is a share, in [0, 1]; got " + value);
    }
  }
  return Status::Ok();
}

FaultInjector::FaultInjector(const FaultConfig& config, MetricsServer* metrics)
    : config_(config), metrics_(metrics), random_(config.seed) {}

Status FaultInjector::FromEnvironment(MetricsServer* metrics, std::unique_ptr<FaultInjector>* out) {
  const char* text = std::getenv("KUBEPS_FAULTS");
  if (text == nullptr || *text == '\0') return Status::Ok();
  FaultConfig config;
  if (Status s = ParseFaultConfig(text, &config); !s.ok()) return s;
  *out = std::make_unique<FaultInjector>(config, metrics);
  return Status::Ok();
}

bool FaultInjector::Roll(double probability) {
  if (probability <= 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return std::uniform_real_distribution<double>(0, 1)(random_) < probability;
}

void FaultInjector::SleepRandom(const char* rpc) {
  int ms;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ms = std::uniform_int_distribution<int>(0, std::max(0, config_.delay_max_ms))(random_);
  }
  Count("delay", rpc);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

grpc::Status FaultInjector::Drop(grpc::ServerContext* context, const char* rpc, const char* what) {
  Count(what[0] == 'r' && what[2] == 'q' ? "drop_request" : "drop_response", rpc);
  // The sender hears nothing: hold the call until it is cancelled (the
  // sender's deadline passed, or it gave up), capped so a call without
  // deadline cannot hang us. Not until our view of the deadline: on a loaded
  // machine our answer would then reach a sender whose own timer has not
  // fired yet, and it would hear UNAVAILABLE instead of nothing.
  using std::chrono::system_clock;
  auto cap = system_clock::now() + std::chrono::seconds(60);
  // (A call without deadline has the greatest time point: no sum with it.)
  if (context->deadline() < cap) cap = context->deadline() + std::chrono::seconds(5);
  while (!context->IsCancelled() && system_clock::now() < cap) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      std::string("fault injected: ") + what + " dropped");
}

void FaultInjector::Count(const char* fault, const char* rpc) {
  metrics_
      ->Counter("kubeps_faults_injected_total", "Faults injected by KUBEPS_FAULTS",
                {{"fault", fault}, {"rpc", rpc}})
      .Increment();
}

}  // namespace kubeps
