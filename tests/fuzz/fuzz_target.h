// A fuzz target: libFuzzer's entry point, and the seed inputs it starts from.
//
// Each target is built two ways (tests/fuzz/CMakeLists.txt): with
// fuzz_driver.cc, a fixed-iteration mutation driver that runs in the test
// suite with any compiler, and, with -DKUBEPS_LIBFUZZER=ON and clang, against
// libFuzzer for open-ended, coverage-guided runs. A target aborts on what it
// finds wrong (a crash, a broken invariant); the driver catches hangs and
// unbounded memory.
#ifndef KUBEPS_TESTS_FUZZ_FUZZ_TARGET_H_
#define KUBEPS_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Well-formed inputs that reach deep into the target: the driver starts from
// them and the corpus folder, and `--write-seeds DIR` writes them there.
std::vector<std::string> FuzzSeeds();

// Aborts with `what` when `condition` is false: a finding.
void FuzzCheck(bool condition, const char* what);

#endif  // KUBEPS_TESTS_FUZZ_FUZZ_TARGET_H_
