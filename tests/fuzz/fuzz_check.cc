#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_target.h"

void FuzzCheck(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz finding: %s\n", what);
    std::abort();
  }
}
