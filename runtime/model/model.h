// A loaded model: the mapped GGUF, hyper-parameters, vocabulary and weights (views into the
// mapping). Immutable after load, so any number of contexts and threads may share it.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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
  const Tensor *q_norm = nullptr, *k_norm = nullptr;
  const Tensor* ffn_norm = nullptr;
  const Tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
};

struct ModelWeights {
  const Tensor* tok_embd = nullptr;
  const Tensor* output_norm = nullptr;
  const Tensor* output = nullptr;  // tok_embd when tied
  const Tensor* rope_freqs = nullptr;
  std::vector<LayerWeights> layers;
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
  // Builds a model from an in-memory GGUF (tests).
  static Expected<std::unique_ptr<Model>> from_file(std::unique_ptr<gguf::File> file, const ModelLoadOptions& opts);

  const gguf::File& file() const { return *file_; }
  const HParams& hparams() const { return hp_; }
  const ArchDef& arch() const { return *arch_; }  // not for vocab-only models
  bool vocab_only() const { return arch_ == nullptr; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelWeights& weights() const { return weights_; }
  const ModelLoadOptions& options() const { return opts_; }

  // Tensor look-up for bind(): `require` fails with FORMAT naming the tensor when it is missing
  // or its shape differs from ne (entries < 0 are not checked); `optional` returns nullptr when
  // absent but still checks the shape when present. Names may use %d for the layer index.
  Expected<const Tensor*> require(const std::string& name, std::vector<int64_t> ne, int layer = -1) const;
  Expected<const Tensor*> optional(const std::string& name, std::vector<int64_t> ne, int layer = -1) const;

  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t n_params() const { return n_params_; }
  // JSON: architecture, hyper-parameters, vocabulary, tensors, memory.
  std::string describe_json() const;

 private:
  Model() = default;
  Status init();
  std::unique_ptr<gguf::File> file_;
  HParams hp_;
  const ArchDef* arch_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelWeights weights_;
  ModelLoadOptions opts_;
  std::unordered_map<std::string, Tensor> tensors_;
  uint64_t weight_bytes_ = 0, n_params_ = 0;
};

}  // namespace kestrel

// In bind(): dst = value of an Expected, or return its Status.
#define KS_TRY_BIND(dst, expr)        \
  do {                                \
    auto r_ = (expr);                 \
    if (!r_.ok()) return r_.status(); \
    dst = r_.value();                 \
  } while (0)
