// A loaded model: the mapped GGUF, hyper-parameters, vocabulary and weights (views into the
// mapping). Immutable after load, so any number of contexts and threads may share it.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "tensor/tensor.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

// Weights of one transformer block; absent tensors are nullptr. Shared blocks read the fields
// they need; an architecture's bind() fills the ones it has.
struct LayerWeights {
  const Tensor* attn_norm = nullptr;
  const Tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  const Tensor *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const Tensor *q_norm = nullptr, *k_norm = nullptr;  // per-head RMSNorm gains [head_dim]
  const Tensor* attn_sinks = nullptr;                 // per-head sink logits [n_head]
  // Multi-head latent attention: q through a low-rank pair (wq_a, q_a_norm, wq_b; or wq),
  // one compressed latent + shared rope part (wkv_a_mqa, kv_a_norm), and the per-head absorbed
  // matrices wk_b [qk_nope, kv_lora, n_head] and wv_b [kv_lora, v_head, n_head].
  const Tensor *wq_a = nullptr, *q_a_norm = nullptr, *wq_b = nullptr;
  const Tensor *wkv_a_mqa = nullptr, *kv_a_norm = nullptr, *wk_b = nullptr, *wv_b = nullptr;
  const Tensor* ffn_norm = nullptr;
  // Sandwich norms (Gemma): on the attention's and the FFN's output, before each residual add.
  const Tensor *attn_post_norm = nullptr, *ffn_post_norm = nullptr;
  const Tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
  // Mixture of experts: router [n_embd, n_expert] (+ bias), selection bias [n_expert], experts
  // [K, N, n_expert] (+ biases [N, n_expert]), shared expert (dense, added unweighted).
  const Tensor *ffn_gate_inp = nullptr, *ffn_gate_inp_b = nullptr, *exp_probs_b = nullptr;
  const Tensor *ffn_gate_exps = nullptr, *ffn_up_exps = nullptr, *ffn_down_exps = nullptr;
  const Tensor *ffn_gate_exps_b = nullptr, *ffn_up_exps_b = nullptr, *ffn_down_exps_b = nullptr;
  const Tensor *ffn_gate_shexp = nullptr, *ffn_up_shexp = nullptr, *ffn_down_shexp = nullptr;
  // LatentMoE: the routed experts work in a narrower width, [n_embd -> latent] and back.
  const Tensor *ffn_latent_down = nullptr, *ffn_latent_up = nullptr;
  // Mamba-2 (hybrid models): the in-projection to z | x B C | dt, the depthwise conv and its
  // bias, the dt bias, A and D per head, the gated group norm's gain, the out-projection.
  const Tensor *ssm_in = nullptr, *ssm_conv1d = nullptr, *ssm_conv1d_b = nullptr, *ssm_dt_b = nullptr;
  const Tensor *ssm_a = nullptr, *ssm_d = nullptr, *ssm_norm = nullptr, *ssm_out = nullptr;
};

// A multi-token-prediction block (GLM-4.5's NextN): a decoder block fed eh_proj of the
// normed embedding of the next token (enorm) beside the normed hidden state (hnorm).
struct NextNWeights {
  LayerWeights block;
  const Tensor *eh_proj = nullptr, *enorm = nullptr, *hnorm = nullptr, *shared_head_norm = nullptr;
};

struct ModelWeights {
  const Tensor* tok_embd = nullptr;
  const Tensor* output_norm = nullptr;
  const Tensor* output = nullptr;  // tok_embd when tied
  const Tensor* rope_freqs = nullptr;
  std::vector<LayerWeights> layers;
  std::vector<NextNWeights> nextn;  // bound for a later MTP drafter; the forward pass skips them
};

struct ModelLoadOptions {
  std::string backend = "auto";
  int n_threads = 0;
  bool use_mmap = true;
  bool vocab_only = false;  // tokenizer only: no architecture, hyper-parameters or weights
  bool (*progress)(float, void*) = nullptr;
  void* progress_user = nullptr;
};

class Model {
 public:
  static Expected<std::unique_ptr<Model>> load(const std::string& path, const ModelLoadOptions& opts);
  ~Model();
  // Builds a model from an in-memory GGUF (tests).
  static Expected<std::unique_ptr<Model>> from_file(std::unique_ptr<gguf::File> file, const ModelLoadOptions& opts);

  const gguf::File& file() const { return *file_; }
  const HParams& hparams() const { return hp_; }
  const ArchDef& arch() const { return *arch_; }  // not for vocab-only models
  bool vocab_only() const { return arch_ == nullptr; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelLoadOptions& options() const { return opts_; }
  // The backend's model-lifetime half: it holds the placed weights every context of the model
  // shares (not for vocab-only models). Thread-safe.
  Device& device() const { return *device_; }

  // Tensor look-up for bind(): `require` fails with FORMAT naming the tensor when it is missing
  // or its shape differs from ne (entries < 0 are not checked); `optional` returns nullptr when
  // absent but still checks the shape when present. Names may use %d for the layer index.
  Expected<const Tensor*> require(const std::string& name, std::vector<int64_t> ne, int layer = -1) const;
  Expected<const Tensor*> optional(const std::string& name, std::vector<int64_t> ne, int layer = -1) const;

  // A matrix's second-level scale, expanded for a MUL after its product (second_scales.cpp): [N]
  // for w [K, N], [N, n] for n stacked matrices; nullptr when the file has none for w.
  const Tensor* second_scale(const Tensor* w) const;

  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t n_params() const { return n_params_; }
  // Parameters one token reads: the total less the experts it does not use.
  uint64_t n_params_active() const;
  // The KV cache layout of this model (the architecture's, or the plain one).
  KvLayout kv_layout() const;

  // The tensor table the architecture binds for this metadata (a GGUF that needs no tensors):
  // every tensor bind() asks for, required or optional, with its shape. synth.cpp fills it.
  using TensorTable = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  // hp (if given) receives the hyper-parameters read from the metadata.
  static Expected<TensorTable> tensor_table(std::unique_ptr<gguf::File> metadata, HParams* hp = nullptr);
  // JSON: architecture, hyper-parameters, vocabulary, tensors, memory.
  std::string describe_json() const;

 private:
  Model() = default;
  Status init();
  Status bind_second_scales();  // after the architecture's bind()
  std::unique_ptr<gguf::File> file_;
  HParams hp_;
  const ArchDef* arch_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelWeights weights_;
  ModelLoadOptions opts_;
  mutable std::unordered_map<std::string, Tensor> tensors_;  // mutable: recording mode adds
  std::unordered_map<const Tensor*, const Tensor*> second_scales_;  // matrix -> its expanded scale
  std::deque<std::vector<float>> scale_storage_;  // what those expanded scales point at
  std::unique_ptr<Device> device_;  // declared after tensors_: destroyed before them
  uint64_t weight_bytes_ = 0, n_params_ = 0;
  bool recording_ = false;        // tensor_table(): require/optional record instead of look up
  mutable TensorTable recorded_;
};

}  // namespace kestrel

// In bind(): dst = value of an Expected, or return its Status.
#define KS_TRY_BIND(dst, expr)        \
  do {                                \
    auto r_ = (expr);                 \
    if (!r_.ok()) return r_.status(); \
    dst = r_.value();                 \
  } while (0)
