// Hyper-parameters read once from the standard GGUF keys ("<arch>.embedding_length", ...).
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/graph.h"

namespace kestrel {

struct HParams {
  std::string arch;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;  // attention.key_length, default n_embd / n_head
  int32_t head_dim_v = 0;  // attention.value_length, default head_dim_k
  int32_t n_ff = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;         // n_rot, base, linear/YaRN scaling (mode is set by the architecture)
  std::string rope_scaling_type;  // "none", "linear", "yarn", ...
  float rope_scaling_factor = 0;  // as stored (0 = absent)

  int64_t k_row() const { return int64_t{head_dim_k} * n_head_kv; }
  int64_t v_row() const { return int64_t{head_dim_v} * n_head_kv; }
};

// Reads and validates the hyper-parameters of architecture `arch` (KESTREL_ERR_FORMAT naming the
// key when one is missing, of the wrong type or out of range).
Expected<HParams> read_hparams(const gguf::File& f, const std::string& arch);

}  // namespace kestrel
