// The file that says how many workers an elastic job should have: written by
// `kubeps scale` in the run folder, or on Kubernetes the scheduler pod's
// annotation kubeps.io/desired-workers as a downwardAPI volume shows it (the
// kubelet rewrites the file when the operator changes the annotation).
//
// Its text: "N", or "N from step S" for a change at step S exactly (`kubeps
// scale --at-step`): the job waits at S for workers that are not there yet.
#ifndef KUBEPS_COMMON_DESIRED_WORKERS_H_
#define KUBEPS_COMMON_DESIRED_WORKERS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace kubeps {

struct DesiredWorkers {
  int workers = 0;
  std::optional<uint64_t> at_step;
};

// "" for a well-formed text (*out set), else what is wrong with it.
std::string ParseDesiredWorkers(const std::string& text, DesiredWorkers* out);
std::string FormatDesiredWorkers(const DesiredWorkers& desired);

class DesiredWorkersFile {
 public:
  explicit DesiredWorkersFile(std::string path) : path_(std::move(path)) {}
  // What the file says, when it holds another text than at the last call;
  // nullopt otherwise, and for a missing or unreadable file. A text that
  // does not parse is logged (once), naming the file.
  std::optional<DesiredWorkers> Changed();

 private:
  const std::string path_;
  std::string last_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_DESIRED_WORKERS_H_
