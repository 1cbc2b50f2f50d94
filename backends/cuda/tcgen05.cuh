// Blackwell's fifth-generation tensor cores (sm_100a: B200, GB200; built for sm_100a), for the
// block-scaled MXFP4 tile of mmq_mx_tc.cu:
//   tmem_alloc / tmem_relinquish / tmem_dealloc   tcgen05.alloc / relinquish_alloc_permit / dealloc
//   tmem_store_x{1,4} / tmem_load_x32 / tmem_wait_st / tmem_wait_ld
//                          tcgen05.st / ld .sync.aligned.32x32b, tcgen05.wait::st / ::ld
//   tc_fence_before / tc_fence_after   tcgen05.fence::before_thread_sync / ::after_thread_sync
//   tc_mma_mxf4_e4m3       tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale (E2M1 x E4M3,
//                          UE8M0 scales, f32 D in tensor memory), issued by one thread
//   tc_operand             a shared-memory operand's descriptor (wgmma.cuh's, with tcgen05's version)
//   tc_commit              tcgen05.commit...mbarrier::arrive::one: the barrier (tma.cuh) gets one
//                          arrival when the thread's MMAs issued so far have completed
//
// Facts, from the PTX ISA ("TensorCore 5th Generation Family Instructions") and CUTLASS's
// encodings of them (cute/arch/mma_sm100_desc.hpp, cute/atom/mma_traits_sm100_frag.hpp):
// - Tensor memory (TMEM): 128 lanes x 512 columns of 32 bits per SM, allocated by one warp in
//   columns (a power of two, 32 .. 512); an address is lane << 16 | column. Warp w of the block
//   reaches lanes 32 (w % 4) .. + 31 only: with .32x32b, lane l of the warp reads or writes TMEM
//   lane 32 (w % 4) + l, register i at column + i.
// - With M = 128 (cta_group::1), D's row m is TMEM lane m, its column n at D's address + n.
// - A and B come from shared memory through 64-bit descriptors: the wgmma descriptor's fields
//   (start, LBO, SBO: bits 0-13, 16-29, 32-45, each byte offset >> 4; K-major core matrices of 8
//   rows x 16 bytes, wgmma.cuh) plus version 1 in bits 46-47, base offset 0 (bits 49-51), and the
//   layout in bits 61-63 (0: no swizzle).
// - With .kind::mxf8f6f4 an E2M1 operand is stored padded in shared memory: each 16 bytes along K
//   hold 16 values as 8 bytes of nibbles (the lower K index in the low nibble) and 8 unused bytes
//   (the TMA type 16U4_ALIGN16B); so K = 32 is two 16-byte chunks for E2M1 as for E4M3.
// - The instruction descriptor (32 bits, block-scaled kinds): B's scale byte id bits 4-5, A's
//   type bits 7-9 (E4M3 0, E2M1 5), B's type bits 10-12, K-major A and B (bits 15, 16 zero),
//   N >> 3 bits 17-22, scale type bit 23 (1: UE8M0), M >> 4 bits 24-28, A's scale byte id bits
//   29-30. K = 32 per instruction; with scale_vec::1X one scale per row of A and column of B.
// - The scales in TMEM (M = 128; CUTLASS's 4x1 data-path layout): row m's scale at lane m % 32 of
//   each of the four lane quarters (replicated), column (its address) + m / 32, byte = the
//   instruction's scale byte id; B's column n the same way. So four consecutive K blocks can keep
//   their scales in one set of columns, a byte each.
//
// Under KESTREL_CUDA_EMULATE: TMEM is one host array (the emulator runs one block at a time),
// allocated columns are filled with NaNs (undefined on the GPU); the MMA is computed at issue by
// the issuing thread from the descriptors (double sums times the two scales, rounded once, added
// to D unless enable_d is 0) and the commit arrives at once. The emulator checks what it can: the
// descriptor fields, each TMEM access against the warp's lane quarter, and the four replicas of
// every scale it reads being equal. Not checked by anything here: that the GPU reads those fields
// and layouts as stated (no sm_100 device has run this).
#pragma once
#include <cstdint>

#include "backends/cuda/ptx.cuh"
#include "backends/cuda/tma.cuh"
#include "backends/cuda/wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(KESTREL_CUDA_EMULATE) &&                                                     \
    (defined(__CUDA_ARCH_FEAT_SM100_ALL) || (defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ == 1000))
#define KS_HAVE_TCGEN05 1
#endif

namespace kestrel::ptx {
#ifdef KESTREL_CUDA_EMULATE
inline namespace emulated {  // as in ptx.cuh
#endif

using TcOperand = WgmmaOperand;

// A K-major, unswizzled operand at `smem` (16-byte aligned) with the byte strides of wgmma.cuh;
// tcgen05's descriptor adds its version (1) in bits 46-47.
__device__ __forceinline__ TcOperand tc_operand(const void* smem, uint32_t lbo, uint32_t sbo) {
  TcOperand op = wgmma_operand(smem, lbo, sbo);
  op.desc |= uint64_t{1} << 46;
  return op;
}

enum : uint32_t { kTcE4M3 = 0, kTcE2M1 = 5 };

// The block-scaled instruction descriptor: M = 128, n columns, A of type a, B of type b, UE8M0
// scales, scale byte ids sfa_id and sfb_id.
__host__ __device__ __forceinline__ uint32_t tc_idesc_block_scaled(uint32_t a, uint32_t b, uint32_t n, uint32_t sfa_id,
                                                                   uint32_t sfb_id) {
  return (sfb_id & 3) << 4 | a << 7 | b << 10 | (n >> 3) << 17 | 1u << 23 | (128u >> 4) << 24 | (sfa_id & 3) << 29;
}

#ifdef KESTREL_CUDA_EMULATE
namespace emu {
inline uint32_t tmem[128][512];  // lane, column

inline unsigned tmem_quarter() {
  const unsigned lin = static_cast<unsigned>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  return (lin / 32) % 4;
}
// The lane this thread reaches at taddr (whose lane field must be its warp's quarter), and the column.
inline uint32_t* tmem_cell(uint32_t taddr, unsigned col_offset) {
  const unsigned lane = taddr >> 16, col = (taddr & 0xFFFF) + col_offset;
  if (lane != 32 * tmem_quarter())
    throw std::runtime_error("tcgen05.ld/st: warp " + std::to_string(tmem_quarter()) + " (mod 4) addressed TMEM lane " +
                             std::to_string(lane) + "; it reaches lanes 32 (warp % 4) .. + 31 only");
  if (col >= 512) throw std::runtime_error("tcgen05.ld/st past TMEM's 512 columns");
  return &tmem[lane + ::kestrel::cuda_emu::lane_id()][col];
}
// A scale byte of row (or column) r at scale address sf, byte id: the four replicas must agree.
inline double tmem_scale(uint32_t sf, unsigned r, unsigned id) {
  const unsigned col = (sf & 0xFFFF) + r / 32;
  const uint32_t v = (tmem[r % 32][col] >> (8 * id)) & 0xFF;
  for (unsigned q = 1; q < 4; ++q)
    if (((tmem[r % 32 + 32 * q][col] >> (8 * id)) & 0xFF) != v)
      throw std::runtime_error("tcgen05.mma: a scale's four TMEM replicas differ (row " + std::to_string(r) + ")");
  return std::ldexp(1.0, static_cast<int>(v) - 127);
}
// Element (m, k) of a K-major unswizzled operand of type `type` (E4M3, or padded E2M1).
inline double tc_element(const TcOperand& op, uint32_t type, unsigned m, unsigned k) {
  if ((op.desc >> 46 & 3) != 1 || (op.desc >> 61) != 0 || (op.desc >> 49 & 7) != 0)
    throw std::runtime_error("tcgen05.mma emulation: a descriptor without version 1, or swizzled (not modelled)");
  const uint64_t lbo = ((op.desc >> 16) & 0x3FFF) << 4, sbo = ((op.desc >> 32) & 0x3FFF) << 4;
  const uint8_t* chunk = static_cast<const uint8_t*>(op.smem) + (m % 8) * 16 + (m / 8) * sbo + (k / 16) * lbo;
  if (type == kTcE4M3) return static_cast<double>(bits_f32(::kestrel::e4m3_to_fp32_bits(chunk[k % 16])));
  if (type != kTcE2M1) throw std::runtime_error("tcgen05.mma emulation: operand type " + std::to_string(type) + " not modelled");
  constexpr double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const unsigned code = (chunk[(k % 16) / 2] >> (4 * (k % 2))) & 0xF;
  return (code & 8 ? -1 : 1) * mag[code & 7];
}
}  // namespace emu
#endif

// One warp, all lanes: allocates `cols` TMEM columns and writes their address to *dst (shared).
__device__ __forceinline__ void tmem_alloc(uint32_t* dst, uint32_t cols) {
#ifdef KESTREL_CUDA_EMULATE
  emu::require_full_warp("tcgen05.alloc");
  if (cols < 32 || cols > 512 || (cols & (cols - 1)) != 0) throw std::runtime_error("tcgen05.alloc of " + std::to_string(cols) + " columns");
  for (auto& lane : emu::tmem)
    for (uint32_t c = 0; c < cols; ++c) lane[c] = 0x7FC00001u;  // undefined: a NaN
  *dst = 0;
#elif defined(KS_HAVE_TCGEN05)
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "r"(cols)
               : "memory");
#else
  __trap();  // not sm_100a: the host never picks a tcgen05 kernel there
#endif
}
__device__ __forceinline__ void tmem_relinquish() {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t cols) {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(taddr), "r"(cols) : "memory");
#else
  (void)taddr, (void)cols;
#endif
}

__device__ __forceinline__ void tc_fence_before() {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void tc_fence_after() {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
#endif
}

// The warp's lanes write v (one register: x1; four consecutive columns: x4) at taddr, whose lane
// field is 32 (warp % 4).
__device__ __forceinline__ void tmem_store_x1(uint32_t taddr, uint32_t v) {
#ifdef KESTREL_CUDA_EMULATE
  *emu::tmem_cell(taddr, 0) = v;
#elif defined(KS_HAVE_TCGEN05)
  asm volatile("tcgen05.st.sync.aligned.32x32b.x1.b32 [%0], {%1};\n" ::"r"(taddr), "r"(v) : "memory");
#else
  (void)taddr, (void)v;
#endif
}
__device__ __forceinline__ void tmem_store_x4(uint32_t taddr, const uint32_t (&v)[4]) {
#ifdef KESTREL_CUDA_EMULATE
  for (unsigned i = 0; i < 4; ++i) *emu::tmem_cell(taddr, i) = v[i];
#elif defined(KS_HAVE_TCGEN05)
  asm volatile("tcgen05.st.sync.aligned.32x32b.x4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(taddr), "r"(v[0]), "r"(v[1]), "r"(v[2]),
               "r"(v[3])
               : "memory");
#else
  (void)taddr, (void)v;
#endif
}
__device__ __forceinline__ void tmem_wait_st() {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory");
#endif
}

// 32 consecutive columns of the warp's lanes at taddr (lane field 32 (warp % 4)), as floats;
// valid after tmem_wait_ld.
__device__ __forceinline__ void tmem_load_x32(uint32_t taddr, float (&v)[32]) {
#ifdef KESTREL_CUDA_EMULATE
  for (unsigned i = 0; i < 32; ++i) v[i] = bits_f32(*emu::tmem_cell(taddr, i));
#elif defined(KS_HAVE_TCGEN05)
  uint32_t r[32];
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]), "=r"(r[8]), "=r"(r[9]),
        "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]),
        "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]),
        "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
      : "r"(taddr)
      : "memory");
  for (int i = 0; i < 32; ++i) v[i] = __uint_as_float(r[i]);
#else
  (void)taddr;
  for (float& x : v) x = 0;
#endif
}
__device__ __forceinline__ void tmem_wait_ld() {
#ifdef KS_HAVE_TCGEN05
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
#endif
}

// One thread: D (TMEM at d, 128 x N f32) = [D +] (scale_A . A) (128 x 32 E2M1) x (scale_B . B)
// (N x 32 E4M3, K-major: B's rows are D's columns), N and the scale byte ids from idesc, the
// scales at TMEM addresses sfa and sfb. enable_d == 0 overwrites D.
__device__ __forceinline__ void tc_mma_mxf4_e4m3(uint32_t d, const TcOperand& a, const TcOperand& b, uint32_t idesc, uint32_t sfa,
                                                 uint32_t sfb, uint32_t enable_d) {
#ifdef KESTREL_CUDA_EMULATE
  const uint32_t ta = idesc >> 7 & 7, tb = idesc >> 10 & 7, n_cols = (idesc >> 17 & 63) << 3;
  if ((idesc >> 24 & 31) != 128 / 16 || !(idesc >> 23 & 1) || (idesc >> 15 & 3) != 0)
    throw std::runtime_error("tcgen05.mma emulation: only M = 128, UE8M0 scales and K-major operands are modelled");
  const unsigned sfa_id = idesc >> 29 & 3, sfb_id = idesc >> 4 & 3, dcol = d & 0xFFFF;
  if ((d >> 16) != 0 || dcol + n_cols > 512) throw std::runtime_error("tcgen05.mma emulation: D outside TMEM");
  for (unsigned m = 0; m < 128; ++m) {
    const double sa = emu::tmem_scale(sfa, m, sfa_id);
    for (unsigned n = 0; n < n_cols; ++n) {
      double s = 0;
      for (unsigned k = 0; k < 32; ++k) s += emu::tc_element(a, ta, m, k) * emu::tc_element(b, tb, n, k);
      s *= sa * emu::tmem_scale(sfb, n, sfb_id);
      uint32_t& cell = emu::tmem[m][dcol + n];
      cell = f32_bits(static_cast<float>(enable_d ? s + static_cast<double>(bits_f32(cell)) : s));
    }
  }
#elif defined(KS_HAVE_TCGEN05)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale [%0], %1, %2, %3, [%5], [%6], p;\n}\n" ::"r"(d),
      "l"(a.desc), "l"(b.desc), "r"(idesc), "r"(enable_d), "r"(sfa), "r"(sfb)
      : "memory");
#else
  (void)d, (void)a, (void)b, (void)idesc, (void)sfa, (void)sfb, (void)enable_d;
  __trap();
#endif
}

// One thread: bar gets one arrival once this thread's MMAs issued so far have completed.
__device__ __forceinline__ void tc_commit(uint64_t* bar) {
#ifdef KESTREL_CUDA_EMULATE
  ::kestrel::cuda::mbarrier_arrive_expect_tx(bar, 0);  // the MMAs were done at issue
#elif defined(KS_HAVE_TCGEN05)
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
               : "memory");
#else
  (void)bar;
#endif
}

#ifdef KESTREL_CUDA_EMULATE
}  // namespace emulated
#endif
}  // namespace kestrel::ptx
