// kestrel info: the model's architecture, hyper-parameters, tensors and memory needs as JSON on
// stdout, and a one-line summary on stderr: total vs active parameters per token, KV bytes per
// token (and what full K/V would take when the cache is compressed, as MLA's is).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"

namespace kestrel::cli {

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, kModelOptions, {});
  ModelPtr model = load_model_from_args(a);
  const std::string desc = describe(model.get());
  std::printf("%s\n", desc.c_str());
  const nlohmann::json d = nlohmann::json::parse(desc, nullptr, false);
  if (!d.is_discarded() && d.contains("memory")) {
    const auto& mem = d["memory"];
    const double total = d.value("n_params", 0.0), active = d.value("n_params_active", total);
    const double kv = mem.value("kv_bytes_per_token", 0.0), kv_full = mem.value("kv_bytes_per_token_full_kv", kv);
    std::fprintf(stderr, "%s: %.4g params, %.4g active per token (%.1f%%); KV cache %.0f bytes/token",
                 d.value("architecture", std::string("?")).c_str(), total, active,
                 total > 0 ? 100.0 * active / total : 0.0, kv);
    if (kv_full > kv) std::fprintf(stderr, " (full K/V would be %.0f: %.1fx smaller)", kv_full, kv_full / kv);
    std::fprintf(stderr, "\n");
  }
  return 0;
}

}  // namespace kestrel::cli
