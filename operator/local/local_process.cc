#include "operator/local/local_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace kubeps::local {
namespace {

void WriteAll(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the runner's output is gone: drop the line
    written += static_cast<size_t>(n);
  }
}

// Copies `from` to `to` line by line, each line prefixed with the tag and
// written with one write(), so that lines of different children do not mix.
void CopyLines(int from, int to, const std::string& tag) {
  const std::string prefix = "[" + tag + "] ";
  std::string pending;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(from, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      WriteAll(to, prefix + pending.substr(start, end + 1 - start));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) WriteAll(to, prefix + pending + "\n");
  ::close(from);
}

// The runner's environment with `overrides` set.
std::vector<std::string> ChildEnvironment(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry; ++entry) {
    const std::string text = *entry;
    if (!overrides.count(text.substr(0, text.find('=')))) entries.push_back(text);
  }
  for (const auto& [key, value] : overrides) entries.push_back(key + "=" + value);
  return entries;
}

bool IsExecutableFile(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Status StartChild(const ChildSpec& spec, pid_t* pid) {
  const bool tagged = !spec.output_tag.empty();
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (tagged && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    const std::string why = std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return Status::Error("cannot make the output pipes of " + spec.argv.front() + ": " + why);
  }
  // Everything the child needs is made before fork: the runner has threads
  // (these output copiers), so the child makes only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& word : spec.argv) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> environment = ChildEnvironment(spec.env);
  std::vector<char*> envp;
  for (const std::string& entry : environment) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
      if (fd >= 0) ::close(fd);
    }
    return Status::Error("fork for " + spec.argv.front() + " failed: " + std::strerror(errno));
  }
  if (child == 0) {
    // Own process group: a Ctrl-C reaches the runner, which stops children
    // in order, instead of every process at once.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(137);  // the runner died before prctl
    if (tagged) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    }
    if (!spec.working_dir.empty() && ::chdir(spec.working_dir.c_str()) != 0) {
      const std::string message =
          "cannot change to the working directory " + spec.working_dir + "\n";
      (void)!::write(STDERR_FILENO, message.data(), message.size());
      ::_exit(127);
    }
    ::execve(spec.path.c_str(), argv.data(), envp.data());
    const std::string message = "cannot execute " + spec.path + "\n";
    (void)!::write(STDERR_FILENO, message.data(), message.size());
    ::_exit(127);
  }
  // The parent too, so that the group exists when StartChild returns: a
  // kill of the group (-pid) right after it would otherwise find none, and
  // the child would run on (EACCES once it has exec'ed: then it made the
  // group itself already).
  ::setpgid(child, child);
  if (tagged) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    std::thread(CopyLines, out_pipe[0], STDOUT_FILENO, spec.output_tag).detach();
    std::thread(CopyLines, err_pipe[0], STDERR_FILENO, spec.output_tag).detach();
  }
  *pid = child;
  return Status::Ok();
}

Status FindProgram(const std::string& program, const std::string& search_path,
                   const std::string& working_dir, std::string* found) {
  if (program.find('/') != std::string::npos) {
    const std::string path =
        program.front() == '/' || working_dir.empty() ? program : working_dir + "/" + program;
    if (!IsExecutableFile(path)) return Status::Error(path + " is not an executable file");
    *found = path;
    return Status::Ok();
  }
  size_t start = 0;
  for (;;) {
    const size_t end = search_path.find(':', start);
    std::string dir = search_path.substr(start, end == std::string::npos ? end : end - start);
    if (dir.empty()) dir = ".";  // an empty PATH entry is the working directory
    if (dir.front() != '/' && !working_dir.empty()) dir = working_dir + "/" + dir;
    if (IsExecutableFile(dir + "/" + program)) {
      *found = dir + "/" + program;
      return Status::Ok();
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return Status::Error(program + " is not on PATH (" + search_path + ")");
}

int ExitCodeOf(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

int ReapIfEnded(pid_t pid) {
  int wait_status = 0;
  if (::waitpid(pid, &wait_status, WNOHANG) != pid) return -1;
  return ExitCodeOf(wait_status);
}

}  // namespace kubeps::local
