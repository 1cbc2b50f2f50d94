// ATTENTION on the CPU (AVX2/FMA/F16C): the reference's semantics (F16-rounded queries and
// probabilities for an F16 or FP8 cache, sinks, soft-capping, sliding window) with SIMD dot
// products and FP32 accumulation. Work is split by token, round-robin, so a causal prompt's long rows (the
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

namespace kestrel::cpu {
namespace {

// Cache element types: 0 F32, 1 F16, 2 F8_E4M3 (one byte, read through a table of its 256 values).
constexpr int kF32 = 0, kF16 = 1, kF8 = 2;
constexpr size_t elem_bytes(int kT) { return kT == kF32 ? 4 : kT == kF16 ? 2 : 1; }
int kt_of(DType t) { return t == DType::F16 ? kF16 : t == DType::F8_E4M3 ? kF8 : kF32; }

struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int c = 0; c < 256; ++c) v[c] = fp32_from_bits(e4m3_to_fp32_bits(static_cast<uint8_t>(c)));
  }
};
const E4M3Table kE4M3;

template <int kT>
inline __m256 load8(const void* p, int64_t i) {
  if constexpr (kT == kF16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  else if constexpr (kT == kF8)
    return _mm256_i32gather_ps(kE4M3.v, _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i))), 4);
  else
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}

template <int kT>
inline float load1(const void* p, int64_t i) {
  if constexpr (kT == kF16) return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
  else if constexpr (kT == kF8) return kE4M3.v[static_cast<const uint8_t*>(p)[i]];
  else return static_cast<const float*>(p)[i];
}

template <int kT>
float dot(const float* q, const void* k, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<kT>(k, d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8<kT>(k, d + 8), a1);
  }
  for (; d + 8 <= n; d += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<kT>(k, d), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; d < n; ++d) s += q[d] * load1<kT>(k, d);
  return s;
}

template <int kT>
void axpy(float p, const void* v, float* acc, int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, load8<kT>(v, d), _mm256_loadu_ps(acc + d)));
  for (; d < n; ++d) acc[d] += p * load1<kT>(v, d);
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
      const void* krow = kc->row(c) + static_cast<size_t>(kvh * hd_k) * elem_bytes(kK);
      float s = dot<kK>(qr.data(), krow, hd_k);
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
      const void* vrow = vc->row(c) + static_cast<size_t>(kvh * hd_v) * elem_bytes(kV);
      axpy<kV>(p, vrow, acc.data(), hd_v);
    });
    float* out = n.dst->f32(h, t);
    for (int64_t d = 0; d < hd_v; ++d) out[d] = acc[static_cast<size_t>(d)];
  }
}

}  // namespace

bool attention_supported(const Node& n) {
  auto ok = [](DType t) { return t == DType::F16 || t == DType::F32; };
  const bool fp8 = n.src[1]->type == DType::F8_E4M3 && n.src[2]->type == DType::F8_E4M3;
  return (fp8 || (ok(n.src[1]->type) && ok(n.src[2]->type))) && n.src[4] != nullptr;
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
      // The cache's K and V have one type (a test may mix F16 and F32; FP8 comes in pairs).
      if (kt == kF8 && vt == kF8) attend_token<kF8, kF8>(n, t, h0, h1, qr, scores, acc);
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
