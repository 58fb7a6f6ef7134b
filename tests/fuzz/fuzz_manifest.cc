// The manifest parser (api/training_job.h) on any text: it answers a job or
// errors, never crashes or hangs, and a job it accepts round-trips: its
// canonical JSON (what every process gets in KUBEPS_JOB and the operator
// writes to the API server) is accepted again, into the same canonical JSON.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "api/training_job.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kubeps::api::ParseResult parsed = kubeps::api::ParseTrainingJob(text);
  FuzzCheck(parsed.ok() == parsed.job.has_value(), "a job and errors, or neither");
  if (!parsed.ok()) {
    FuzzCheck(!parsed.ErrorReport("job.yaml").empty(), "a refused manifest with no message");
    return 0;
  }
  const std::string canonical = kubeps::api::ToJson(*parsed.job).dump();
  kubeps::api::ParseResult again = kubeps::api::ParseTrainingJob(canonical);
  FuzzCheck(again.ok(), "the canonical JSON of an accepted job is refused");
  FuzzCheck(kubeps::api::ToJson(*again.job).dump() == canonical,
            "the canonical JSON changes when parsed again");
  return 0;
}

// The manifests the project ships: every field a user writes.
std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> seeds;
  for (const char* path :
       {"deploy/examples/fashion-mnist.yaml", "deploy/examples/fashion-mnist-cnn.yaml",
        "deploy/examples/fashion-mnist-cnn-gpu.yaml", "deploy/examples/fashion-mnist-async.yaml",
        "examples/cpp/trainingjob.yaml", "examples/pytorch/mlp/trainingjob.yaml"}) {
    std::ifstream in(std::string(KUBEPS_SOURCE_DIR) + "/" + path);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return seeds;
}
