// Command-line parsing for every kubeps binary, through CLI11: one behaviour
// for `--help` (prints every flag with its default and variable, exit 0) and
// for a bad flag (names it, exit 2, the usage-error code of getopt programs).
#ifndef KUBEPS_COMMON_COMMAND_LINE_H_
#define KUBEPS_COMMON_COMMAND_LINE_H_

#include <optional>

#include <CLI/CLI.hpp>

namespace kubeps {

// nullopt: parsed, go on; otherwise the exit code main() returns.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace kubeps

#endif  // KUBEPS_COMMON_COMMAND_LINE_H_
