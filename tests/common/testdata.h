// Locating ../shared/testdata from tests. KESTREL_TESTDATA overrides the default; with
// KESTREL_REQUIRE_TESTDATA=1 a missing file fails the test instead of skipping it.
#pragma once
#include <string>

namespace kestrel::test {

std::string testdata_root();
// Full path of a file under the testdata root, or "" if missing. When missing: the test fails if
// KESTREL_REQUIRE_TESTDATA=1, otherwise a message says it is skipped.
std::string testdata_file(const std::string& rel);
std::string read_text_file(const std::string& path);
// Path of the kestrel CLI binary (from KESTREL_CLI, set by ctest).
std::string cli_path();

// False in a sanitizer build, unless KESTREL_TEST_THOROUGH=1: there the costliest oracle loops
// check a sample of their cases (the Release run checks every one), while the code under test
// still runs whole. It keeps `make asan` (ASan's allocator, the SIMT emulator under ASan) within
// CI's time.
bool thorough();

// Runs `kestrel ARGS` (ARGS shell-quoted by the caller): exit code, stdout and stderr.
struct CliResult {
  int code;
  std::string out, err;
};
CliResult run_cli(const std::string& args);

}  // namespace kestrel::test
