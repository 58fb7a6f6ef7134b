// kubeps-reshard: a job's checkpoints cut for another number of parameter
// servers, or another bigArrayBound (checkpoint_reshard.h). `kubeps reshard
// JOB.yaml` runs it with the manifest's; in a pod of the server image, which
// carries it, it runs on a checkpoint volume with the flags alone.
//
//   kubeps-reshard --path DIR --servers N [--big-array-bound B]
#include <string>

#include "common/command_line.h"
#include "common/logging.h"
#include "tools/checkpoint_reshard.h"

namespace kubeps::tools {
namespace {

// "step 60 of 2 servers (4 tensors, 3 MiB with the optimizer's state)".
std::string Describe(const ReshardReport& report) {
  return "step " + std::to_string(report.step) + " of " + std::to_string(report.old_servers) +
         " servers (" + std::to_string(report.tensors) + " tensors, " +
         std::to_string((report.bytes + (1 << 20) - 1) >> 20) + " MiB with the optimizer's state)";
}

int Reshard(const std::string& folder, int servers, uint64_t big_array_bound) {
  PlacementOptions placement;
  placement.big_array_bound = big_array_bound;
  ReshardReport report;
  if (Status s = ReshardFolder(folder, servers, placement, &report); !s.ok()) {
    PrintError("kubeps reshard: " + s.message());
    return 1;
  }
  for (const std::string& note : report.notes) PrintLine(folder + ": " + note);
  const std::string placed =
      std::to_string(servers) + " servers under bigArrayBound " + std::to_string(big_array_bound);
  if (report.moved_aside.empty()) {
    PrintLine(folder + ": " + Describe(report) + " is cut as " + placed +
              " cut it already: nothing to reshard");
  } else {
    PrintLine(folder + ": " + Describe(report) + " resharded for " + placed +
              "; the job resumes from it. The old folders are in " + report.moved_aside +
              " (delete them once it has)");
  }
  return 0;
}

}  // namespace
}  // namespace kubeps::tools

int main(int argc, char** argv) {
  CLI::App app{
      "kubeps-reshard: cut a job's checkpoints for another number of parameter servers or "
      "bigArrayBound, so that the job run again with them resumes (no job may run on them)"};
  std::string folder;
  int servers = 0;
  uint64_t big_array_bound = kubeps::PlacementOptions{}.big_array_bound;
  app.add_option("--path", folder,
                 "the checkpoint folder (spec.checkpoint.path: its server-<i> "
                 "folders)")
      ->required();
  app.add_option("--servers", servers, "how many parameter servers the next run has")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--big-array-bound", big_array_bound, "the next run's spec.bigArrayBound")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  if (auto exit_code = kubeps::ParseCommandLine(app, argc, argv)) return *exit_code;
  return kubeps::tools::Reshard(folder, servers, big_array_bound);
}
