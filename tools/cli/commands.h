// The subcommands of `kestrel`: each one's name, one-line summary, declared options and body.
// main.cpp dispatches through this table, --help and the CLI test read the same declarations.
#pragma once
#include <string>
#include <vector>

#include "args.h"

namespace kestrel::cli {

struct Command {
  const char* name;
  const char* summary;
  Opts (*options)();
  int (*run)(const Args& a);
};
const std::vector<Command>& commands();

// Each subcommand's options and body (tools/cli/cmd_NAME.cpp).
#define KESTREL_CLI_COMMAND(name) \
  Opts name##_options();          \
  int cmd_##name(const Args& a);
KESTREL_CLI_COMMAND(run)
KESTREL_CLI_COMMAND(chat)
KESTREL_CLI_COMMAND(serve)
KESTREL_CLI_COMMAND(info)
KESTREL_CLI_COMMAND(bench)
KESTREL_CLI_COMMAND(eval)
KESTREL_CLI_COMMAND(tokenize)
KESTREL_CLI_COMMAND(template)
KESTREL_CLI_COMMAND(quantize)
KESTREL_CLI_COMMAND(synth)
KESTREL_CLI_COMMAND(perplexity)
KESTREL_CLI_COMMAND(perf)
#undef KESTREL_CLI_COMMAND

// `kestrel --version`: version, git commit, compiled backends, CPU features in use.
std::string version_text();

}  // namespace kestrel::cli
