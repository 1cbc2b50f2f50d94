#include "testdata.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace kestrel::test {

std::string testdata_root() {
  const char* env = std::getenv("KESTREL_TESTDATA");
  return env && *env ? env : KESTREL_TESTDATA_DEFAULT;
}

std::string testdata_file(const std::string& rel) {
  std::string path = testdata_root() + "/" + rel;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return path;
  const char* req = std::getenv("KESTREL_REQUIRE_TESTDATA");
  if (req && std::string(req) == "1") {
    FAIL("required test data missing: " << path);
  } else {
    MESSAGE("skipped: test data missing: " << path);
  }
  return "";
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool thorough() {
  if (const char* v = std::getenv("KESTREL_TEST_THOROUGH"); v && *v) return std::string(v) != "0";
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#endif
#endif
  return true;
}

std::string cli_path() {
  const char* env = std::getenv("KESTREL_CLI");
  return env ? env : "kestrel";
}

CliResult run_cli(const std::string& args) {
  char err_file[] = "/tmp/kestrel_cli_err_XXXXXX";
  const int fd = mkstemp(err_file);
  REQUIRE(fd >= 0);
  close(fd);
  FILE* p = popen((cli_path() + " " + args + " 2>" + err_file).c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  std::string err = read_text_file(err_file);
  std::remove(err_file);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, err};
}

}  // namespace kestrel::test
