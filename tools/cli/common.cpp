#include "common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/trace.h"
#include "demo_model.h"

namespace kestrel::cli {

Opts model_options(bool demo) {
  return {{"-m,--model", "FILE",
           demo ? "the GGUF model (default: $KESTREL_MODEL, else the built-in TinyStories demo model)" : "the GGUF model",
           false, "KESTREL_MODEL"},
          {"-t,--threads", "N", "compute threads (default 0: one per core)"},
          {"-d,--device", "NAME", "backend: auto, cpu, cuda or ref (default auto: CUDA when a GPU is there)"}};
}

Opt ctx_option(const std::string& help) { return {"-c,--ctx-size", "N", help}; }

Opts sampler_options() {
  return {{"--temp", "T", "temperature; 0 is greedy (default 0.8)"},
          {"--top-k", "K", "keep the K most likely tokens (default 40; 0: all)"},
          {"--top-p", "P", "nucleus sampling (default 0.95; 1: off)"},
          {"--min-p", "P", "drop tokens below P times the top one's probability (default 0.05)"},
          {"--seed", "S", "random seed (default: from the clock, printed)"},
          {"--repeat-penalty", "X", "penalty for repeating recent tokens (default 1: off)"}};
}

kestrel_sampler_options sampler_options_from_args(const Args& a) {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = static_cast<float>(a.number("--temp", so.temperature));
  so.top_k = static_cast<int32_t>(a.integer("--top-k", so.top_k));
  so.top_p = static_cast<float>(a.number("--top-p", so.top_p));
  so.min_p = static_cast<float>(a.number("--min-p", so.min_p));
  so.repeat_penalty = static_cast<float>(a.number("--repeat-penalty", so.repeat_penalty));
  so.seed = a.has("--seed") ? static_cast<uint64_t>(a.integer("--seed", 0))
                            : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return so;
}

namespace {
kestrel_model_options model_options_from_args(const Args& a, const std::string& device, bool vocab_only) {
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.backend = device.c_str();
  mo.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
  mo.vocab_only = vocab_only;
  if (stderr_is_tty()) mo.progress = progress_bar;
  return mo;
}
}  // namespace

std::string model_path_from_args(const Args& a) { return a.str("--model"); }

ModelPtr load_model_from_args(const Args& a, bool vocab_only, bool allow_demo) {
  const std::string device = a.str("--device", "auto");
  const kestrel_model_options mo = model_options_from_args(a, device, vocab_only);
  const std::string path = model_path_from_args(a);
  if (!path.empty()) return load_model(path, &mo);
  if (!allow_demo) throw UsageError("missing required option --model (or $KESTREL_MODEL)");
  std::fprintf(stderr, "kestrel: no -m MODEL given: using the built-in demo model %s (TinyStories, 260K params)\n",
               kDemoModelName);
  return load_demo_model(&mo);
}

Opts cache_options() {
  const std::string types = "f16, q8_0 (53% of f16's bytes), q4_0 (28%), f8_e4m3 (50%) or f32";
  return {{"--cache-type-k,-ctk", "TYPE", "the KV cache's K type: " + types + " (default f16)"},
          {"--cache-type-v,-ctv", "TYPE", "the KV cache's V type, as --cache-type-k (default: K's)"},
          {"--kv-type", "TYPE", "K's and V's type at once (what -ctk and -ctv do not set)"}};
}

namespace {

kestrel_kv_type parse_kv_type(const std::string& flag, const std::string& t) {
  if (t == "f16") return KESTREL_KV_F16;
  if (t == "f32") return KESTREL_KV_F32;
  if (t == "f8_e4m3") return KESTREL_KV_F8_E4M3;
  if (t == "q8_0") return KESTREL_KV_Q8_0;
  if (t == "q4_0") return KESTREL_KV_Q4_0;
  throw UsageError(flag + ": expected f16, q8_0, q4_0, f8_e4m3 or f32, got '" + t + "'");
}

}  // namespace

KvTypes kv_types_from_args(const Args& a) {
  const kestrel_kv_type both = parse_kv_type("--kv-type", a.str("--kv-type", "f16"));
  KvTypes t{both, both};
  if (a.has("--cache-type-k")) t.k = parse_kv_type("--cache-type-k", a.str("--cache-type-k"));
  t.v = a.has("--cache-type-v") ? parse_kv_type("--cache-type-v", a.str("--cache-type-v"))
        : a.has("--kv-type")    ? both
                                : t.k;
  return t;
}

double kv_value_bytes(kestrel_kv_type t) {
  switch (t) {
    case KESTREL_KV_F32: return 4;
    case KESTREL_KV_F8_E4M3: return 1;
    case KESTREL_KV_Q8_0: return 34.0 / 32;
    case KESTREL_KV_Q4_0: return 18.0 / 32;
    default: return 2;
  }
}

const char* kv_type_name(kestrel_kv_type t) {
  switch (t) {
    case KESTREL_KV_F32: return "f32";
    case KESTREL_KV_F8_E4M3: return "f8_e4m3";
    case KESTREL_KV_Q8_0: return "q8_0";
    case KESTREL_KV_Q4_0: return "q4_0";
    default: return "f16";
  }
}

Opts spec_options() {
  return {{"--draft", "FILE", "speculative decoding with this draft model (same vocabulary)"},
          {"--spec", "MODE", "speculative decoding: none, draft or ngram (prompt lookup) (default none, or draft with --draft)"},
          {"--spec-k", "N", "most tokens drafted per step, 1..64 (default 8)"}};
}

SpecArgs spec_from_args(const Args& a) {
  SpecArgs s;
  kestrel_spec_options_init(&s.opts);
  s.draft_path = a.str("--draft", "");
  const std::string mode = a.str("--spec", s.draft_path.empty() ? "none" : "draft");
  if (mode == "none") s.opts.mode = KESTREL_SPEC_NONE;
  else if (mode == "draft") s.opts.mode = KESTREL_SPEC_DRAFT;
  else if (mode == "ngram") s.opts.mode = KESTREL_SPEC_NGRAM;
  else throw UsageError("--spec: expected none, draft or ngram, got '" + mode + "'");
  if (s.opts.mode == KESTREL_SPEC_DRAFT && s.draft_path.empty()) throw UsageError("--spec draft needs --draft MODEL");
  s.opts.k_max = static_cast<int32_t>(a.integer("--spec-k", s.opts.k_max));
  if (s.opts.k_max < 1 || s.opts.k_max > 64) throw UsageError("--spec-k: expected 1..64");
  return s;
}

ModelPtr load_draft_model(const Args& a, const SpecArgs& s) {
  if (s.draft_path.empty()) return nullptr;
  const std::string device = a.str("--device", "auto");
  const kestrel_model_options mo = model_options_from_args(a, device, false);
  return load_model(s.draft_path, &mo);
}

std::string spec_summary(int32_t steps, int32_t drafted, int32_t accepted) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "drafted %d, accepted %d (%.1f%%), %.2f tokens per pass", drafted, accepted,
                drafted > 0 ? 100.0 * accepted / drafted : 0.0, steps > 0 ? 1.0 + static_cast<double>(accepted) / steps : 1.0);
  return buf;
}

std::string read_option_file(const std::string& option, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError(option + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int> token_counts(const std::string& flag, const std::string& list) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > 1000000)
      throw UsageError(flag + ": expected a list of token counts, got '" + list + "'");
    out.push_back(static_cast<int>(v));
    pos = comma + 1;
  }
  return out;
}

Opt trace_option() {
  return {"--trace", "FILE.json", "write a Chrome/Perfetto trace (ops per thread, engine steps, scheduler "
                                  "decisions, speculation) to FILE.json; open it in ui.perfetto.dev"};
}

TraceFile::TraceFile(const Args& a) : path_(a.str("--trace")) {
  if (!path_.empty()) trace::start();
}

TraceFile::~TraceFile() {
  if (path_.empty()) return;
  const Status st = trace::write(path_);
  if (st.ok()) std::fprintf(stderr, "kestrel: wrote the trace %s\n", path_.c_str());
  else std::fprintf(stderr, "kestrel: %s\n", st.message().c_str());
}

}  // namespace kestrel::cli
