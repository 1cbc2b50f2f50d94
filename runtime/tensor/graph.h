// A forward pass as a list of nodes in execution order. Model code builds it through
// model/builder.h; backends execute node ranges; plan() places every intermediate tensor in one
// arena, reusing memory once a tensor's last reader has run.
#pragma once
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"

namespace kestrel {

enum class Op : uint8_t {
#define KS_OP(name, doc) name,
#include "tensor/ops.def"
#undef KS_OP
  COUNT
};
const char* op_name(Op op);

// Rope variants (what the GGUF architecture implies).
enum RopeMode : int32_t { ROPE_NORMAL = 0, ROPE_NEOX = 2 };

struct RopeParams {
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
void rope_params_store(const RopeParams& p, int32_t* ip, float* fp);
RopeParams rope_params_load(const int32_t* ip, const float* fp);

// What ATTENTION needs to know about the batch and the paged cache (built by the KV cache).
// Cells are grouped in blocks of block_size; each sequence has a block table, the physical
// blocks it reads in its own order (blocks of a shared prefix appear in several tables). Token t
// reads the cells of its sequence's table only: cell(t, i) for i in [0, n_cells_of(t)), in that
// order, whatever other sequences share the batch.
struct AttentionBatch {
  int32_t n_tokens = 0;
  const int32_t* token_pos = nullptr;  // [n_tokens]
  const int32_t* token_seq = nullptr;  // [n_tokens]
  const int32_t* cell_pos = nullptr;   // [every cell]; -1 = empty
  int32_t block_size = 1;
  const int32_t* table_begin = nullptr;  // [n_seq + 1]: sequence s owns tables[table_begin[s] .. table_begin[s + 1])
  const int32_t* tables = nullptr;       // physical block ids
  int32_t max_cells = 0;                 // the largest n_cells_of over the batch's tokens

  int32_t n_cells_of(int32_t t) const {
    const int32_t s = token_seq[t];
    return (table_begin[s + 1] - table_begin[s]) * block_size;
  }
  int32_t cell(int32_t t, int32_t i) const {
    return tables[table_begin[token_seq[t]] + i / block_size] * block_size + i % block_size;
  }
  // f(i, cell(t, i)) for i = 0, 1, ... n_cells_of(t) - 1, block by block (no division per cell).
  template <class F>
  void for_each_cell(int32_t t, F&& f) const {
    const int32_t s = token_seq[t];
    int32_t i = 0;
    for (int32_t k = table_begin[s]; k < table_begin[s + 1]; ++k)
      for (int32_t c = tables[k] * block_size, e = c + block_size; c < e; ++c) f(i++, c);
  }
  // Cell c (of t's table) is visible to token t when it holds a position <= token_pos[t] and, with
  // a sliding window W, token_pos[t] - cell_pos[c] < W.
  bool visible(int32_t t, int32_t c, int32_t window) const {
    const int32_t cp = cell_pos[c];
    if (cp < 0 || cp > token_pos[t]) return false;
    return window <= 0 || token_pos[t] - cp < window;
  }
};

struct Node {
  Op op = Op::COUNT;
  Tensor* dst = nullptr;
  Tensor* src[4] = {nullptr, nullptr, nullptr, nullptr};
  int32_t ip[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float fp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const void* aux = nullptr;
};

class Graph {
 public:
  // A tensor whose memory the caller owns (weights, caches, inputs set before run).
  Tensor* external(const Tensor& t);
  // An intermediate; memory is assigned by plan().
  Tensor* intermediate(DType type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
  // A contiguous reshape sharing src's memory.
  Tensor* reshape(Tensor* src, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
  // A view of columns [c0, c0 + n) of a 2-D contiguous tensor.
  Tensor* columns(Tensor* src, int64_t c0, int64_t n);
  // A strided view: shape [ne0, ne1, ne2] with row strides nb1, nb2 (bytes), starting `offset`
  // bytes into src (e.g. the rope part of each head of a query).
  Tensor* view(Tensor* src, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t offset);
  Node& add(Op op, Tensor* dst, Tensor* s0 = nullptr, Tensor* s1 = nullptr, Tensor* s2 = nullptr,
            Tensor* s3 = nullptr);
  // Keeps an intermediate alive (and readable) after the whole graph ran.
  void mark_output(Tensor* t);

  // Assigns arena offsets; returns the arena bytes needed. Call once after building.
  size_t plan();
  // Points every intermediate into arena (at least plan() bytes, 64-byte aligned).
  void bind(uint8_t* arena);

  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }

 private:
  struct Slot {
    Tensor* t;
    Tensor* view_of = nullptr;  // storage owner for views
    size_t view_offset = 0;
    size_t offset = 0;  // in the arena (owners only)
    bool is_intermediate = false;
    bool output = false;
  };
  Slot& slot_of(Tensor* t);
  std::deque<Tensor> tensors_;  // stable addresses
  std::vector<Slot> slots_;     // parallel to tensors_
  std::unordered_map<const Tensor*, size_t> index_;
  std::vector<Node> nodes_;
};

}  // namespace kestrel
