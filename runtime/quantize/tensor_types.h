// Per-tensor type choice for a file type: llama.cpp's llama_tensor_get_type (no importance
// matrix), restricted to the file types we write. Internal to runtime/quantize.
#pragma once
#include <string>

#include "core/status.h"
#include "gguf/gguf.h"
#include "quantize/quantize.h"

namespace kestrel::quant {

// The few model facts the rules look at, read from the standard GGUF keys.
struct ModelFacts {
  std::string arch;
  int n_layer = 0;
  int n_expert = 0;
  int n_gqa = 0;               // n_head / n_head_kv (0 when n_head_kv is 0)
  bool is_70b = false;         // llama.cpp's LLM_TYPE_70B (llama, 80 layers, GQA)
  bool tied_embeddings = true; // no output.weight: token_embd doubles as the output head
  int n_attention_wv = 0;      // attn_v-like tensors (attn_v, attn_qkv, attn_kv_b)
};
ModelFacts read_model_facts(const gguf::File& f);

// llama.cpp's tensor_allows_quantization: 2-D/3-D tensors named "*weight", except norms, the MoE
// router and a list of small or special tensors.
bool tensor_is_quantizable(const gguf::TensorInfo& t);

// llama.cpp's tensor order when it walks a model: tensors outside blocks first, then by block
// number, names alphabetically within each. The mix rules count tensors in this order.
bool tensor_order_less(const std::string& a, const std::string& b);

// Chooses types for a model's tensors; call choose() in tensor_order_less order (it counts
// attn_v and ffn_down tensors as llama.cpp does).
class TypeChooser {
 public:
  TypeChooser(ModelFacts facts, FileType ftype, DType default_type, bool pure)
      : m_(std::move(facts)), ftype_(ftype), default_type_(default_type), pure_(pure) {}
  // The type for t (t.type itself when it is not quantized); *fallback tells whether the row
  // length forced a replacement of the chosen type.
  Expected<DType> choose(const gguf::TensorInfo& t, bool* fallback);

 private:
  Expected<DType> mix_rule(const gguf::TensorInfo& t, DType type);
  ModelFacts m_;
  FileType ftype_;
  DType default_type_;
  bool pure_;
  int i_attention_wv_ = 0;
  int i_ffn_down_ = 0;
};

}  // namespace kestrel::quant
