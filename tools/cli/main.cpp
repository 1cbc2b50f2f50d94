// kestrel: the command-line front end. One file per subcommand; the table is in commands.cpp.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"
#include "kestrel.hpp"

namespace {

using kestrel::cli::Command;
using kestrel::cli::commands;

std::string usage() {
  std::string s = "usage: kestrel <command> [options]   (kestrel <command> --help lists a command's options)\ncommands:\n";
  for (const Command& c : commands()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-9s %s\n", c.name, c.summary);
    s += line;
  }
  s += "  kestrel --version   version, commit, backends, CPU kernels\n"
       "run, chat and serve use the built-in TinyStories demo model when neither -m nor KESTREL_MODEL gives one.\n";
  return s;
}

const Command* nearest_command(const char* word) {
  for (const Command& c : commands())
    if (std::strncmp(c.name, word, 2) == 0) return &c;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(usage().c_str(), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V") || !std::strcmp(argv[1], "version")) {
    std::fputs(kestrel::cli::version_text().c_str(), stdout);
    return 0;
  }
  for (const Command& c : commands()) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      const kestrel::cli::Args args(c.name, c.summary, c.options(), argc - 2, argv + 2);
      return c.run(args);
    } catch (const kestrel::cli::HelpShown&) {
      return 0;
    } catch (const kestrel::cli::UsageError& e) {
      std::fprintf(stderr, "kestrel %s: %s\n", c.name, e.what());
      return 2;
    } catch (const kestrel::Error& e) {
      std::fprintf(stderr, "kestrel %s: %s: %s\n", c.name, kestrel_status_name(e.status()), e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  const Command* near = nearest_command(argv[1]);
  std::fprintf(stderr, "kestrel: unknown command '%s'%s%s%s\n%s", argv[1], near ? " (did you mean " : "",
               near ? near->name : "", near ? "?)" : "", usage().c_str());
  return 2;
}
