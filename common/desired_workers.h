// The file that says how many workers an elastic job should have: written by
// `kubeps scale` in the run folder, or on Kubernetes the scheduler pod's
// annotation kubeps.io/desired-workers as a downwardAPI volume shows it (the
// kubelet rewrites the file when the operator changes the annotation).
#ifndef KUBEPS_COMMON_DESIRED_WORKERS_H_
#define KUBEPS_COMMON_DESIRED_WORKERS_H_

#include <optional>
#include <string>

namespace kubeps {

class DesiredWorkersFile {
 public:
  explicit DesiredWorkersFile(std::string path) : path_(std::move(path)) {}
  // The number the file holds, when it holds another text than at the last
  // call; nullopt otherwise, and for a missing or unreadable file. A text
  // that is not a whole number is logged (once), naming the file.
  std::optional<int> Changed();

 private:
  const std::string path_;
  std::string last_;
};

}  // namespace kubeps

#endif  // KUBEPS_COMMON_DESIRED_WORKERS_H_
