// kestrel run: generate a continuation of a prompt, streamed to stdout (logs go to stderr).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common.h"

namespace kestrel::cli {
namespace {

std::string read_option_file(const std::string& option, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("run: " + option + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool print_piece(kestrel_token, const char* piece, size_t len, void*) {
  std::fwrite(piece, 1, len, stdout);
  std::fflush(stdout);
  return true;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  std::vector<std::string> opts = kModelOptions;
  opts.insert(opts.end(), kSamplerOptions.begin(), kSamplerOptions.end());
  opts.insert(opts.end(), kSpecOptions.begin(), kSpecOptions.end());
  opts.insert(opts.end(), kCacheOptions.begin(), kCacheOptions.end());
  opts.insert(opts.end(), {"-p,--prompt", "-n,--n-predict", "-c,--ctx-size", "--grammar-file", "--json-schema"});
  Args a(argc, argv, opts, {"--no-add-special", "--parse-special"});
  // Every option is parsed before the (slow) load, so a typo fails at once.
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.kv_type = kv_type_from_args(a);
  co.n_ctx = static_cast<uint32_t>(a.integer("--ctx-size", 0));
  const kestrel_sampler_options so = sampler_options_from_args(a);
  const SpecArgs spec = spec_from_args(a);

  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = static_cast<int32_t>(a.integer("--n-predict", 128));
  go.add_special = !a.has("--no-add-special");
  go.parse_special = a.has("--parse-special");
  go.sampling = &so;
  go.on_token = print_piece;
  // Constrained decoding (docs/GRAMMAR.md): a GBNF file, or a JSON Schema (a file, or inline JSON).
  if (a.has("--grammar-file") && a.has("--json-schema")) throw UsageError("run: --grammar-file and --json-schema exclude each other");
  const std::string grammar = a.has("--grammar-file") ? read_option_file("--grammar-file", a.str("--grammar-file")) : "";
  std::string schema = a.str("--json-schema");
  if (!schema.empty() && schema[0] != '{') schema = read_option_file("--json-schema", schema);
  go.grammar = grammar.empty() ? nullptr : grammar.c_str();
  go.json_schema = schema.empty() ? nullptr : schema.c_str();
  a.required("--model");
  const std::string prompt = a.has("--prompt") ? a.str("--prompt") : read_all_stdin();
  ModelPtr model = load_model_from_args(a);
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
  int32_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(kestrel_generate(ctx.get(), prompt.c_str(), &go, &n));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n[%d tokens in %.2f s, %.1f tokens/s, seed %llu]\n", n, s, n / (s > 0 ? s : 1),
               static_cast<unsigned long long>(so.seed));
  if (spec.opts.mode != KESTREL_SPEC_NONE)
    std::fprintf(stderr, "[speculative (%s): %s]\n", spec.opts.mode == KESTREL_SPEC_DRAFT ? "draft" : "ngram",
                 spec_summary(stats.n_steps, stats.n_drafted, stats.n_accepted).c_str());
  return 0;
}

}  // namespace kestrel::cli
