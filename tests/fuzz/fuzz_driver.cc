// The fixed-iteration fuzz driver (fuzz_target.h): replays every file of the
// corpus folders and the target's seeds, then runs --runs inputs made by
// mutating them (bit flips, byte and integer substitutions, insertions,
// erasures, copies within an input and splices of two), from --seed, so a
// run is repeatable. A run that crashes, hangs past --timeout-ms or takes
// more than --rss-limit-mb of memory writes the input that did it to
// crash-<hash> (timeout-<hash>, oom-<hash>) in the working folder and exits
// non-zero;
// that file, added to the corpus, is the regression test.
//
//   fuzz_TARGET [CORPUS_DIR or INPUT_FILE...] [--runs=N] [--seed=S] [--max-len=L]
//               [--timeout-ms=T] [--rss-limit-mb=M] [--write-seeds=DIR]
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/command_line.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

struct Options {
  std::vector<std::string> corpus_dirs;
  long runs = 10000;
  unsigned long seed = 1;
  size_t max_len = 4096;
  unsigned timeout_ms = 2000;
  long rss_limit_mb = 2048;
  std::string write_seeds;
};

// nullopt with *exit_code set: --help, or a bad flag (named, exit 2).
std::optional<Options> Parse(int argc, char** argv, int* exit_code) {
  Options o;
  CLI::App app{"fixed-iteration fuzz driver (tests/fuzz/fuzz_target.h)"};
  app.add_option("inputs", o.corpus_dirs, "corpus folders, or single inputs to run again");
  app.add_option("--runs", o.runs, "mutated inputs to run after the corpus")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the mutations")->capture_default_str();
  app.add_option("--max-len", o.max_len, "longest mutated input, bytes")->capture_default_str();
  app.add_option("--timeout-ms", o.timeout_ms, "one input's time limit")->capture_default_str();
  app.add_option("--rss-limit-mb", o.rss_limit_mb, "resident memory limit")->capture_default_str();
  app.add_option("--write-seeds", o.write_seeds, "write the target's seeds to this folder, exit");
  if (std::optional<int> code = kubeps::ParseCommandLine(app, argc, argv)) {
    *exit_code = *code;
    return std::nullopt;
  }
  return o;
}

// The input being run, for the signal handlers (async-signal-safe writes only).
const std::string* g_current = nullptr;
const char* g_kind = "crash";

void WriteFinding(const char* kind) {
  if (g_current == nullptr) return;
  // FNV-1a: names the file by its contents.
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : *g_current) hash = (hash ^ c) * 1099511628211ull;
  char name[64];
  std::snprintf(name, sizeof name, "%s-%016llx", kind, static_cast<unsigned long long>(hash));
  int fd = ::open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, g_current->data(), g_current->size());
    (void)ignored;
    ::close(fd);
  }
  const char* msg = "fuzz driver: the input is in ";
  ssize_t ignored = ::write(2, msg, std::strlen(msg));
  ignored = ::write(2, name, std::strlen(name));
  ignored = ::write(2, "\n", 1);
  (void)ignored;
}

void OnFatalSignal(int sig) {
  WriteFinding(sig == SIGALRM ? "timeout" : g_kind);
  ::signal(sig, SIG_DFL);
  ::raise(sig == SIGALRM ? SIGABRT : sig);
}

void RunOne(const std::string& input, unsigned timeout_ms) {
  g_current = &input;
  itimerval timer{};
  timer.it_value.tv_sec = timeout_ms / 1000;
  timer.it_value.tv_usec = (timeout_ms % 1000) * 1000;
  ::setitimer(ITIMER_REAL, &timer, nullptr);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  g_current = nullptr;
}

class Mutator {
 public:
  Mutator(unsigned long seed, size_t max_len) : rng_(seed), max_len_(max_len) {}

  std::string Mutate(const std::vector<std::string>& pool) {
    std::string s = pool[Pick(pool.size())];
    const int rounds = 1 + static_cast<int>(Pick(4));
    for (int r = 0; r < rounds; ++r) MutateOnce(s, pool);
    if (s.size() > max_len_) s.resize(max_len_);
    return s;
  }

 private:
  size_t Pick(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }

  void MutateOnce(std::string& s, const std::vector<std::string>& pool) {
    static const int64_t kInteresting[] = {
        0,      1,      -1,         0x7f,          0x80,         0xff,
        0x7fff, 0xffff, 0x7fffffff, -0x80000000LL, 0xffffffffLL, 0x7fffffffffffffffLL};
    switch (Pick(8)) {
      case 0:  // flip a bit
        if (!s.empty()) s[Pick(s.size())] ^= static_cast<char>(1 << Pick(8));
        break;
      case 1:  // set a byte
        if (!s.empty()) s[Pick(s.size())] = static_cast<char>(Pick(256));
        break;
      case 2: {  // an interesting integer, 1, 2, 4 or 8 bytes, little-endian
        int64_t v = kInteresting[Pick(std::size(kInteresting))];
        size_t width = size_t{1} << Pick(4);
        if (s.size() < width) break;
        std::memcpy(&s[Pick(s.size() - width + 1)], &v, width);
        break;
      }
      case 3:  // insert random bytes
        s.insert(Pick(s.size() + 1), std::string(1 + Pick(8), static_cast<char>(Pick(256))));
        break;
      case 4:  // erase a range
        if (!s.empty()) {
          size_t at = Pick(s.size());
          s.erase(at, 1 + Pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 5:  // copy a range of the input elsewhere in it
        if (!s.empty()) {
          size_t from = Pick(s.size()), len = 1 + Pick(std::min<size_t>(32, s.size() - from));
          s.insert(Pick(s.size() + 1), s.substr(from, len));
        }
        break;
      case 6: {  // splice: this input's head and another's tail
        const std::string& other = pool[Pick(pool.size())];
        s = s.substr(0, Pick(s.size() + 1)) + other.substr(Pick(other.size() + 1));
        break;
      }
      default:  // a byte that means something to text formats
        if (!s.empty()) s[Pick(s.size())] = "{}[]:,\"\n -0123456789e."[Pick(22)];
        break;
    }
  }

  std::mt19937_64 rng_;
  size_t max_len_;
};

// As libFuzzer's -rss_limit_mb: a thread that reads the resident set size
// every 50 ms and ends the run, writing the input, once it is over the limit.
// (A limit on the address space would count the gRPC threads' reserved
// stacks and arenas, not memory used.)
void WatchMemory(long limit_mb) {
  std::thread([limit_mb] {
    const long page = ::sysconf(_SC_PAGESIZE);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream statm("/proc/self/statm");
      long size = 0, resident = 0;
      statm >> size >> resident;
      if (resident * page > (limit_mb << 20)) {
        std::fprintf(stderr, "fuzz finding: resident memory over %ld MiB\n", limit_mb);
        WriteFinding("oom");
        std::_Exit(1);
      }
    }
  }).detach();
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<Options> parsed = Parse(argc, argv, &exit_code);
  if (!parsed) return exit_code;
  const Options& options = *parsed;
  std::vector<std::string> pool;
  if (options.corpus_dirs.empty()) pool = FuzzSeeds();
  if (!options.write_seeds.empty()) {
    pool = FuzzSeeds();
    std::filesystem::create_directories(options.write_seeds);
    for (size_t i = 0; i < pool.size(); ++i) {
      std::ofstream(std::filesystem::path(options.write_seeds) / ("seed-" + std::to_string(i)),
                    std::ios::binary)
          << pool[i];
    }
    std::printf("wrote %zu seeds to %s\n", pool.size(), options.write_seeds.c_str());
    return 0;
  }
  for (const std::string& path : options.corpus_dirs) {
    if (!std::filesystem::is_directory(path)) {
      pool.push_back(ReadFile(path));  // one input: a finding to run again
      continue;
    }
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      if (entry.is_regular_file()) pool.push_back(ReadFile(entry.path()));
    }
  }
  if (pool.empty()) pool.push_back("");

  WatchMemory(options.rss_limit_mb);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM}) ::signal(sig, OnFatalSignal);

  for (const std::string& input : pool) RunOne(input, options.timeout_ms);
  Mutator mutator(options.seed, options.max_len);
  for (long i = 0; i < options.runs; ++i) RunOne(mutator.Mutate(pool), options.timeout_ms);
  std::printf(
      "%zu corpus inputs and %ld mutations (seed %lu): no crash, no hang, no memory "
      "over %ld MiB\n",
      pool.size(), options.runs, options.seed, options.rss_limit_mb);
  return 0;
}
