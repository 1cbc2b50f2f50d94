// kestrel info's default output: a short summary of a model for people (the JSON is --json).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace kestrel::cli {

struct InfoInputs {
  nlohmann::json desc;         // kestrel_model_describe
  std::string chat_template;   // tokenizer.chat_template ("" when absent)
  int64_t n_ctx = 0;           // the context to size the KV cache for
  std::string kv_type;         // "f16", "q8_0", ... or "K q8_0, V f16"
  uint64_t kv_bytes_per_token = 0;  // of those types
  nlohmann::json cuda;         // device_needs() for the CUDA backend (null: not compiled)
};

std::string info_summary(const InfoInputs& in);
std::string human_bytes(double bytes);
// "292.8K", "1.24B"
std::string human_count(double n);

}  // namespace kestrel::cli
