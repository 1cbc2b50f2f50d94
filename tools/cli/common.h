// Helpers shared by the CLI subcommands.
#pragma once
#include <string>

#include "args.h"
#include "kestrel.hpp"

namespace kestrel::cli {

// The options every model-loading command takes.
inline const std::vector<std::string> kModelOptions = {"-m,--model", "-t,--threads", "-d,--device"};

// Loads -m MODEL with -t/-d, showing a progress bar when stderr is a terminal.
ModelPtr load_model_from_args(const Args& a, bool vocab_only = false);

}  // namespace kestrel::cli
