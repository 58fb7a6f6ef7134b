// A C++ program's own optimizer and its own checkpoints, for a sync job
// whose servers' optimizer is none: the servers only average the workers'
// gradients, and the program keeps the parameters and the optimizer's
// state. A rollback (a server restarted from its checkpoint) sends the job
// back to a checkpoint step, and that state must go back with it
// (kubeps::RollbackCopies, in memory); a restarted process must find it
// again (StateFiles, on disk), or the job fails with reason
// ProgramStateMissing rather than train on from fresh values.
#ifndef KUBEPS_EXAMPLES_CPP_OWN_STATE_H_
#define KUBEPS_EXAMPLES_CPP_OWN_STATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace example {

// SGD with momentum in PyTorch's form, on n values:
//   velocity = momentum * velocity + mean;  w -= learning_rate * velocity
void MomentumStep(float learning_rate, float momentum, const float* mean, float* velocity, float* w,
                  size_t n);

// A region of the program's state: saved and loaded whole, in place.
struct StateRegion {
  void* data;
  size_t bytes;
};

// One worker's own checkpoints in a folder of its own: step-<20 digits>.state,
// the regions' bytes one after the other. A file is written beside its name
// and renamed into it after an fsync, so a process killed while it saves
// leaves the steps it had and no part of a new one. The newest `kept` are
// kept: the job goes back to the newest step both the servers and the
// program hold (SidecarOptions::own_state_steps).
class StateFiles {
 public:
  StateFiles(std::string folder, std::vector<StateRegion> regions, int kept = 4);

  // Makes the folder (and its parents) where it is missing.
  bool Open(std::string* error);
  // The steps of the files held, oldest first.
  std::vector<uint64_t> Steps() const;
  // The regions' state as of `step` (before the program computes it).
  bool Save(uint64_t step, std::string* error);
  // Deletes the files of the steps after `step`: after a rollback to it
  // they are of a timeline the job left.
  bool DropAfter(uint64_t step, std::string* error);
  // Puts the state of `step` back into the regions; false, with the file
  // and what is wrong, where it is missing or of another size.
  bool Load(uint64_t step, std::string* error) const;

 private:
  std::string PathOf(uint64_t step) const;

  const std::string folder_;
  const std::vector<StateRegion> regions_;
  const int kept_;
};

}  // namespace example

#endif  // KUBEPS_EXAMPLES_CPP_OWN_STATE_H_
