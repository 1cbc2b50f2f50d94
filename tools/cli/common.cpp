#include "common.h"

namespace kestrel::cli {

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
