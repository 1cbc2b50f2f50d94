// A forward pass as a list of nodes in execution order. Model code builds it through
// model/builder.h; backends execute node ranges; plan() places every intermediate tensor in one
// arena, reusing memory once a tensor's last reader has run. Per-step inputs come first in the
// arena, packed in creation order, so a step uploads them all with one write.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tensor/attention_batch.h"
#include "tensor/op_params.h"
#include "tensor/tensor.h"

namespace kestrel {

enum class Op : uint8_t {
#define KS_OP(name, params, doc) name,
#include "tensor/ops.def"
#undef KS_OP
  COUNT
};
const char* op_name(Op op);

// One operation. Every tensor it reads or writes is a source or the destination: per-step data
// (token ids, positions, KV slots, the attention batch) are I32 input tensors of the graph, so
// no node points at host memory, and a captured device graph replays with new inputs.
struct Node {
  static constexpr int kMaxSrc = 8;
  Op op = Op::COUNT;
  Tensor* dst = nullptr;
  Tensor* src[kMaxSrc] = {};

  OpParams params;  // the op's struct (ops.def), set by Graph::add

  template <class P>
  P& param() { return std::get<P>(params); }
  template <class P>
  const P& param() const { return std::get<P>(params); }
};

// How profiles and traces name a node: its op in lower case, a product with its weight type
// ("rms_norm", "matmul q4_0", "matmul_id mxfp4").
std::string op_label(const Node& n);

// The parameter struct ops.def gives op, default-initialised.
OpParams default_params(Op op);

class Graph {
 public:
  // A tensor whose memory the caller owns (weights, caches).
  Tensor* external(const Tensor& t);
  // A per-step input (I32 ids, positions, slots...): placed at input_offset(t) in the arena, in
  // the leading input_bytes() that the step fills with one write.
  Tensor* input(DType type, int64_t ne0, int64_t ne1 = 1);
  size_t input_offset(const Tensor* t) const { return slots_[index_.at(t)].offset; }
  size_t input_bytes() const { return input_bytes_; }
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
            Tensor* s3 = nullptr, Tensor* s4 = nullptr, Tensor* s5 = nullptr, Tensor* s6 = nullptr,
            Tensor* s7 = nullptr);
  // Keeps an intermediate alive (and readable) after the whole graph ran.
  void mark_output(Tensor* t);
  // Whether t's storage (t, or what t is a view of) is used by a node after node i or outlives
  // the graph (not an intermediate, an input or an output). When not, plan() may have given that
  // memory to a later tensor, and a backend fusing the nodes up to i need not write t. Before
  // plan(), which records each storage's last use, every intermediate counts as used.
  bool used_after(const Tensor* t, size_t i) const;

  // Assigns arena offsets; returns the arena bytes needed. Call once after building.
  size_t plan();
  // Points every intermediate into arena (at least plan() bytes, 64-byte aligned).
  void bind(uint8_t* arena);

  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Every tensor of the graph, in creation order (harnesses that move data to a device).
  const std::deque<Tensor>& tensors() const { return tensors_; }
  std::deque<Tensor>& tensors() { return tensors_; }

 private:
  struct Slot {
    Tensor* t;
    Tensor* view_of = nullptr;  // storage owner for views
    size_t view_offset = 0;
    size_t offset = 0;  // in the arena (owners only)
    bool is_intermediate = false;
    bool is_input = false;  // placed at `offset` before every intermediate
    bool output = false;
    size_t last_use = SIZE_MAX;  // the last node using the storage (plan(); owners only)
  };
  Slot& slot_of(Tensor* t);
  std::deque<Tensor> tensors_;  // stable addresses
  std::vector<Slot> slots_;     // parallel to tensors_
  std::unordered_map<const Tensor*, size_t> index_;
  std::vector<Node> nodes_;
  size_t input_bytes_ = 0;
};

}  // namespace kestrel
