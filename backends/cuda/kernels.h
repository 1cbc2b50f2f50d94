// The CUDA backend's kernels, one launcher per op (or family): each reads the node's shapes on
// the host and queues its kernel(s) on the stream. Kernels read only device memory.
#pragma once
#include "backends/cuda/common.cuh"

namespace kestrel::cuda {

// What a launcher gets besides the node: the context's stream and its scratch memory.
class Stream {
 public:
  cudaStream_t stream = nullptr;
  // Device scratch of at least `bytes`, valid until the next call (growing it waits for the
  // stream first, so work already queued keeps its memory).
  Expected<void*> scratch(size_t bytes);
  ~Stream();

 private:
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

Status run_get_rows(const Node& n, Stream& s);
Status run_elementwise(const Node& n, Stream& s);  // ADD MUL SILU SWIGLU SWIGLU_OAI CONCAT
Status run_moe_sum(const Node& n, Stream& s);
Status run_kv_store(const Node& n, Stream& s);
Status run_rms_norm(const Node& n, Stream& s);
Status run_softmax(const Node& n, Stream& s);
Status run_rope(const Node& n, Stream& s);
Status run_attention(const Node& n, Stream& s);
Status run_router(const Node& n, Stream& s);
Status run_matmul(const Node& n, Stream& s);     // MATMUL and MATMUL_ID
Status run_top_k(const Node& n, Stream& s);
bool top_k_supported(const Node& n);

// Weight types the matmul and GET_ROWS kernels read.
bool weight_type_supported(DType t);

}  // namespace kestrel::cuda
