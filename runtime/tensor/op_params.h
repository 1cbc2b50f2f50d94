// The typed parameters of each op (ops.def names the struct of every op). Plain, trivially
// copyable structs, so a device backend can pass them to a kernel by value, without implicit
// padding (where alignment needs some, an explicit zeroed member), so their bytes can be compared:
// the CUDA backend's step graphs key on them.
#pragma once
#include <cstdint>
#include <variant>

namespace kestrel {

struct NoParams {};

struct NormParams {  // RMS_NORM
  float eps = 1e-5f;
};

struct SoftmaxParams {  // SOFTMAX: softmax(x * scale)
  float scale = 1.0f;
};

// Rope variants (what the GGUF architecture implies).
enum RopeMode : int32_t { ROPE_NORMAL = 0, ROPE_NEOX = 2 };

struct RopeParams {  // ROPE
  int32_t n_rot = 0;  // rotated dims per head (<= head_dim)
  int32_t mode = ROPE_NORMAL;
  int32_t n_ctx_orig = 0;  // YaRN original context
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
  float ext_factor = 0.0f;  // YaRN extrapolation mix (0 = off)
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

struct AttentionParams {  // ATTENTION
  float scale = 1.0f;    // applied to q.k
  float softcap = 0.0f;  // logit soft-capping (0 = off)
  int32_t window = 0;    // sliding window in positions (0 = full causal)
};

struct RouterParams {  // ROUTER
  int32_t gating = 1;  // 1 softmax over all experts, 2 sigmoid, 3 softmax over the chosen logits
  int32_t n_used = 0;
  int32_t n_groups = 0;  // expert groups (0/1 = none) and how many are kept
  int32_t n_groups_used = 0;
  bool normalize = false;      // chosen weights divided by their sum
  uint8_t unused_[3] = {0, 0, 0};
  float weights_scale = 0.0f;  // 0 = none
};

struct SwigluOaiParams {  // SWIGLU_OAI
  float alpha = 1.702f;
  float limit = 7.0f;
};

// Mamba-2 (SSM_CONV, SSM_SCAN). The ssm_in output holds per token z [d_inner], then the conv
// input x | B | C [d_inner + 2 * n_group * d_state], then dt [n_head].
struct SsmParams {
  int32_t d_inner = 0;  // n_head * head_dim
  int32_t n_head = 0;
  int32_t n_group = 0;  // B and C groups; head h reads group h / (n_head / n_group)
  int32_t d_state = 0;
};

static_assert(sizeof(RouterParams) == 24, "RouterParams: padding must stay explicit");

using OpParams = std::variant<NoParams, NormParams, SoftmaxParams, RopeParams, AttentionParams, RouterParams,
                              SwigluOaiParams, SsmParams>;

}  // namespace kestrel
