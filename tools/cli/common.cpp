#include "common.h"

#include <chrono>

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

ModelPtr load_model_from_args(const Args& a, bool vocab_only) {
  const std::string path = a.required("--model");
  const std::string device = a.str("--device", "auto");
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.backend = device.c_str();
  mo.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
  mo.vocab_only = vocab_only;
  if (stderr_is_tty()) mo.progress = progress_bar;
  return load_model(path, &mo);
}

}  // namespace kestrel::cli
