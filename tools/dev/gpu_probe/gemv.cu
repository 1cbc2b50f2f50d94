// gpu_probe gemv: decode GEMV prototypes y = W x at Llama-3.1-8B shapes for Q4_0, Q8_0 and BF16
// (kernels in gemv_kernels.cuh). Every kernel is checked against a double-precision CPU reference on
// random data (poisoned output, first and last copy of every shape) before it is timed. Timing:
// per shape, a CUDA graph of one launch per layer copy; per step, all 32 layers + the head, as
// separate q/k/v and gate/up launches or fused qkv and gate_up launches, stream and graph.
#include "gemv_kernels.cuh"

namespace probe {
namespace {
using gemv::XS;

enum class QT { Q4_0, Q8_0, BF16 };
const char* qt_name(QT t) { return t == QT::Q4_0 ? "q4_0" : t == QT::Q8_0 ? "q8_0" : "bf16"; }
int block_bytes(QT t) { return t == QT::Q4_0 ? 18 : 34; }  // GGUF: fp16 d + 16 or 32 bytes of quants
int quant_bytes(QT t) { return t == QT::Q4_0 ? 16 : 32; }
double bytes_per_weight(QT t) { return t == QT::BF16 ? 2.0 : block_bytes(t) / 32.0; }

struct Shape {
  const char* name;
  int N, K, copies;  // copies: one per layer, so a timed pass over them streams from HBM
};
// Llama-3.1-8B: the separate matrices, the head, and the fused forms (q|k|v rows and gate|up rows
// concatenated at upload) that a backend can launch as one GEMV each.
const Shape kShapes[] = {{"q", 4096, 4096, 32},     {"k", 1024, 4096, 32},     {"v", 1024, 4096, 32},
                         {"o", 4096, 4096, 32},     {"gate", 14336, 4096, 32}, {"up", 14336, 4096, 32},
                         {"down", 4096, 14336, 32}, {"head", 128256, 4096, 1}, {"qkv", 6144, 4096, 32},
                         {"gate_up", 28672, 4096, 32}};
constexpr int kNumShapes = 10;
enum { Q, K_, V, O, GATE, UP, DOWN, HEAD, QKV, GATE_UP };

// Launch with or without the programmatic-dependent-launch attribute (then it may be captured).
template <typename... KArgs, typename... Args>
void launch_k(void (*k)(KArgs...), int grid, int block, size_t smem, cudaStream_t s, bool pdl, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = pdl ? &attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, k, args...));
}

struct Mats {  // one shape's weights for all its copies
  Shape sh;
  uint8_t* native = nullptr;  // GGUF layout (BF16: plain row-major)
  uint4* qs = nullptr;        // repacked quants
  __half* d = nullptr;        // repacked scales
  size_t blocks() const { return size_t(sh.N) * sh.K / 32; }
};
struct Args {
  const uint8_t* native;
  const uint4* qs;
  const __half* d;
  const int8_t* xq;
  const XS* xs;
  const float* x;
  float* y;
  int N, K;
};
using Launch = void (*)(const Args&, cudaStream_t, bool pdl);
struct Variant {
  const char* name;
  Launch launch;
  bool pdl;
};

constexpr int kWarps = 4;  // warps per block for the quantized kernels
template <int BPB>
void l_native(const Args& a, cudaStream_t s, bool pdl) {
  launch_k(gemv::k_native<BPB>, (a.N + kWarps - 1) / kWarps, 32 * kWarps, 0, s, pdl, a.native, a.xq, a.xs, a.y,
           a.N, a.K);
}
template <bool Q4, int R, int U>
void l_repack(const Args& a, cudaStream_t s, bool pdl) {
  const int rows = kWarps * R;
  launch_k(gemv::k_repack_gemv<Q4, R, U>, (a.N + rows - 1) / rows, 32 * kWarps, 0, s, pdl, a.qs, a.d, a.xq, a.xs,
           a.y, a.N, a.K);
}
constexpr int kBf16Warps = 8;
template <int R, int U, bool DB>
void l_bf16(const Args& a, cudaStream_t s, bool pdl) {
  static bool smem_set = false;  // x (fp32) in shared memory: up to 56 KB, above the 48 KB default
  if (!smem_set) CK(cudaFuncSetAttribute(gemv::k_bf16<R, U, DB>, cudaFuncAttributeMaxDynamicSharedMemorySize, 14336 * 4));
  smem_set = true;
  const int rows = kBf16Warps * R;
  launch_k(gemv::k_bf16<R, U, DB>, (a.N + rows - 1) / rows, 32 * kBf16Warps, a.K * sizeof(float), s, pdl,
           reinterpret_cast<const uint4*>(a.native), a.x, a.y, a.N, a.K);
}

int g_sms = 132;  // set from the device in bench_gemv
template <int R>
int persist_grid(int N, int per_sm) { return std::min((N / R + kWarps - 1) / kWarps, g_sms * per_sm); }
template <bool Q4, int R, int U, int PER_SM>
void l_persist(const Args& a, cudaStream_t s, bool pdl) {
  launch_k(gemv::k_persist_gemv<Q4, R, U>, persist_grid<R>(a.N, PER_SM), 32 * kWarps, 0, s, pdl, a.qs, a.d, a.xq,
           a.xs, a.y, a.N, a.K);
}
// Same grids as l_repack<R=2> / l_persist<R=2, 4 per SM>, empty kernels: what the launches alone cost.
void l_empty(const Args& a, cudaStream_t s, bool pdl) {
  launch_k(gemv::k_empty, (a.N + 2 * kWarps - 1) / (2 * kWarps), 32 * kWarps, 0, s, pdl);
}
void l_empty_persist(const Args& a, cudaStream_t s, bool pdl) {
  launch_k(gemv::k_empty, persist_grid<2>(a.N, 4), 32 * kWarps, 0, s, pdl);
}
bool launch_only(const Variant& v) { return v.launch == l_empty || v.launch == l_empty_persist; }

std::vector<Variant> variants(QT t) {
  if (t == QT::Q4_0)
    return {{"launch only", l_empty, false},
            {"launch only +PDL", l_empty, true},
            {"native", l_native<18>, false},
            {"repack R1U4", l_repack<true, 1, 4>, false},
            {"repack R2U2", l_repack<true, 2, 2>, false},
            {"repack R2U4", l_repack<true, 2, 4>, false},
            {"repack R1U4 +PDL", l_repack<true, 1, 4>, true},
            {"repack R2U2 +PDL", l_repack<true, 2, 2>, true},
            {"repack R2U4 +PDL", l_repack<true, 2, 4>, true},
            {"launch only persist", l_empty_persist, false},
            {"launch only persist +PDL", l_empty_persist, true},
            {"persist4 R2U2", l_persist<true, 2, 2, 4>, false},
            {"persist4 R2U2 +PDL", l_persist<true, 2, 2, 4>, true},
            {"persist4 R2U4 +PDL", l_persist<true, 2, 4, 4>, true},
            {"persist2 R2U4 +PDL", l_persist<true, 2, 4, 2>, true},
            {"persist7 R2U2 +PDL", l_persist<true, 2, 2, 7>, true}};
  if (t == QT::Q8_0)
    return {{"native", l_native<34>, false},
            {"repack R1U4", l_repack<false, 1, 4>, false},
            {"repack R2U2", l_repack<false, 2, 2>, false},
            {"repack R1U4 +PDL", l_repack<false, 1, 4>, true},
            {"repack R2U2 +PDL", l_repack<false, 2, 2>, true},
            {"persist4 R2U2 +PDL", l_persist<false, 2, 2, 4>, true},
            {"persist4 R2U4 +PDL", l_persist<false, 2, 4, 4>, true}};
  return {{"simple R1U1", l_bf16<1, 1, false>, false},
          {"R1U8", l_bf16<1, 8, true>, false},
          {"R2U4", l_bf16<2, 4, true>, false},
          {"R1U8 +PDL", l_bf16<1, 8, true>, true},
          {"R2U4 +PDL", l_bf16<2, 4, true>, true}};
}

size_t native_bytes(QT t, const Shape& sh) { return size_t(double(sh.N) * sh.K * bytes_per_weight(t)); }

// Host: quantize x exactly as k_quantize_x does.
void host_quantize(const std::vector<float>& x, std::vector<int8_t>& q, std::vector<XS>& s) {
  const int K = int(x.size());
  q.assign(K, 0);
  s.assign(K / 32, XS{0, 0});
  for (int b = 0; b < K / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = d == 0.0f ? 0 : int(std::nearbyint(x[b * 32 + j] / d));
      q[b * 32 + j] = int8_t(v);
      sum += v;
    }
    s[b] = XS{d, sum};
  }
}

// Reference for sampled rows of one copy: weights copied back from the device (native layout).
struct Ref {
  std::vector<int> rows;
  std::vector<double> y;
};
Ref reference(QT t, const Mats& m, int copy, const std::vector<float>& x, const std::vector<int8_t>& xq,
              const std::vector<XS>& xs) {
  const Shape& sh = m.sh;
  const int stride = sh.N > 16384 ? 31 : 1;
  Ref r;
  for (int i = 0; i < sh.N; i += stride) r.rows.push_back(i);
  const size_t row_bytes = native_bytes(t, Shape{"", 1, sh.K, 1});
  std::vector<uint8_t> w(row_bytes * r.rows.size());
  const uint8_t* base = m.native + size_t(copy) * native_bytes(t, sh);
  CK(cudaMemcpy2D(w.data(), row_bytes, base, row_bytes * stride, row_bytes, r.rows.size(), cudaMemcpyDeviceToHost));
  const int nb = sh.K / 32;
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const uint8_t* rp = w.data() + i * row_bytes;
    double acc = 0;
    if (t == QT::BF16) {
      for (int k = 0; k < sh.K; ++k) {
        uint16_t h;
        memcpy(&h, rp + 2 * k, 2);
        uint32_t u = uint32_t(h) << 16;
        float f;
        memcpy(&f, &u, 4);
        acc += double(f) * x[k];
      }
    } else {
      const int bpb = block_bytes(t);
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = rp + size_t(b) * bpb;
        __half hd;
        memcpy(&hd, blk, 2);
        const double d = __half2float(hd);
        long isum = 0;
        for (int j = 0; j < 32; ++j) {
          const int q = t == QT::Q4_0 ? (j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8
                                      : int(int8_t(blk[2 + j]));
          isum += long(q) * xq[b * 32 + j];
        }
        acc += d * xs[b].d * double(isum);
      }
    }
    r.y.push_back(acc);
  }
  return r;
}

double compare(const Ref& r, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (float v : y)
    if (!std::isfinite(v)) return INFINITY;  // an unwritten (poisoned) or broken output
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const double e = y[r.rows[i]] - r.y[i];
    num += e * e;
    den += r.y[i] * r.y[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

void bench_gemv(const Options& o, const Device& dev, const std::string& types) {
  g_sms = dev.sms;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Activations: fp32 x for K = 4096 and 14336, random; quantized on the device each step.
  std::vector<float> hx[2];
  float* dx[2];
  int8_t* dxq[2];
  XS* dxs[2];
  std::vector<int8_t> hxq[2];
  std::vector<XS> hxs[2];
  const int Ks[2] = {4096, 14336};
  for (int i = 0; i < 2; ++i) {
    hx[i].resize(Ks[i]);
    for (int k = 0; k < Ks[i]; ++k) hx[i][k] = hash_unit(k, 77 + i);
    host_quantize(hx[i], hxq[i], hxs[i]);
    CK(cudaMalloc(&dx[i], Ks[i] * sizeof(float)));
    CK(cudaMalloc(&dxq[i], Ks[i]));
    CK(cudaMalloc(&dxs[i], Ks[i] / 32 * sizeof(XS)));
    CK(cudaMemcpy(dx[i], hx[i].data(), Ks[i] * sizeof(float), cudaMemcpyHostToDevice));
  }
  auto quantize = [&](int i, bool pdl) {
    launch_k(gemv::k_quantize_x, (Ks[i] / 32 + 3) / 4, 128, 0, s, pdl, (const float*)dx[i], dxq[i], dxs[i], Ks[i]);
  };
  quantize(0, false);
  quantize(1, false);
  {  // the device quantization must match the host's exactly
    std::vector<int8_t> q(Ks[1]);
    CK(cudaMemcpyAsync(q.data(), dxq[1], Ks[1], cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    record_check("quantize_x int8 matches host (K=14336)", q == hxq[1] ? 0.0 : 1.0, 0);
  }
  float* dy = nullptr;
  CK(cudaMalloc(&dy, 128256 * sizeof(float)));
  const double read_GBps = fact("read_GBps");

  for (QT t : {QT::Q4_0, QT::Q8_0, QT::BF16}) {
    if (types.find(qt_name(t)) == std::string::npos) continue;
    printf("== gemv %s (weights %.4f bytes each)\n", qt_name(t), bytes_per_weight(t));
    Mats m[kNumShapes];
    for (int i = 0; i < kNumShapes; ++i) {
      m[i].sh = kShapes[i];
      const size_t nb = native_bytes(t, m[i].sh), copies = m[i].sh.copies;
      CK(cudaMalloc(&m[i].native, nb * copies));
      if (t == QT::BF16) {
        gemv::k_fill_bf16<<<4096, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(m[i].native), nb / 2 * copies, 100 + i);
        CK_LAUNCH();
      } else {
        const size_t blocks = m[i].blocks() * copies;
        gemv::k_fill_blocks<<<4096, 256, 0, s>>>(m[i].native, blocks, block_bytes(t), 100 + i);
        CK_LAUNCH();
        CK(cudaMalloc(&m[i].qs, blocks * quant_bytes(t)));
        CK(cudaMalloc(&m[i].d, blocks * sizeof(__half)));
        gemv::k_repack<<<4096, 256, 0, s>>>(m[i].native, blocks, block_bytes(t), reinterpret_cast<uint8_t*>(m[i].qs),
                                            m[i].d);
        CK_LAUNCH();
      }
    }
    CK(cudaStreamSynchronize(s));
    auto args = [&](int i, int copy) {
      const Mats& mm = m[i];
      const int xi = mm.sh.K == 4096 ? 0 : 1;
      const size_t blocks = mm.blocks() * copy;
      return Args{mm.native + native_bytes(t, mm.sh) * copy,
                  mm.qs ? mm.qs + blocks * quant_bytes(t) / 16 : nullptr,
                  mm.d ? mm.d + blocks : nullptr, dxq[xi], dxs[xi], dx[xi], dy, mm.sh.N, mm.sh.K};
    };
    // References: first and last copy of every shape.
    std::vector<Ref> refs[kNumShapes];
    for (int i = 0; i < kNumShapes; ++i)
      for (int copy : {0, m[i].sh.copies - 1}) {
        const int xi = m[i].sh.K == 4096 ? 0 : 1;
        refs[i].push_back(reference(t, m[i], copy, hx[xi], hxq[xi], hxs[xi]));
        if (m[i].sh.copies == 1) break;
      }
    // The decode step's weight bytes (the head read once), separate and fused forms alike.
    double step_bytes = native_bytes(t, m[HEAD].sh);
    for (int i : {Q, K_, V, O, GATE, UP, DOWN}) step_bytes += 32.0 * native_bytes(t, m[i].sh);

    const std::vector<Variant> vars = variants(t);
    std::vector<std::pair<double, double>> res[kNumShapes];  // per shape, per variant: GB/s, us
    double best_ms = INFINITY;
    for (const Variant& v : vars) {
      // Correctness first: poisoned output, every shape, first and last copy.
      for (int i = 0; i < kNumShapes && !launch_only(v); ++i) {
        for (size_t c = 0; c < refs[i].size(); ++c) {
          const int copy = c == 0 ? 0 : m[i].sh.copies - 1;
          CK(cudaMemsetAsync(dy, 0xFF, m[i].sh.N * sizeof(float), s));
          v.launch(args(i, copy), s, v.pdl);
          std::vector<float> y(m[i].sh.N);
          CK(cudaMemcpyAsync(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
          CK(cudaStreamSynchronize(s));
          record_check(std::string(qt_name(t)) + " " + v.name + " " + m[i].sh.name + " copy " + std::to_string(copy),
                       compare(refs[i][c], y), 1e-4);
        }
      }
      // Per shape: a CUDA graph of one launch per copy (>= 4 launches), replayed.
      for (int i = 0; i < kNumShapes && !launch_only(v); ++i) {
        const int launches = std::max(m[i].sh.copies, 4);
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int l = 0; l < launches; ++l) v.launch(args(i, l % m[i].sh.copies), s, v.pdl);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        const double ms = time_ms(s, o.warm, o.reps, [&] { CK(cudaGraphLaunch(ge, s)); }) / launches;
        const double GBps = native_bytes(t, m[i].sh) / (ms * 1e-3) / 1e9;
        printf("  %-18s %-7s %6dx%-6d %8.2f us %6.0f GB/s %5.1f%% of read\n", v.name, m[i].sh.name, m[i].sh.N,
               m[i].sh.K, ms * 1e3, GBps, 100 * GBps / read_GBps);
        res[i].push_back({GBps, ms * 1e3});
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
      // The whole decode step's GEMVs: 32 layers and the head. For the quantized types each GEMV
      // input is quantized by its own kernel first (standing in for the norm/activation op that
      // will quantize in its epilogue), so the kernel count is close to a real step's.
      for (bool fused : {false, true}) {
        int kernels = 0;
        const bool q = t != QT::BF16;
        auto gemv = [&](int i, int l) { v.launch(args(i, l), s, v.pdl), ++kernels; };
        auto quant = [&](int i) { if (q) quantize(i, v.pdl), ++kernels; };
        auto step = [&] {
          kernels = 0;
          for (int l = 0; l < 32; ++l) {
            quant(0);
            if (fused) gemv(QKV, l);
            else for (int i : {Q, K_, V}) gemv(i, l);
            quant(0);
            gemv(O, l);
            quant(0);
            if (fused) gemv(GATE_UP, l);
            else for (int i : {GATE, UP}) gemv(i, l);
            quant(1);
            gemv(DOWN, l);
          }
          quant(0);
          gemv(HEAD, 0);
        };
        const double stream_ms = time_ms(s, o.warm, o.reps, step);
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        step();
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        const double graph_ms = time_ms(s, o.warm, o.reps, [&] { CK(cudaGraphLaunch(ge, s)); });
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        const double GBps = step_bytes / (graph_ms * 1e-3) / 1e9;
        const char* form = fused ? "fused qkv, gate_up" : "separate";
        printf("  %-18s step %-18s (%d kernels, %.3f GB): stream %.3f ms, graph %.3f ms = %.0f GB/s, %.1f%% of "
               "read, %.0f tok/s\n", v.name, form, kernels, step_bytes / 1e9, stream_ms, graph_ms, GBps,
               100 * GBps / read_GBps, 1e3 / graph_ms);
        char note[128];
        const std::string item = std::string("8B step ") + v.name + (fused ? ", fused" : "");
        if (launch_only(v)) {  // empty kernels (the x quantization kernels are real): launch cost alone
          snprintf(note, sizeof note, "%d kernels; stream %.0f us", kernels, stream_ms * 1e3);
          add_row(std::string("gemv ") + qt_name(t), item, graph_ms * 1e3, "%.0f", "us/step", note);
          if (v.launch == l_empty)
            set_fact(std::string("step_launch_only") + (v.pdl ? "_pdl" : "") + (fused ? "_fused" : "") + "_ms", graph_ms);
          continue;
        }
        snprintf(note, sizeof note, "%d kernels; graph %.3f ms (stream %.3f), %.1f%% of read", kernels, graph_ms,
                 stream_ms, 100 * GBps / read_GBps);
        add_row(std::string("gemv ") + qt_name(t), item, 1e3 / graph_ms, "%.0f", "tok/s", note);
        if (t == QT::Q4_0 && !fused && !v.pdl && !(graph_ms >= fact("step_q4_0_plain_ms"))) {
          set_fact("step_q4_0_plain_ms", graph_ms);
          set_fact("step_q4_0_plain_stream_ms", stream_ms);
          set_fact("step_q4_0_plain_kernels", kernels);
        }
        if (t == QT::Q4_0 && fused && !(graph_ms >= fact("step_q4_0_best_fused_ms")))
          set_fact("step_q4_0_best_fused_ms", graph_ms);
        if (t == QT::Q4_0 && graph_ms < best_ms) {
          best_ms = graph_ms;
          set_fact("step_q4_0_best_ms", graph_ms);
          set_fact("step_q4_0_best_kernels", kernels);
        }
      }
    }
    std::vector<const char*> timed;  // names of the variants that res[] holds, in order
    for (const Variant& v : vars)
      if (!launch_only(v)) timed.push_back(v.name);
    for (int i = 0; i < kNumShapes; ++i) {
      size_t b = 1;  // best improved variant (index 0 is the straightforward one)
      for (size_t vi = 1; vi < timed.size(); ++vi)
        if (res[i][vi].first > res[i][b].first) b = vi;
      char note[160];
      snprintf(note, sizeof note, "%s %.0f GB/s %.1f us; %s %.0f GB/s %.1f us", timed[0], res[i][0].first,
               res[i][0].second, timed[b], res[i][b].first, res[i][b].second);
      add_row(std::string("gemv ") + qt_name(t),
              std::string(m[i].sh.name) + " " + std::to_string(m[i].sh.N) + "x" + std::to_string(m[i].sh.K) +
                  ": best % of read",
              100 * std::max(res[i][0].first, res[i][b].first) / read_GBps, "%.1f", "%", note);
    }
    for (Mats& mm : m) {
      CK(cudaFree(mm.native));
      if (mm.qs) CK(cudaFree(mm.qs));
      if (mm.d) CK(cudaFree(mm.d));
    }
  }
  CK(cudaFree(dy));
  for (int i = 0; i < 2; ++i) {
    CK(cudaFree(dx[i]));
    CK(cudaFree(dxq[i]));
    CK(cudaFree(dxs[i]));
  }
  CK(cudaStreamDestroy(s));
}

}  // namespace probe
