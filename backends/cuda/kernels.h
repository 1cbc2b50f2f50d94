// The CUDA backend's kernels, one launcher per op (or family): each reads the node's shapes on
// the host and queues its kernel(s) on the stream. Kernels read only device memory.
#pragma once
#include <utility>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cublas.h"

namespace kestrel::cuda {

// Which block-scaled MMA the MXFP4 batches use (mxfp4_mma_requested).
enum class BlockScaledMma : uint8_t { off, mma_sync, tcgen05 };

// What a launcher gets besides the node: the context's stream and its scratch memory.
class Stream {
 public:
  cudaStream_t stream = nullptr;
  // Device scratch of at least `bytes`, valid until the next call (growing it waits for the
  // stream first, so work already queued keeps its memory; it cannot grow while capturing).
  Expected<void*> scratch(size_t bytes);
  const void* scratch_data() const { return scratch_; }
  size_t scratch_size() const { return scratch_bytes_; }
  // At least n device counters, zero: for kernels whose last block to finish a share of the work
  // finishes it (an atomic count of the blocks done); each user leaves its counters zero again.
  // They outlive the scratch's reuse by other ops; growing them waits for the stream, and cannot
  // happen while capturing.
  Expected<unsigned*> counters(size_t n);
  const void* counters_data() const { return counters_; }
  bool capturing = false;  // launches are being captured into a step graph (step_graphs.h)
  bool wgmma = false;      // the tensor-core tiles issue Hopper's wgmma (wgmma_requested)
  bool use_cublas = false;      // large F16/BF16 batches go to cuBLAS (cublas_wanted(), at executor creation)
  bool cublas_dequant = false;  // and those of quantized weights, dequantized (cublas_dequant_requested())
  BlockScaledMma mxfp4_mma = BlockScaledMma::off;  // MXFP4 batches on block-scaled tensor cores (mxfp4_mma_requested())
  const CublasApi* cublas = nullptr;  // the library, once cublas_handle() has loaded it
  // This stream's cuBLAS handle, with its workspace (kCublasWorkspaceBytes); the library is loaded
  // and the handle made on first use (the first large batch), which cannot be while capturing
  // (the first sight of a step graph's signature is not captured). If either fails, use_cublas is
  // cleared: the stream's products go to the tiles from then on.
  Expected<cublas::Handle> cublas_handle();
  int64_t cublas_gemms = 0;  // calls issued (ExecutorStats::library_gemms)
  void drop_cublas();  // before the stream is destroyed (cuBLAS synchronizes the device there)
  ~Stream();

  // Which X the scratch holds quantized (quantize_x, gemv_q8.cu; or the fused norm or gate that
  // produced X wrote it), so that consecutive matmuls of one X (q, k and v; gate and up) quantize
  // it once. Forgotten by anything that may write the
  // scratch or that X: another op, another matmul path, a matmul whose output overlaps it, a new
  // run of the graph.
  struct QuantizedXKey {
    const void* data = nullptr;
    int64_t ne[4] = {0, 0, 0, 0}, nb[4] = {0, 0, 0, 0};
    DType vdt = DType::F32;
    size_t bytes = 0;  // scratch bytes it occupies
  };
  QuantizedXKey x_key;
  void forget_x() { x_key = {}; }
  // Forgets X if t's memory may overlap it.
  void forget_x_if_written(const Tensor* t);

 private:
  // Replaces buf (bytes long) by `want` fresh bytes, after the work queued on the old one.
  Status regrow(void*& buf, size_t& bytes, size_t want, const char* what);
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* counters_ = nullptr;
  size_t counters_bytes_ = 0;
  cublas::Handle cublas_handle_ = nullptr;
  void* cublas_workspace_ = nullptr;
};

Status run_get_rows(const Node& n, Stream& s);
// ADD MUL SILU SWIGLU SWIGLU_OAI CONCAT; `next`, the node after n (a gate feeding an integer-code
// matmul writes that matmul's quantized input too, elementwise.cu).
Status run_elementwise(const Node& n, Stream& s, const Node* next = nullptr);
Status run_moe_sum(const Node& n, Stream& s);
Status run_kv_store(const Node& n, Stream& s);
Status run_rms_norm(const Node& n, Stream& s);
// [ADD ->] RMS_NORM -> MUL by a gain, as one kernel (norm_rope.cu): how many nodes from nodes[i]
// (before `end`) it takes, 3 or 2, or 0 where the pattern or the tensors' layout do not fit.
size_t norm_fusion(const std::vector<Node>& nodes, size_t i, size_t end);
// `next`: the node after the chain, if any (an integer-code MATMUL of its output gets its
// quantized input from the same kernel).
Status run_norm_fusion(const Node* nodes, size_t count, Stream& s, const Node* next = nullptr);
Status run_softmax(const Node& n, Stream& s);
Status run_rope(const Node& n, Stream& s);
// ROPE(q) -> ROPE(k) -> KV_STORE(k's rotation) -> KV_STORE(v) as one kernel (rope_store.cu):
// whether g's nodes [i, i + 4) (before `end`) are that chain with layouts the kernel takes, and
// whether k's rotation must be written too (a node after the chain reads it).
struct RopeStoreFusion {
  bool applies = false, write_k = false;
};
RopeStoreFusion rope_store_fusion(const Graph& g, size_t i, size_t end);
Status run_rope_store(const Node* nodes, bool write_k, Stream& s);
Status run_attention(const Node& n, Stream& s);
// Few tokens over a long cache: GQA-aware and split over the cache (attention_decode.cu).
bool attention_decode_applies(const Node& n);
Status run_attention_decode(const Node& n, Stream& s);
// Prefill (more than kDecodeBatchCols tokens) over an F16 cache on tensor cores, FlashAttention-2's
// online softmax (attention_flash.cu).
bool attention_flash_applies(const Node& n);
Status run_attention_flash(const Node& n, Stream& s);
Status run_router(const Node& n, Stream& s);
Status run_matmul(const Node& n, Stream& s);     // MATMUL and MATMUL_ID
Status run_top_k(const Node& n, Stream& s);
// SSM_CONV, SSM_SCAN and RELU_SQR (ssm.cu); the SSM ops' types: F32 but for the I32 batch.
Status run_ssm(const Node& n, Stream& s);
bool ssm_supported(const Node& n);
bool top_k_supported(const Node& n);

// The integer-dot GEMV (gemv_q8.cu): MATMUL of at most kMaxCols columns, and MATMUL_ID, for the
// weight types whose blocks are integer codes (int_codes.cuh).
inline constexpr int kMaxCols = 8;
// Batches of up to this many columns of F16, BF16 and FP8 weights take their decode kernels (in
// groups of kMaxCols columns) rather than the tensor cores, whose sums are not the decode
// kernels' float sums: a speculative verification of up to 64 drafted tokens, or a batch of up
// to 65 sequences, then computes every token exactly as a lone decode step does.
inline constexpr int kDecodeBatchCols = 65;
bool gemv_q8_applies(const Node& n);
Status run_gemv_q8(const Node& n, Stream& s);
// Their batched MATMUL (more than kMaxCols columns) on int8 tensor cores (mmq.cu).
bool mmq_applies(const Node& n);
Status run_mmq(const Node& n, Stream& s);
// Their MATMUL_ID over more than kMaxCols tokens (mmq.cu): the (slot, token) pairs grouped by
// expert on the device, then one tensor-core launch over every expert's tiles.
bool mmq_id_applies(const Node& n);
Status run_mmq_id(const Node& n, Stream& s);
// MXFP4 batches (more than kMaxCols columns) on block-scaled tensor cores, X as MXFP8 (mmq_mx.cu):
// opt-in with KESTREL_CUDA_MXFP4_MMA=1, read when an executor is made: the sm_120 family's warp
// MMA on compute capability 12.x (and the emulator), tcgen05 (mmq_mx_tc.cu) on 10.0;
// KESTREL_CUDA_MXFP4_MMA=tcgen05 asks for tcgen05 by name (the emulator's test of it).
BlockScaledMma mxfp4_mma_requested();
bool mxfp4_mma_applies(const Node& n, const Stream& s);
Status run_mxfp4_mma(const Node& n, Stream& s);
// The tcgen05 product of run_mxfp4_mma, X already MXFP8 in xq / xs; g: MATMUL_ID's grouped pairs
// (a grid of max_tiles tiles), or null for MATMUL.
Status launch_mxfp4_tc(const Node& n, Stream& s, const uint8_t* xq, const uint8_t* xs, const ExpertTiles* g, int64_t max_tiles);
// The pairs of MATMUL_ID node n grouped by expert into mem (expert_tiles_bytes(n) of scratch)
// by a one-block kernel (moe_group.cu); a grouped launch's grid needs expert_tiles_max(n) tiles.
int64_t expert_tiles_max(const Node& n);
size_t expert_tiles_bytes(const Node& n);
Expected<ExpertTiles> group_pairs(const Node& n, void* mem, Stream& s);
// FP8 weights (matmul_fp8.cu): a GEMV for decode and MATMUL_ID, FP8 tensor cores for batches where
// the device has them (sm_89 and newer: fp8_mma_available).
bool fp8_matmul_applies(const Node& n);
Status run_fp8_matmul(const Node& n, Stream& s);
bool fp8_mma_available();
// F16 and BF16 weights (matmul_f16.cu): a GEMV with 16-byte loads for decode, mma.sync f16/bf16 for
// batches; MATMUL_ID both ways (the tensor cores over pairs grouped by expert).
bool f16_matmul_applies(const Node& n);
Status run_f16_matmul(const Node& n, Stream& s);
// Their MATMUL of more than kDecodeBatchCols columns fed by TMA to wgmma (matmul_f16_tma.cu;
// Stream::wgmma, KESTREL_CUDA_WGMMA=1 on sm_90), before cuBLAS.
bool f16_tma_applies(const Node& n, const Stream& s);
Status run_f16_tma(const Node& n, Stream& s);
// Their MATMUL of more than kDecodeBatchCols columns on cuBLAS where it loaded (gemm_cublas.cu),
// and with Stream::cublas_dequant that of the quantized types too (before mmq.cu).
bool cublas_gemm_applies(const Node& n, const Stream& s);  // the shapes, given s.use_cublas
Status run_cublas_gemm(const Node& n, Stream& s);
// Hopper's warpgroup MMA for those tiles (wgmma.cuh): on an sm_90 device (the build has sm_90a
// code for it) when KESTREL_CUDA_WGMMA=1, read when an executor is made (Stream::wgmma). Off by
// default until a GPU has run its tests.
bool wgmma_requested();
// KESTREL_CUDA_KERNELS=reference: only the part-1 kernels (to tell a fast kernel's bug from the
// rest on a GPU).
bool reference_kernels_only();

// X (rows = columns of the product) rounded as w's vec_dot type rounds it, as floats in the
// stream's scratch (matmul.cu); with extra_bytes, *extra points past them to that much more.
Expected<float*> round_x(const Tensor* w, const Tensor* x, Stream& s, size_t extra_bytes = 0, void** extra = nullptr);
// X rounded to t's 16 bits (F16 or BF16), column after column (K values apart), in the scratch
// (matmul.cu): the operand of cuBLAS and of the TMA-fed tiles.
Expected<uint16_t*> x_to_b16(const Tensor* x, DType t, Stream& s, size_t extra_bytes = 0, void** extra = nullptr);

// The bytes from t's first element to one past its last, a bound for strided views
// (backend_cuda.cu).
std::pair<uintptr_t, uintptr_t> tensor_extent(const Tensor* t);
// Whether the extents of p and q do not overlap (the fusions' aliasing checks).
bool tensors_apart(const Tensor* p, const Tensor* q);

// Weight types the matmul and GET_ROWS kernels read.
bool weight_type_supported(DType t);

// The split-rows layout (Tensor::layout == kLayoutSplitRows), private to this backend: a Q4_0 or
// Q8_0 matrix whose rows (K a multiple of 256) are rearranged in place at upload, each row first
// its blocks' codes (16 or 32 bytes a block, back to back) and then their fp16 scales. Rows keep
// their length and stride, and with K % 256 == 0 every row and every block's codes start 16-byte
// aligned: a lane reads a block's codes with one or two 16-byte loads, and a warp's lanes read
// adjacent blocks, instead of 2-byte loads of 18- or 34-byte blocks. The matmul kernels (gemv_q8,
// mmq) and GET_ROWS read it; KESTREL_NO_REPACK=1 or KESTREL_CUDA_KERNELS=reference keeps the file
// layout. The CPU backend's grouped layout is kLayoutGrouped8 = 1.
inline constexpr uint32_t kLayoutSplitRows = 2;
template <DType T>
inline constexpr int64_t kSplitCodeBytes = T == DType::Q4_0 ? 16 : 32;  // code bytes of a block
// Whether a tensor of this type and shape gets the split layout at upload, and whether the layout
// is on at all (not with KESTREL_NO_REPACK=1 or KESTREL_CUDA_KERNELS=reference).
bool splits_rows(DType t, const int64_t ne[4]);
bool split_layout_enabled();
// Rearranges `rows` rows of K values of type t (Q4_0 or Q8_0) from the file layout in src into
// the split layout in dst (not overlapping).
void split_rows(DType t, int64_t K, int64_t rows, const uint8_t* src, uint8_t* dst);
// How the integer kernels read weight w's rows (split_rows.cu): split_nb > 0, the split-rows
// layout with that many blocks a row; aligned16, every row starts 16-byte aligned, so Q4_K and
// Q5_K, whose blocks are multiples of 16 bytes, load their codes 16 bytes at a time.
struct RowLayout {
  int64_t split_nb = 0;
  bool aligned16 = false;
};
RowLayout row_layout(const Tensor* w);

}  // namespace kestrel::cuda
