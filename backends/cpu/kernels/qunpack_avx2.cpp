// Unpacking of every quantized weight type into the canonical form of qgemm.h. Plain loops over
// bytes: compiled with -mavx2 (file name), the compiler vectorizes them.
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/qgemm.h"
#include "tensor/quants/quant_blocks.h"
#include "backends/cpu/repacked.h"
#include "core/fp16.h"

namespace kestrel::cpu {
namespace {

struct RowOut {
  uint8_t* q;
  float* d;
  int16_t* sub;
  float* mn;
  int16_t* mq;
  float* dm;
  // K-quant mins as integers times dmin.
  void int_mins(int64_t u, float dmin, int ma, int mb) {
    dm[u] = dmin;
    mq[2 * u] = static_cast<int16_t>(ma);
    mq[2 * u + 1] = static_cast<int16_t>(mb);
  }
  // Scale, the two halves' sub-scales and (Q4_1/Q5_1) the offset m of unit u.
  void unit(int64_t u, float du, int16_t sa, int16_t sb, float m = 0) {
    d[u] = du;
    for (int i = 0; i < 8; ++i) sub[16 * u + i] = sa, sub[16 * u + 8 + i] = sb;
    mn[2 * u] = mn[2 * u + 1] = m;
  }
};

// Legacy 32-value blocks: the two nibbles of qs[j] are values j and j + 16.
template <class B>
void nibbles(const B& b, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = b.qs[j] & 0xF, q[j + 16] = b.qs[j] >> 4;
}
template <class B>
void fifth_bit(const B& b, uint8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<uint8_t>(((qh >> j) & 1) << 4);
}

void unpack_row(DType t, const uint8_t* src, int64_t K, RowOut o) {
  const int64_t nu = K / 32;
  switch (t) {
    case DType::Q4_0:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_q4_0>(src, u);
        const float d = fp16_to_fp32(b.d);
        nibbles(b, o.q + 32 * u);
        o.unit(u, d, 1, 1);
      }
      return;
    case DType::Q4_1:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_q4_1>(src, u);
        const float m = fp16_to_fp32(b.m);
        nibbles(b, o.q + 32 * u);
        o.unit(u, fp16_to_fp32(b.d), 1, 1, m);
      }
      return;
    case DType::Q5_0:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_q5_0>(src, u);
        const float d = fp16_to_fp32(b.d);
        nibbles(b, o.q + 32 * u);
        fifth_bit(b, o.q + 32 * u);
        o.unit(u, d, 1, 1);
      }
      return;
    case DType::Q5_1:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_q5_1>(src, u);
        const float m = fp16_to_fp32(b.m);
        nibbles(b, o.q + 32 * u);
        fifth_bit(b, o.q + 32 * u);
        o.unit(u, fp16_to_fp32(b.d), 1, 1, m);
      }
      return;
    case DType::Q8_0:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_q8_0>(src, u);
        std::memcpy(o.q + 32 * u, b.qs, 32);
        o.unit(u, fp16_to_fp32(b.d), 1, 1);
      }
      return;
    case DType::IQ4_NL:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_iq4_nl>(src, u);
        uint8_t* q = o.q + 32 * u;
        for (int j = 0; j < 16; ++j)
          q[j] = static_cast<uint8_t>(kvalues_iq4nl[b.qs[j] & 0xF]),
          q[j + 16] = static_cast<uint8_t>(kvalues_iq4nl[b.qs[j] >> 4]);
        o.unit(u, fp16_to_fp32(b.d), 1, 1);
      }
      return;
    case DType::MXFP4:
      for (int64_t u = 0; u < nu; ++u) {
        const auto b = load_block<block_mxfp4>(src, u);
        uint8_t* q = o.q + 32 * u;
        for (int j = 0; j < 16; ++j)
          q[j] = static_cast<uint8_t>(kvalues_mxfp4[b.qs[j] & 0xF]),
          q[j + 16] = static_cast<uint8_t>(kvalues_mxfp4[b.qs[j] >> 4]);
        o.unit(u, e8m0_to_fp32_half(b.e), 1, 1);
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t s = 0; s < K / QK_K; ++s) {
        const bool five = t == DType::Q5_K;
        const auto b4 = five ? block_q4_K{} : load_block<block_q4_K>(src, s);
        const auto b5 = five ? load_block<block_q5_K>(src, s) : block_q5_K{};
        const uint8_t* qs = five ? b5.qs : b4.qs;
        const uint8_t* scales = five ? b5.scales : b4.scales;
        const float d = fp16_to_fp32(five ? b5.d : b4.d), dmin = fp16_to_fp32(five ? b5.dmin : b4.dmin);
        uint8_t* q = o.q + QK_K * s;
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) q[64 * c + l] = qs[32 * c + l] & 0xF, q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
          if (five)
            for (int l = 0; l < 32; ++l)
              q[64 * c + l] |= static_cast<uint8_t>(((b5.qh[l] >> (2 * c)) & 1) << 4),
                  q[64 * c + 32 + l] |= static_cast<uint8_t>(((b5.qh[l] >> (2 * c + 1)) & 1) << 4);
        }
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          get_scale_min_k4(j, scales, &sc, &m);
          o.unit(8 * s + j, d, sc, sc);
          o.int_mins(8 * s + j, dmin, m, m);
        }
      }
      return;
    case DType::Q6_K:
      for (int64_t s = 0; s < K / QK_K; ++s) {
        const auto b = load_block<block_q6_K>(src, s);
        const float d = fp16_to_fp32(b.d);
        uint8_t* q = o.q + QK_K * s;
        for (int h = 0; h < 2; ++h) {
          const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
          uint8_t* qq = q + 128 * h;
          for (int l = 0; l < 32; ++l) {
            qq[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
            qq[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
            qq[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            qq[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
          }
        }
        for (int j = 0; j < 8; ++j) {
          const int8_t sa = b.scales[2 * j], sb = b.scales[2 * j + 1];
          o.unit(8 * s + j, d, sa, sb);
        }
      }
      return;
    case DType::Q3_K:
      for (int64_t s = 0; s < K / QK_K; ++s) {
        const auto b = load_block<block_q3_K>(src, s);
        const float d = fp16_to_fp32(b.d);
        uint8_t* q = o.q + QK_K * s;
        for (int e = 0; e < QK_K; ++e) {
          const int r = e % 128;
          const int low = (b.qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
          const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
          q[e] = static_cast<uint8_t>(low + 4 * high);  // value (low - (high ? 0 : 4)) = q - 4
        }
        int16_t sc[16];
        for (int g = 0; g < 16; ++g) {
          const int lo = (b.scales[g % 8] >> (4 * (g / 8))) & 0xF;
          const int hi = (b.scales[8 + g % 4] >> (2 * (g / 4))) & 3;
          sc[g] = static_cast<int16_t>((lo | (hi << 4)) - 32);
        }
        for (int j = 0; j < 8; ++j)
          o.unit(8 * s + j, d, sc[2 * j], sc[2 * j + 1]);
      }
      return;
    case DType::Q2_K:
      for (int64_t s = 0; s < K / QK_K; ++s) {
        const auto b = load_block<block_q2_K>(src, s);
        const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
        uint8_t* q = o.q + QK_K * s;
        for (int g = 0; g < 16; ++g) {
          const uint8_t* qs = b.qs + 32 * (g / 8) + 16 * (g % 2);
          const int shift = 2 * ((g % 8) / 2);
          for (int l = 0; l < 16; ++l) q[16 * g + l] = (qs[l] >> shift) & 3;
        }
        for (int j = 0; j < 8; ++j) {
          const uint8_t sa = b.scales[2 * j], sb = b.scales[2 * j + 1];
          o.unit(8 * s + j, d, sa & 0xF, sb & 0xF);
          o.int_mins(8 * s + j, dmin, sa >> 4, sb >> 4);
        }
      }
      return;
    default:
      return;
  }
}

}  // namespace

void UnpackedRows::resize(int64_t rows, int64_t k) {
  K = k;
  q.resize(static_cast<size_t>(rows * k));
  d.resize(static_cast<size_t>(rows * k / 32));
  sub.resize(static_cast<size_t>(rows * k / 2));
  mn.resize(static_cast<size_t>(rows * k / 16));
  mq.resize(static_cast<size_t>(rows * k / 16));
  dm.resize(static_cast<size_t>(rows * k / 32));
}

bool qgemm_supports(DType w, int64_t K) {
  switch (w) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
    case DType::IQ4_NL: case DType::MXFP4:
      return K % 32 == 0;
    case cpu::Q4_0_R8: case cpu::Q4_K_R8: case cpu::Q8_0_R8: case cpu::Q6_K_R8:
      return cpu::grouped_fits(cpu::plain_type(w), K, 8);
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return K % QK_K == 0;
    default:
      return false;
  }
}

void qgemm_unpack(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t n, UnpackedRows& out) {
  const int64_t K = out.K;
  const DType layout = w;
  const bool grouped = cpu::is_grouped(w);  // each row copied out of its group, then read as plain
  w = qgemm_arith_type(w);
  thread_local std::vector<uint8_t> row;
  if (grouped) row.resize(static_cast<size_t>(row_bytes));
  out.is_signed = w == DType::Q8_0 || w == DType::IQ4_NL || w == DType::MXFP4;
  out.has_sub = w == DType::Q2_K || w == DType::Q3_K || w == DType::Q4_K || w == DType::Q5_K || w == DType::Q6_K;
  out.has_m = w == DType::Q4_1 || w == DType::Q5_1;
  out.int_mins = w == DType::Q2_K || w == DType::Q4_K || w == DType::Q5_K;
  out.centre_shift = w == DType::Q4_0 ? 3 : w == DType::Q5_0 ? 4 : w == DType::Q3_K ? 2 : w == DType::Q6_K ? 5 : 0;
  for (int64_t r = 0; r < n; ++r) {
    if (grouped) cpu::grouped_row(layout, data, K, r0 + r, row.data());
    unpack_row(w, grouped ? row.data() : data + (r0 + r) * row_bytes, K,
               {out.q.data() + r * K, out.d.data() + r * K / 32, out.sub.data() + r * K / 2, out.mn.data() + r * K / 16,
                out.mq.data() + r * K / 16, out.dm.data() + r * K / 32});
  }
}

}  // namespace kestrel::cpu
