// Helpers shared by the CLI subcommands.
#pragma once
#include <string>

#include "args.h"
#include "kestrel.hpp"

namespace kestrel::cli {

// The options every model-loading command takes.
inline const std::vector<std::string> kModelOptions = {"-m,--model", "-t,--threads", "-d,--device"};

// The sampling options of run and chat, and the sampler they describe (no --seed: from the clock).
inline const std::vector<std::string> kSamplerOptions = {"--temp", "--top-k", "--top-p", "--min-p", "--seed",
                                                         "--repeat-penalty"};
kestrel_sampler_options sampler_options_from_args(const Args& a);

// Loads -m MODEL with -t/-d, showing a progress bar when stderr is a terminal.
ModelPtr load_model_from_args(const Args& a, bool vocab_only = false);

}  // namespace kestrel::cli
