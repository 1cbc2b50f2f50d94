// kestrel: the command-line front end. One file per subcommand.
#include <cstdio>
#include <cstring>
#include <exception>

#include "args.h"
#include "kestrel.hpp"

namespace {

const char* kUsage =
    "usage: kestrel <command> [options]\n"
    "commands:\n"
    "  run       -m MODEL -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [-t THREADS]\n"
    "  eval      -m MODEL --tokens ID,ID,... [--n-predict N] [--top K]   (JSON, reference schema)\n"
    "  info      -m MODEL                                                 (JSON)\n"
    "  tokenize  -m MODEL [-p TEXT | stdin] [--no-add-special] [--parse-special] [--show-pieces]\n"
    "  template  (-m MODEL | --template FILE) --messages FILE.json [--tools FILE.json]\n"
    "            [--add-generation-prompt] [--bos TEXT --eos TEXT]\n"
    "  chat      -m MODEL [--system TEXT] [--chat-template FILE] [-c CTX] [-n N] [--temp T] [-t THREADS]\n"
    "            [--tools FILE.json [--tool-choice auto|none|required|NAME]]\n"
    "  bench     -m MODEL [-p 512[,128..]] [-n 128[,..]] [-t THREADS] [-r REPS] [--json] [--per-op]\n"
    "  quantize  IN.gguf OUT.gguf TYPE [-t THREADS]\n"
    "  serve     -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [-c CTX] [--alias NAME]\n"
    "  synth     PRESET | --arch ARCH [--set KEY=VALUE ...] [--type TYPE] [--layers N] [--vocab N] [-o OUT.gguf] [--seed S] (--list)\n"
    "run, eval, chat, bench, serve and info take --kv-type f16|f32|f8_e4m3 (the KV cache's type; default f16)\n";

struct Command {
  const char* name;
  int (*fn)(int, char**);
};
const Command kCommands[] = {
    {"run", kestrel::cli::cmd_run},
    {"eval", kestrel::cli::cmd_eval},
    {"info", kestrel::cli::cmd_info},
    {"tokenize", kestrel::cli::cmd_tokenize},
    {"template", kestrel::cli::cmd_template},
    {"chat", kestrel::cli::cmd_chat},
    {"bench", kestrel::cli::cmd_bench},
    {"quantize", kestrel::cli::cmd_quantize},
    {"synth", kestrel::cli::cmd_synth},
    {"serve", kestrel::cli::cmd_serve},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.fn(argc - 2, argv + 2);
    } catch (const kestrel::cli::UsageError& e) {
      std::fprintf(stderr, "kestrel %s: %s\n%s", c.name, e.what(), kUsage);
      return 2;
    } catch (const kestrel::Error& e) {
      std::fprintf(stderr, "kestrel %s: %s: %s\n", c.name, kestrel_status_name(e.status()), e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "kestrel: unknown command '%s'\n%s", argv[1], kUsage);
  return 2;
}
