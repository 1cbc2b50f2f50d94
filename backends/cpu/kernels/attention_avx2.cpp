// ATTENTION on the CPU (AVX2/FMA/F16C): the reference's semantics (F16-rounded queries and
// probabilities for an F16, FP8, Q8_0 or Q4_0 cache, sinks, soft-capping, sliding window) with
// SIMD dot products and FP32 accumulation; quantized caches are read in place, eight values at a
// time. Work is split by token, round-robin, so a causal prompt's long rows (the
// last tokens) are spread over all threads.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/hsum_avx2.h"
#include "core/fp16.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"

namespace kestrel::cpu {
namespace {

// Cache element types: F32, F16, F8_E4M3 (one byte, read through a table of its 256 values),
// and the block types Q8_0 and Q4_0: each token's row in blocks of 32 values with an F16 scale,
// the blocks running across the row's heads. Every kernel below addresses a row by element index,
// so a head's slice may start inside a block; eight elements at a time (a multiple of 8 offset)
// never leave their block.
constexpr int kF32 = 0, kF16 = 1, kF8 = 2, kQ8 = 3, kQ4 = 4;
int kt_of(DType t) {
  switch (t) {
    case DType::F16: return kF16;
    case DType::F8_E4M3: return kF8;
    case DType::Q8_0: return kQ8;
    case DType::Q4_0: return kQ4;
    default: return kF32;
  }
}

struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int c = 0; c < 256; ++c) v[c] = fp32_from_bits(e4m3_to_fp32_bits(static_cast<uint8_t>(c)));
  }
};
const E4M3Table kE4M3;

// Elements i .. i+7 of a row (for the block types, i % 8 == 0), as floats.
template <int kT>
inline __m256 load8(const void* p, int64_t i) {
  if constexpr (kT == kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  } else if constexpr (kT == kF8) {
    return _mm256_i32gather_ps(kE4M3.v, _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i))), 4);
  } else if constexpr (kT == kQ8) {
    const block_q8_0& b = static_cast<const block_q8_0*>(p)[i / QK8_0];
    const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + i % QK8_0)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(q));
  } else if constexpr (kT == kQ4) {
    // Byte j of a block holds values j (low nibble) and j + 16 (high): values 8k .. 8k+7 are the
    // low (k < 2) or high (k >= 2) nibbles of bytes 8(k%2) .. 8(k%2)+7.
    const block_q4_0& b = static_cast<const block_q4_0*>(p)[i / QK4_0];
    const int j = static_cast<int>(i % QK4_0);
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + j % 16)));
    q = _mm256_and_si256(_mm256_srli_epi32(q, j >= 16 ? 4 : 0), _mm256_set1_epi32(0xF));
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(q));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

template <int kT>
inline float load1(const void* p, int64_t i) {
  if constexpr (kT == kF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
  } else if constexpr (kT == kF8) {
    return kE4M3.v[static_cast<const uint8_t*>(p)[i]];
  } else if constexpr (kT == kQ8) {
    const block_q8_0& b = static_cast<const block_q8_0*>(p)[i / QK8_0];
    return _cvtsh_ss(b.d) * static_cast<float>(b.qs[i % QK8_0]);
  } else if constexpr (kT == kQ4) {
    const block_q4_0& b = static_cast<const block_q4_0*>(p)[i / QK4_0];
    const int j = static_cast<int>(i % QK4_0);
    const int q = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
    return _cvtsh_ss(b.d) * static_cast<float>(q - 8);
  } else {
    return static_cast<const float*>(p)[i];
  }
}

// q . row[e0 .. e0+n) and acc += p * row[e0 .. e0+n), the row read in place.
template <int kT>
float dot(const float* q, const void* row, int64_t e0, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<kT>(row, e0 + d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8<kT>(row, e0 + d + 8), a1);
  }
  for (; d + 8 <= n; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<kT>(row, e0 + d), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; d < n; ++d) s += q[d] * load1<kT>(row, e0 + d);
  return s;
}

template <int kT>
void axpy(float p, const void* row, int64_t e0, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, load8<kT>(row, e0 + d), _mm256_loadu_ps(acc + d)));
  for (; d < n; ++d) acc[d] += p * load1<kT>(row, e0 + d);
}

template <int kK, int kV>
void attend_token(const Node& n, int64_t t, int64_t h0, int64_t h1, std::vector<float>& qr, std::vector<float>& scores,
                  std::vector<float>& acc) {
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2], *sinks = n.src[3];
  const AttentionBatch b = AttentionBatch::view(static_cast<const int32_t*>(n.src[4]->data));
  const int64_t hd_k = q->ne[0], n_head = q->ne[1], hd_v = n.dst->ne[0];
  const int64_t group = n_head / (kc->ne[0] / hd_k);
  const AttentionParams& ap = n.param<AttentionParams>();
  const float scale = ap.scale, softcap = ap.softcap;
  const int32_t window = ap.window;
  for (int64_t h = h0; h < h1; ++h) {
    const int64_t kvh = h / group;
    const float* qp = q->f32(h, t);
    for (int64_t d = 0; d < hd_k; ++d) qr[static_cast<size_t>(d)] = kK != kF32 ? round_fp16(qp[d]) : qp[d];
    const int32_t tt = static_cast<int32_t>(t), nc = b.n_cells_of(tt);
    float mx = -std::numeric_limits<float>::infinity();
    b.for_each_cell(tt, [&](int32_t i, int32_t c) {  // the cells of t's block table, in order
      if (!b.visible(tt, c, window)) {
        scores[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
        return;
      }
      float s = dot<kK>(qr.data(), kc->row(c), kvh * hd_k, hd_k);
      s = softcap > 0 ? softcap * std::tanh(s * scale / softcap) : s * scale;
      scores[static_cast<size_t>(i)] = s;
      mx = std::max(mx, s);
    });
    const float sink = sinks ? static_cast<const float*>(sinks->data)[h] : -INFINITY;
    mx = std::max(mx, sink);
    float sum = sinks ? std::exp(sink - mx) : 0.0f;
    for (int32_t i = 0; i < nc; ++i) {
      float& s = scores[static_cast<size_t>(i)];
      s = std::isinf(s) ? 0.0f : std::exp(s - mx);
      sum += s;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float inv = sum > 0 ? 1.0f / sum : 0.0f;
    b.for_each_cell(tt, [&](int32_t i, int32_t c) {
      const float e = scores[static_cast<size_t>(i)];
      if (e == 0.0f) return;
      float p = e * inv;
      if (kV != kF32) p = round_fp16(p);
      axpy<kV>(p, vc->row(c), kvh * hd_v, acc.data(), hd_v);
    });
    float* out = n.dst->f32(h, t);
    for (int64_t d = 0; d < hd_v; ++d) out[d] = acc[static_cast<size_t>(d)];
  }
}

}  // namespace

bool attention_supported(const Node& n) {
  // K and V pairs the dispatch below instantiates; a block type needs head slices on 8-element
  // boundaries (load8), which every model's head size gives.
  const DType k = n.src[1]->type, v = n.src[2]->type;
  auto plain = [](DType t) { return t == DType::F16 || t == DType::F32; };
  auto block = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0; };
  const bool pairs = (plain(k) && plain(v)) || (k == DType::F8_E4M3 && v == DType::F8_E4M3) ||
                     ((block(k) || k == DType::F16) && (block(v) || v == DType::F16) && (block(k) || block(v)));
  const bool aligned = n.src[0]->ne[0] % 8 == 0 && n.dst->ne[0] % 8 == 0;
  return pairs && (aligned || (!block(k) && !block(v))) && n.src[4] != nullptr;
}

void attention(const Node& n, ThreadPool& pool) {
  const int kt = kt_of(n.src[1]->type), vt = kt_of(n.src[2]->type);
  const int64_t T = n.src[0]->ne[2];
  const AttentionBatch batch = AttentionBatch::view(static_cast<const int32_t*>(n.src[4]->data));
  const AttentionBatch* b = &batch;
  const int64_t n_head = n.src[0]->ne[1];
  pool.run([&](int ith, int nth) {
    std::vector<float> qr(static_cast<size_t>(n.src[0]->ne[0])), scores(static_cast<size_t>(b->max_cells)),
        acc(static_cast<size_t>(n.dst->ne[0]));
    auto attend = [&](int64_t t, int64_t h0, int64_t h1) {
      // FP8 comes in pairs; F16 and F32 mix (tests), and so do F16, Q8_0 and Q4_0
      // (--cache-type-k/-v).
      if (kt == kQ8 && vt == kQ8) attend_token<kQ8, kQ8>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kQ4 && vt == kQ4) attend_token<kQ4, kQ4>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kQ8 && vt == kQ4) attend_token<kQ8, kQ4>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kQ4 && vt == kQ8) attend_token<kQ4, kQ8>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kQ8) attend_token<kQ8, kF16>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kQ4) attend_token<kQ4, kF16>(n, t, h0, h1, qr, scores, acc);
      else if (vt == kQ8) attend_token<kF16, kQ8>(n, t, h0, h1, qr, scores, acc);
      else if (vt == kQ4) attend_token<kF16, kQ4>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kF8 && vt == kF8) attend_token<kF8, kF8>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kF16 && vt == kF16) attend_token<kF16, kF16>(n, t, h0, h1, qr, scores, acc);
      else if (kt == kF16) attend_token<kF16, kF32>(n, t, h0, h1, qr, scores, acc);
      else if (vt == kF16) attend_token<kF32, kF16>(n, t, h0, h1, qr, scores, acc);
      else attend_token<kF32, kF32>(n, t, h0, h1, qr, scores, acc);
    };
    if (T >= nth) {
      for (int64_t t = ith; t < T; t += nth) attend(t, 0, n_head);
    } else {  // decode: split the heads instead
      int64_t h0, h1;
      ThreadPool::split(n_head, ith, nth, &h0, &h1);
      for (int64_t t = 0; t < T; ++t)
        if (h0 < h1) attend(t, h0, h1);
    }
  });
}

}  // namespace kestrel::cpu
#endif
