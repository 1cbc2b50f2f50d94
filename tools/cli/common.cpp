#include "common.h"

#include <chrono>
#include <cstdio>

namespace kestrel::cli {

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
ModelPtr load_with_args(const Args& a, const std::string& path, bool vocab_only) {
  const std::string device = a.str("--device", "auto");
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.backend = device.c_str();
  mo.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
  mo.vocab_only = vocab_only;
  if (stderr_is_tty()) mo.progress = progress_bar;
  return load_model(path, &mo);
}
}  // namespace

ModelPtr load_model_from_args(const Args& a, bool vocab_only) { return load_with_args(a, a.required("--model"), vocab_only); }

kestrel_kv_type kv_type_from_args(const Args& a) {
  const std::string t = a.str("--kv-type", "f16");
  if (t == "f16") return KESTREL_KV_F16;
  if (t == "f32") return KESTREL_KV_F32;
  if (t == "f8_e4m3") return KESTREL_KV_F8_E4M3;
  throw UsageError("--kv-type: expected f16, f32 or f8_e4m3, got '" + t + "'");
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
  return s.draft_path.empty() ? nullptr : load_with_args(a, s.draft_path, false);
}

std::string spec_summary(int32_t steps, int32_t drafted, int32_t accepted) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "drafted %d, accepted %d (%.1f%%), %.2f tokens per pass", drafted, accepted,
                drafted > 0 ? 100.0 * accepted / drafted : 0.0, steps > 0 ? 1.0 + static_cast<double>(accepted) / steps : 1.0);
  return buf;
}

}  // namespace kestrel::cli
