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

// --kv-type f16|f32|f8_e4m3: the KV cache's element type (f8_e4m3: half of f16's memory).
inline const std::vector<std::string> kCacheOptions = {"--kv-type"};
kestrel_kv_type kv_type_from_args(const Args& a);

// Speculative decoding: --draft MODEL (a draft model; implies --spec draft), --spec none|draft|ngram,
// --spec-k N (most tokens drafted per step). The draft model is loaded with -t/-d like -m.
inline const std::vector<std::string> kSpecOptions = {"--draft", "--spec", "--spec-k"};
struct SpecArgs {
  kestrel_spec_options opts;
  std::string draft_path;  // empty: none
};
SpecArgs spec_from_args(const Args& a);
ModelPtr load_draft_model(const Args& a, const SpecArgs& s);  // null when there is no --draft
// "drafted 120, accepted 96 (80.0%), 3.4 tokens per pass"
std::string spec_summary(int32_t steps, int32_t drafted, int32_t accepted);

}  // namespace kestrel::cli
