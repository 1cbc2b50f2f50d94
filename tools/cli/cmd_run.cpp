// kestrel run: generate a continuation of a prompt, streamed to stdout (logs go to stderr).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "common.h"

namespace kestrel::cli {
namespace {

struct RunOutput {
  std::chrono::steady_clock::time_point first_token;
  int n_pieces = 0;
};

bool print_piece(kestrel_token, const char* piece, size_t len, void* user) {
  auto* out = static_cast<RunOutput*>(user);
  if (out->n_pieces++ == 0) out->first_token = std::chrono::steady_clock::now();
  std::fwrite(piece, 1, len, stdout);
  std::fflush(stdout);
  return true;
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Opts run_options() {
  return model_options(true) +
         Opts{{"-p,--prompt", "TEXT", "the prompt (default: -f FILE, else standard input)"},
              {"-f,--file", "FILE", "read the prompt from FILE"},
              {"-n,--n-predict", "N", "most tokens to generate (default 128)"},
              ctx_option("context size in tokens (default 0: the model's training context)"),
              {"--grammar-file", "FILE", "only text this GBNF grammar allows (docs/GRAMMAR.md)"},
              {"--json-schema", "SCHEMA", "only JSON this schema allows (a file, or inline JSON)"},
              {"--no-add-special", "", "do not add BOS/EOS to the prompt"},
              {"--parse-special", "", "read special-token text in the prompt as those tokens"},
              {"--echo", "", "print the prompt before the continuation"},
              {"--color", "", "print the prompt before the continuation, in color on a terminal"}} +
         sampler_options() + spec_options() + cache_options() + Opts{trace_option()};
}

int cmd_run(const Args& a) {
  const TraceFile trace(a);
  // Every option is parsed before the (slow) load, so a typo fails at once.
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  kv_types_from_args(a).apply(co);
  co.n_ctx = static_cast<uint32_t>(a.integer("--ctx-size", 0));
  const kestrel_sampler_options so = sampler_options_from_args(a);
  const SpecArgs spec = spec_from_args(a);

  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = static_cast<int32_t>(a.integer("--n-predict", 128));
  go.add_special = !a.has("--no-add-special");
  go.parse_special = a.has("--parse-special");
  go.sampling = &so;
  RunOutput out;
  go.on_token = print_piece;
  go.user = &out;
  // Constrained decoding (docs/GRAMMAR.md): a GBNF file, or a JSON Schema (a file, or inline JSON).
  if (a.has("--grammar-file") && a.has("--json-schema")) throw UsageError("--grammar-file and --json-schema exclude each other");
  if (a.has("--prompt") && a.has("--file")) throw UsageError("--prompt and --file exclude each other");
  const std::string grammar = a.has("--grammar-file") ? read_option_file("--grammar-file", a.str("--grammar-file")) : "";
  std::string schema = a.str("--json-schema");
  if (!schema.empty() && schema[0] != '{') schema = read_option_file("--json-schema", schema);
  go.grammar = grammar.empty() ? nullptr : grammar.c_str();
  go.json_schema = schema.empty() ? nullptr : schema.c_str();
  const std::string prompt = a.has("--prompt") ? a.str("--prompt")
                             : a.has("--file") ? read_option_file("--file", a.str("--file"))
                                               : read_all_stdin();
  const auto t_load = std::chrono::steady_clock::now();
  ModelPtr model = load_model_from_args(a, false, /*allow_demo=*/true);
  ContextPtr ctx = new_context(model.get(), &co);
  ModelPtr draft = load_draft_model(a, spec);
  ContextPtr draft_ctx;
  if (draft) {
    co.n_ctx = kestrel_context_n_ctx(ctx.get()) + 128;  // room for the draft beyond the text
    draft_ctx = new_context(draft.get(), &co);
  }
  kestrel_spec_stats stats{};
  stats.struct_size = sizeof stats;
  go.speculative = &spec.opts;
  go.draft = draft_ctx.get();
  go.spec_stats = &stats;
  const size_t n_prompt = tokenize(model.get(), prompt, go.add_special, go.parse_special).size();
  if (a.has("--color") || a.has("--echo")) {
    const bool color = a.has("--color") && isatty(STDOUT_FILENO);
    std::fprintf(stdout, "%s%s%s", color ? "\x1b[1;33m" : "", prompt.c_str(), color ? "\x1b[0m" : "");
    std::fflush(stdout);
  }
  int32_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  out.first_token = t0;
  check(kestrel_generate(ctx.get(), prompt.c_str(), &go, &n));
  const auto t_end = std::chrono::steady_clock::now();
  // Like llama.cpp: load, prompt (until the first token) and generation (the tokens after it) apart.
  const double load_s = seconds_between(t_load, t0), prompt_s = seconds_between(t0, out.first_token);
  const double gen_s = seconds_between(out.first_token, t_end);
  std::fprintf(stderr, "\n\n[load %.3f s | prompt %zu tokens in %.3f s, %.1f tokens/s | generated %d tokens in %.2f s, %.1f tokens/s | seed %llu]\n",
               load_s, n_prompt, prompt_s, prompt_s > 0 ? n_prompt / prompt_s : 0.0, n, gen_s,
               n > 1 && gen_s > 0 ? (n - 1) / gen_s : 0.0, static_cast<unsigned long long>(so.seed));
  if (spec.opts.mode != KESTREL_SPEC_NONE)
    std::fprintf(stderr, "[speculative (%s): %s]\n", spec.opts.mode == KESTREL_SPEC_DRAFT ? "draft" : "ngram",
                 spec_summary(stats.n_steps, stats.n_drafted, stats.n_accepted).c_str());
  return 0;
}

}  // namespace kestrel::cli
