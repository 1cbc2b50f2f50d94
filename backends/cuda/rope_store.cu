// ROPE(q) -> ROPE(k) -> KV_STORE(k) -> KV_STORE(v), the four adjacent nodes of every attention
// layer, as one launch: a thread per rope item of q or k, or per value of v. A k item writes its
// rotated values, converted as KV_STORE converts them, to the cache row of its token, and to the
// rope's output only where a later node reads that (the graph planner commonly puts k's rotation
// where q's input was, which the q items still read: then it must not be written); the same
// values, rounded the same way, as the four kernels give. Decode runs each of them on a handful
// of blocks, so their cost is launch latency: three of four saved.
#include "backends/cuda/kernels.h"
#include "backends/cuda/rope.cuh"

#include <cstring>

namespace kestrel::cuda {
namespace {

struct RopeStoreArgs {
  RopeArgs p;
  int64_t q_items, k_items, v_items;  // in this order over the grid
  int64_t q_heads, k_heads;           // heads a token's q and k hold
  int k_kind, v_kind;                 // CacheKind
};

__global__ void rope_store_kernel(TensorArg yq, TensorArg xq, TensorArg yk, TensorArg xk, TensorArg kc, TensorArg vc,
                                  TensorArg xv, const int32_t* pos, const float* freq_factors, const int32_t* k_slots,
                                  const int32_t* v_slots, RopeStoreArgs a) {
  const int64_t per_row = rope_items_per_row(xq.ne[0], a.p.n_rot), n = a.q_items + a.k_items + a.v_items;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (idx < a.q_items) {
      const int64_t r = idx / per_row;
      rope_item(xq.f32(r), yq.f32(r), static_cast<float>(pos[r / a.q_heads]), idx % per_row, freq_factors, a.p,
                [](int64_t, float) {});
    } else if (idx < a.q_items + a.k_items) {
      const int64_t i = idx - a.q_items, r = i / per_row, t = r / a.k_heads;
      uint8_t* row = kc.data + k_slots[t] * kc.nb[1];
      const int64_t at = (r % a.k_heads) * xk.ne[0];  // this head's first value in the token's row
      rope_item(xk.f32(r), yk.data ? yk.f32(r) : nullptr, static_cast<float>(pos[t]), i % per_row, freq_factors, a.p,
                [&](int64_t e, float v) { cache_store(row, at + e, v, a.k_kind); });
    } else {
      const int64_t i = idx - a.q_items - a.k_items, R = xv.ne[0], k = i % R, t = i / R;
      cache_store(vc.data + v_slots[t] * vc.nb[1], k, xv.f32(t)[k], a.v_kind);
    }
  }
}

bool contiguous_f32(const Tensor* t) { return t->type == DType::F32 && t->is_contiguous(); }

}  // namespace

RopeStoreFusion rope_store_fusion(const Graph& g, size_t i, size_t end) {
  const std::vector<Node>& nodes = g.nodes();
  if (reference_kernels_only() || i + 4 > end) return {};
  const Node &rq = nodes[i], &rk = nodes[i + 1], &sk = nodes[i + 2], &sv = nodes[i + 3];
  if (rq.op != Op::ROPE || rk.op != Op::ROPE || sk.op != Op::KV_STORE || sv.op != Op::KV_STORE) return {};
  // Its stores convert value by value; a block type's cache is written a block at a time.
  if (is_block_cache(sk.src[0]->type) || is_block_cache(sv.src[0]->type)) return {};
  // One rope (positions, frequency factors, parameters) over q and k, rows of one head size.
  if (rq.src[1] != rk.src[1] || rq.src[2] != rk.src[2] ||
      std::memcmp(&rq.param<RopeParams>(), &rk.param<RopeParams>(), sizeof(RopeParams)) != 0)
    return {};
  const Tensor *yq = rq.dst, *xq = rq.src[0], *yk = rk.dst, *xk = rk.src[0], *xv = sv.src[1];
  for (const Tensor* t : {yq, xq, yk, xk, xv})
    if (!contiguous_f32(t)) return {};
  if (xq->ne[0] != xk->ne[0] || xq->ne[2] != xk->ne[2] || xq->ne[3] != 1 || xk->ne[3] != 1) return {};
  // The k store's input is the rotated k itself, a token a column; v's tokens are k's.
  const Tensor* sx = sk.src[1];
  if (sx->data != yk->data || !contiguous_f32(sx) || sx->ne[0] != xk->ne[0] * xk->ne[1] || sx->ne[1] != xk->ne[2] ||
      xv->ne[1] != xk->ne[2] || sx->ne[2] != 1 || xv->ne[2] != 1)
    return {};
  // Each thread reads only its own item's inputs: no output may overlap another op's input (an
  // output over its own input is the rope in place, which the single kernels allow too).
  const bool write_k = g.used_after(yk, i + 3);
  const Tensor* outs[2] = {yq, write_k ? yk : nullptr};
  for (const Tensor* out : outs)
    for (const Tensor* in : {xq, xk, xv})
      if (out && in != (out == yq ? xq : xk) && !tensors_apart(out, in)) return {};
  if (write_k && !tensors_apart(yq, yk)) return {};
  // The caches are only written, each its own rows (a layer's K and V may share one buffer,
  // interleaved: their extents overlap, their elements do not).
  for (const Tensor* in : {xq, xk, xv, yq, write_k ? yk : nullptr})
    if (in && (!tensors_apart(in, sk.src[0]) || !tensors_apart(in, sv.src[0]))) return {};
  return {true, write_k};
}

Status run_rope_store(const Node* nodes, bool write_k, Stream& s) {
  const Node &rq = nodes[0], &rk = nodes[1], &sk = nodes[2], &sv = nodes[3];
  RopeStoreArgs a{};
  a.p = rope_args(rq.param<RopeParams>());
  const int64_t per_row = rope_items_per_row(rq.src[0]->ne[0], a.p.n_rot);
  a.q_items = rq.src[0]->n_rows() * per_row;
  a.k_items = rk.src[0]->n_rows() * per_row;
  a.v_items = sv.src[1]->n_elements();
  a.q_heads = rq.src[0]->ne[1], a.k_heads = rk.src[0]->ne[1];
  a.k_kind = cache_kind(sk.src[0]->type), a.v_kind = cache_kind(sv.src[0]->type);
  return KS_LAUNCH(rope_store_kernel, dim3(grid_stride_blocks(a.q_items + a.k_items + a.v_items, 128)), dim3(128), 0,
                   s.stream, arg(rq.dst), arg(rq.src[0]), write_k ? arg(rk.dst) : TensorArg{}, arg(rk.src[0]), arg(sk.src[0]), arg(sv.src[0]),
                   arg(sv.src[1]), static_cast<const int32_t*>(rq.src[1]->data),
                   rq.src[2] ? static_cast<const float*>(rq.src[2]->data) : static_cast<const float*>(nullptr),
                   static_cast<const int32_t*>(sk.src[2]->data), static_cast<const int32_t*>(sv.src[2]->data), a);
}

}  // namespace kestrel::cuda
