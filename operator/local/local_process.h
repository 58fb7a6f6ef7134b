// Starting and stopping the child processes of `kubeps run`. Every child
// leads a process group of its own (a Ctrl-C reaches the runner, which
// stops the children in order) and dies with the runner
// (PR_SET_PDEATHSIG), so nothing outlives `kubeps run`.
//
// Thread-safe functions; the threads that copy a child's output lines own
// their pipe and stop at its end.
#ifndef KUBEPS_OPERATOR_LOCAL_LOCAL_PROCESS_H_
#define KUBEPS_OPERATOR_LOCAL_LOCAL_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubeps::local {

struct ChildSpec {
  std::string path;               // the executable
  std::vector<std::string> argv;  // argv[0] included
  // Set in the child on top of the runner's own environment.
  std::map<std::string, std::string> env;
  std::string working_dir;  // "" = the runner's
  // "": the child writes to the runner's stdout and stderr. Otherwise each
  // line it writes there reaches them as "[output_tag] line", as the lines
  // of kubeps' own processes carry their tag.
  std::string output_tag;
};

// Forks and executes `spec`. An exec that fails makes the child exit 127
// after saying why on stderr, as a shell does.
Status StartChild(const ChildSpec& spec, pid_t* pid);

// Where `program` is, as execvp would find it: names with a '/' are taken
// as they are (relative ones from `working_dir`), others are looked for on
// `search_path` (a PATH value). An error names what is missing.
Status FindProgram(const std::string& program, const std::string& search_path,
                   const std::string& working_dir, std::string* found);

// A wait status as an exit code: the code, or 128+N for signal N.
int ExitCodeOf(int wait_status);

// Non-blocking: the child's exit code once it has ended (reaped), or -1
// while it runs.
int ReapIfEnded(pid_t pid);

}  // namespace kubeps::local

#endif  // KUBEPS_OPERATOR_LOCAL_LOCAL_PROCESS_H_
