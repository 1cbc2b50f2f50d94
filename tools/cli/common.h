// Helpers shared by the CLI subcommands, and the option groups several of them declare (the same
// option is the same flag everywhere: -m/--model, -t/--threads, -d/--device, -c/--ctx-size,
// -n/--n-predict, -f/--file).
#pragma once
#include <string>
#include <vector>

#include "args.h"
#include "kestrel.hpp"

namespace kestrel::cli {

// The options every model-loading command takes (-m defaults to $KESTREL_MODEL; with demo, to
// the built-in demo model after that).
Opts model_options(bool demo = false);
// -c/--ctx-size with the command's own meaning of 0.
Opt ctx_option(const std::string& help);

// The sampling options of run and chat, and the sampler they describe (no --seed: from the clock).
Opts sampler_options();
kestrel_sampler_options sampler_options_from_args(const Args& a);

// Loads -m MODEL with -t/-d, showing a progress bar when stderr is a terminal. With allow_demo,
// no -m and no $KESTREL_MODEL loads the built-in TinyStories model (said on stderr).
ModelPtr load_model_from_args(const Args& a, bool vocab_only = false, bool allow_demo = false);
// The model path -m (or $KESTREL_MODEL) gives; "" when none (then the demo model is used).
std::string model_path_from_args(const Args& a);

// --cache-type-k/-ctk and --cache-type-v/-ctv f16|q8_0|q4_0|f8_e4m3|f32 (llama.cpp's names), and
// --kv-type for both: the KV cache's element types. V defaults to K's.
Opts cache_options();
struct KvTypes {
  kestrel_kv_type k, v;
  // Into a context's or an engine's options (kv_type, kv_type_v).
  template <class Options>
  void apply(Options& o) const {
    o.kv_type = k;
    o.kv_type_v = v;
  }
};
KvTypes kv_types_from_args(const Args& a);
const char* kv_type_name(kestrel_kv_type t);
// Bytes per cached value of t (a block type's 32 values and F16 scale: 34/32 and 18/32).
double kv_value_bytes(kestrel_kv_type t);

// Speculative decoding: --draft MODEL (a draft model; implies --spec draft), --spec none|draft|ngram,
// --spec-k N (most tokens drafted per step). The draft model is loaded with -t/-d like -m.
Opts spec_options();
struct SpecArgs {
  kestrel_spec_options opts;
  std::string draft_path;  // empty: none
};
SpecArgs spec_from_args(const Args& a);
ModelPtr load_draft_model(const Args& a, const SpecArgs& s);  // null when there is no --draft
// "drafted 120, accepted 96 (80.0%), 3.4 tokens per pass"
std::string spec_summary(int32_t steps, int32_t drafted, int32_t accepted);

// A whole file (a prompt, a schema, a template); a UsageError naming the option when unreadable.
std::string read_option_file(const std::string& option, const std::string& path);

// A comma-separated list of token counts (0 .. 1000000), as llama-bench's -p, -n and -d take;
// UsageError naming flag otherwise.
std::vector<int> token_counts(const std::string& flag, const std::string& list);

// --trace FILE (run, bench, serve): a Chrome/Perfetto trace of the command, written when the
// TraceFile goes out of scope (the command's end, or its error).
Opt trace_option();
class TraceFile {
 public:
  explicit TraceFile(const Args& a);
  ~TraceFile();
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

 private:
  std::string path_;
};

}  // namespace kestrel::cli
