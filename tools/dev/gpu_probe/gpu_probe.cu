// gpu_probe: measures the numbers the CUDA backend's design depends on (HBM bandwidth, decode
// GEMV prototypes at Llama-3.1-8B shapes, kernel-launch overhead with and without CUDA graphs,
// a cuBLASLt prefill baseline). A measurement tool, not the backend. See README.md.
//
//   gpu_probe [info|bw|launch|gemv|gemm|all]... [--quick] [--types q4_0,q8_0,bf16]
#include <chrono>
#include <cstring>
#include <map>

#include "probe.cuh"

namespace probe {

// ---- table and facts -------------------------------------------------------------------------
std::vector<Row>& table() {
  static std::vector<Row> t;
  return t;
}
static std::map<std::string, double>& facts() {
  static std::map<std::string, double> f;
  return f;
}
static int g_failures = 0;

void add_row(const std::string& section, const std::string& item, double value, const char* fmt,
             const std::string& unit, const std::string& note) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, value);
  table().push_back({section, item, buf, unit, note});
}
void set_fact(const std::string& key, double v) { facts()[key] = v; }
double fact(const std::string& key) {
  auto it = facts().find(key);
  return it == facts().end() ? NAN : it->second;
}
int failures() { return g_failures; }
void record_check(const std::string& what, double err, double tol) {
  const bool ok = std::isfinite(err) && err <= tol;
  printf("  check %-44s rel_err %.3e (tol %.0e) %s\n", what.c_str(), err, tol, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

__global__ void k_fill_words(uint32_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = hash32(i, seed);
}
void fill_random_words(void* p, size_t n_words, uint32_t seed, cudaStream_t s) {
  k_fill_words<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(p), n_words, seed);
  CK_LAUNCH();
}

// ---- info ------------------------------------------------------------------------------------
void bench_info(const Options&, Device& dev) {
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  int drv = 0, rt = 0, clk = 0, memclk = 0, bus = 0;
  CK(cudaDriverGetVersion(&drv));
  CK(cudaRuntimeGetVersion(&rt));
  CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
  CK(cudaDeviceGetAttribute(&memclk, cudaDevAttrMemoryClockRate, 0));
  CK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, 0));
  dev.sms = p.multiProcessorCount;
  dev.l2 = p.l2CacheSize;
  dev.mem_total = p.totalGlobalMem;
  dev.name = p.name;
  // HBM transfers twice per memory clock: bytes/s = 2 * clock * bus_bits / 8.
  const double peak_GBps = 2.0 * memclk * 1e3 * bus / 8 / 1e9;
  printf("== info\n  device %s, sm_%d%d, %d SMs, L2 %.1f MB, %.1f GiB, smem/block opt-in %zu KB\n",
         p.name, p.major, p.minor, p.multiProcessorCount, p.l2CacheSize / 1e6,
         p.totalGlobalMem / 1073741824.0, p.sharedMemPerBlockOptin / 1024);
  printf("  driver API %d, runtime %d, max SM clock %d MHz, memory clock %d MHz, bus %d bits "
         "-> datasheet HBM %.0f GB/s\n", drv, rt, clk / 1000, memclk / 1000, bus, peak_GBps);
  add_row("info", std::string(p.name) + " sm_" + std::to_string(p.major) + std::to_string(p.minor),
          p.multiProcessorCount, "%.0f", "SMs",
          "L2 " + std::to_string(int(p.l2CacheSize / 1e6)) + " MB, " +
              std::to_string(int(p.totalGlobalMem / 1073741824.0)) + " GiB");
  add_row("info", "datasheet HBM (2 x memclk x bus)", peak_GBps, "%.0f", "GB/s",
          "memclk " + std::to_string(memclk / 1000) + " MHz, SM max " + std::to_string(clk / 1000) + " MHz");
  set_fact("peak_GBps", peak_GBps);
}

// ---- HBM bandwidth ---------------------------------------------------------------------------
// Read-only stream: U independent 16-byte loads in flight per thread, grid-stride, a wrapping
// 32-bit sum per block so nothing is optimized away (and the sum is checked on the host).
template <int U>
__global__ void k_read(const uint4* __restrict__ p, size_t n, uint32_t* partial) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + (U - 1) * stride < n; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n; i += stride) {
    uint4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t t = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) t += warp_sums[w];
    partial[blockIdx.x] = t;
  }
}

// Read-only, one pass: each block reads its own contiguous chunk of blockDim * U uint4 (no grid
// stride; many blocks, like a GEMV over many rows).
template <int U>
__global__ void k_read_chunk(const uint4* __restrict__ p, size_t n, uint32_t* partial) {
  const size_t base = blockIdx.x * size_t(blockDim.x) * U + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const size_t i = base + size_t(u) * blockDim.x;
    v[u] = i < n ? __ldcs(p + i) : make_uint4(0, 0, 0, 0);
  }
  uint32_t acc = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) acc += v[u].x + v[u].y + v[u].z + v[u].w;
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  __shared__ uint32_t warp_sums[32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t t = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) t += warp_sums[w];
    partial[blockIdx.x] = t;
  }
}

void bench_bw(const Options& o, const Device& dev) {
  printf("== bw: device-to-device copy and a read-only streaming kernel\n");
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  const size_t GiB = size_t(1) << 30;
  const size_t max_bytes = o.quick ? GiB : 4 * GiB;
  void *src = nullptr, *dst = nullptr;
  CK(cudaMalloc(&src, max_bytes));
  CK(cudaMalloc(&dst, max_bytes));
  fill_random_words(src, max_bytes / 4, 1234, s);
  CK(cudaMemsetAsync(dst, 0xA5, max_bytes, s));
  CK(cudaStreamSynchronize(s));

  double best_copy = 0;
  for (size_t bytes = GiB; bytes <= max_bytes; bytes *= 2) {
    const double ms = time_ms(s, o.warm, o.reps, [&] {
      CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
    const double GBps = 2.0 * bytes / (ms * 1e-3) / 1e9;  // read + write
    best_copy = std::max(best_copy, GBps);
    printf("  cudaMemcpy D2D %4.1f GiB: %.3f ms, %.0f GB/s (read+write)\n", bytes / double(GiB), ms, GBps);
    add_row("hbm", "cudaMemcpy D2D " + std::to_string(bytes / GiB) + " GiB", GBps, "%.0f", "GB/s",
            "read+write counted");
  }
  // The last copy must have landed: compare 1 MiB at an offset.
  {
    std::vector<uint32_t> a(1 << 18), b(1 << 18);
    const size_t off = (max_bytes / 2) / 4 * 4;
    CK(cudaMemcpy(a.data(), static_cast<char*>(src) + off, 1 << 20, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.data(), static_cast<char*>(dst) + off, 1 << 20, cudaMemcpyDeviceToHost));
    record_check("D2D copy content (1 MiB sample)", memcmp(a.data(), b.data(), 1 << 20) ? 1.0 : 0.0, 0);
  }
  set_fact("d2d_GBps", best_copy);

  // Read kernels: check the sums on 256 MiB first, then time over 2 and 4 GiB.
  const int threads = 512;
  const size_t max_partial = max_bytes / 16 / 256;  // the chunked kernel's block count at 256 x U=1
  uint32_t* partial = nullptr;
  CK(cudaMalloc(&partial, sizeof(uint32_t) * std::max<size_t>(max_partial, dev.sms * 8)));
  auto launch_chunk = [&](int unroll, size_t n, cudaStream_t st) {
    const size_t per_block = 256 * size_t(unroll);
    const unsigned grid = unsigned((n + per_block - 1) / per_block);
    if (unroll == 4) k_read_chunk<4><<<grid, 256, 0, st>>>(static_cast<const uint4*>(src), n, partial);
    else k_read_chunk<8><<<grid, 256, 0, st>>>(static_cast<const uint4*>(src), n, partial);
    CK_LAUNCH();
    return grid;
  };
  {
    const size_t bytes = 256u << 20, n = bytes / 16;
    std::vector<uint32_t> h(bytes / 4);
    CK(cudaMemcpy(h.data(), src, bytes, cudaMemcpyDeviceToHost));
    uint32_t want = 0;
    for (uint32_t w : h) want += w;
    auto got_sum = [&](size_t blocks) {
      std::vector<uint32_t> part(blocks);
      CK(cudaMemcpy(part.data(), partial, blocks * 4, cudaMemcpyDeviceToHost));
      uint32_t got = 0;
      for (uint32_t w : part) got += w;
      return got;
    };
    CK(cudaMemset(partial, 0xFF, sizeof(uint32_t) * dev.sms * 4));
    k_read<4><<<dev.sms * 4, threads>>>(static_cast<const uint4*>(src), n, partial);
    CK_LAUNCH();
    record_check("read kernel sum (256 MiB)", got_sum(dev.sms * 4) == want ? 0.0 : 1.0, 0);
    CK(cudaMemset(partial, 0xFF, sizeof(uint32_t) * (n / 1024 + 1)));
    const unsigned grid = launch_chunk(4, n, 0);
    record_check("chunked read kernel sum (256 MiB)", got_sum(grid) == want ? 0.0 : 1.0, 0);
  }
  double best_read = 0;
  std::string best_cfg;
  for (size_t bytes = 2 * GiB; bytes <= max_bytes; bytes *= 2) {
    for (int unroll : {4, 8})
      for (int bpsm : {1, 2, 4}) {
        const int grid = dev.sms * bpsm;
        const double ms = time_ms(s, o.warm, o.reps, [&] {
          if (unroll == 4) k_read<4><<<grid, threads, 0, s>>>(static_cast<const uint4*>(src), bytes / 16, partial);
          else k_read<8><<<grid, threads, 0, s>>>(static_cast<const uint4*>(src), bytes / 16, partial);
          CK_LAUNCH();
        });
        const double GBps = bytes / (ms * 1e-3) / 1e9;
        printf("  read kernel %4.1f GiB grid %d x %d (U=%d x 16 B in flight): %.3f ms, %.0f GB/s\n",
               bytes / double(GiB), grid, threads, unroll, ms, GBps);
        if (GBps > best_read) {
          best_read = GBps;
          best_cfg = std::to_string(bytes / GiB) + " GiB, grid " + std::to_string(bpsm) + "x" +
                     std::to_string(dev.sms) + " SMs x " + std::to_string(threads) + ", U=" + std::to_string(unroll);
        }
      }
  }
  for (size_t bytes = 2 * GiB; bytes <= max_bytes; bytes *= 2)
    for (int unroll : {4, 8}) {
      unsigned grid = 0;
      const double ms = time_ms(s, o.warm, o.reps, [&] { grid = launch_chunk(unroll, bytes / 16, s); });
      const double GBps = bytes / (ms * 1e-3) / 1e9;
      printf("  chunked read %4.1f GiB, %u blocks x 256 (U=%d): %.3f ms, %.0f GB/s\n", bytes / double(GiB), grid,
             unroll, ms, GBps);
      if (GBps > best_read) {
        best_read = GBps;
        best_cfg = std::to_string(bytes / GiB) + " GiB, chunked, " + std::to_string(grid) + " blocks x 256, U=" +
                   std::to_string(unroll);
      }
    }
  if (best_read == 0) {  // --quick: 1 GiB buffer
    const double ms = time_ms(s, o.warm, o.reps, [&] {
      k_read<4><<<dev.sms * 4, threads, 0, s>>>(static_cast<const uint4*>(src), max_bytes / 16, partial);
      CK_LAUNCH();
    });
    best_read = max_bytes / (ms * 1e-3) / 1e9;
    best_cfg = "1 GiB (quick)";
  }
  add_row("hbm", "read-only kernel (uint4 loads), best", best_read, "%.0f", "GB/s", best_cfg);
  set_fact("read_GBps", best_read);
  CK(cudaFree(partial));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaStreamDestroy(s));
}

// ---- launch overhead -------------------------------------------------------------------------
// A chain of dependent tiny kernels (each increments one counter), like one decode step's ~300.
__global__ void k_tiny(int* p) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1;
}
// Same, for programmatic dependent launch (Hopper): let the next kernel launch at once, then wait
// for the previous one's completion before touching memory.
__global__ void k_tiny_pdl(int* p) {
  cudaTriggerProgrammaticLaunchCompletion();
  cudaGridDependencySynchronize();
  if (threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1;
}

void bench_launch(const Options& o, const Device& dev) {
  printf("== launch: chains of dependent tiny kernels, stream vs CUDA graph vs graph + PDL\n");
  const int chain = 300;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* counter = nullptr;
  CK(cudaMalloc(&counter, sizeof(int)));
  CK(cudaMemset(counter, 0, sizeof(int)));
  long long expected = 0;
  const int reps = std::max(o.reps, 20);

  struct Shape { const char* name; int grid, block; };
  const Shape shapes[] = {{"1 block x 32", 1, 32}, {"SMs x 2 blocks x 256", dev.sms * 2, 256}};
  for (const Shape& sh : shapes) {
    auto plain = [&] {
      for (int i = 0; i < chain; ++i) k_tiny<<<sh.grid, sh.block, 0, s>>>(counter);
      CK_LAUNCH();
    };
    auto pdl = [&] {
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr.val.programmaticStreamSerializationAllowed = 1;
      cfg.gridDim = dim3(sh.grid);
      cfg.blockDim = dim3(sh.block);
      cfg.stream = s;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      for (int i = 0; i < chain; ++i) CK(cudaLaunchKernelEx(&cfg, k_tiny_pdl, counter));
    };
    // Host cost of enqueueing (no GPU waiting involved: measured while the GPU drains).
    std::vector<double> host_us;
    for (int r = 0; r < 10; ++r) {
      CK(cudaStreamSynchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      plain();
      auto t1 = std::chrono::steady_clock::now();
      host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / chain);
    }
    expected += 10LL * chain;
    const double stream_ms = time_ms(s, o.warm, reps, plain);
    const double pdl_stream_ms = time_ms(s, o.warm, reps, pdl);
    expected += 2LL * (o.warm + reps) * chain;

    cudaGraph_t g, gp;
    cudaGraphExec_t ge, gpe;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    plain();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    pdl();
    CK(cudaStreamEndCapture(s, &gp));
    CK(cudaGraphInstantiate(&gpe, gp, 0));
    const double graph_ms = time_ms(s, o.warm, reps, [&] { CK(cudaGraphLaunch(ge, s)); });
    const double graph_pdl_ms = time_ms(s, o.warm, reps, [&] { CK(cudaGraphLaunch(gpe, s)); });
    expected += 2LL * (o.warm + reps) * chain;
    CK(cudaStreamSynchronize(s));

    const double us = 1e3 / chain;
    printf("  %-22s per kernel: host enqueue %.2f us, stream %.2f us, stream+PDL %.2f us, graph %.2f us, "
           "graph+PDL %.2f us\n", sh.name, median(host_us), stream_ms * us, pdl_stream_ms * us,
           graph_ms * us, graph_pdl_ms * us);
    const std::string it = std::string("tiny kernel ") + sh.name;
    add_row("launch", it + ": stream", stream_ms * us, "%.2f", "us/kernel",
            "host enqueue " + std::to_string(median(host_us)).substr(0, 4) + " us; chain of 300");
    add_row("launch", it + ": stream + PDL", pdl_stream_ms * us, "%.2f", "us/kernel", "");
    add_row("launch", it + ": CUDA graph", graph_ms * us, "%.2f", "us/kernel", "");
    add_row("launch", it + ": CUDA graph + PDL", graph_pdl_ms * us, "%.2f", "us/kernel", "");
    if (sh.grid > 1) {  // the full-grid shape is the one a GEMV looks like
      set_fact("launch_stream_us", stream_ms * us);
      set_fact("launch_graph_us", graph_ms * us);
      set_fact("launch_graph_pdl_us", graph_pdl_ms * us);
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphExecDestroy(gpe));
    CK(cudaGraphDestroy(g));
    CK(cudaGraphDestroy(gp));
  }
  // Round trip: one tiny launch + stream synchronize, host clock.
  std::vector<double> rt;
  for (int i = 0; i < 200; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    k_tiny<<<1, 32, 0, s>>>(counter);
    CK_LAUNCH();
    CK(cudaStreamSynchronize(s));
    rt.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  expected += 200;
  add_row("launch", "one launch + cudaStreamSynchronize", median(rt), "%.1f", "us", "host clock");
  int got = 0;
  CK(cudaMemcpy(&got, counter, sizeof got, cudaMemcpyDeviceToHost));
  record_check("every chained kernel ran (counter)", got == int(expected) ? 0.0 : 1.0, 0);
  CK(cudaFree(counter));
  CK(cudaStreamDestroy(s));
}

}  // namespace probe

// ---- main and the summary --------------------------------------------------------------------
static void print_predictions() {
  using probe::fact;
  // Llama-3.1-8B: 32 layers of q,k,v,o (4096x4096, 1024x4096 x2, 4096x4096), gate/up 14336x4096,
  // down 4096x14336; head 128256x4096. Q4_0 = 18 B / 32 weights, Q6_K = 210 B / 256.
  const double layer_w = 2 * 4096.0 * 4096 + 2 * 1024.0 * 4096 + 3 * 14336.0 * 4096;
  const double head_w = 128256.0 * 4096;
  const double q4 = 18.0 / 32, q6k = 210.0 / 256;
  const double bytes_q6head = 32 * layer_w * q4 + head_w * q6k;
  const double bytes_q4head = 32 * layer_w * q4 + head_w * q4;
  const double rd = fact("read_GBps") * 1e9, d2d = fact("d2d_GBps") * 1e9;
  printf("\n== predictions (Llama-3.1-8B Q4_0, weights %.3f GB/token with a Q6_K head, %.3f with a Q4_0 head)\n",
         bytes_q6head / 1e9, bytes_q4head / 1e9);
  if (std::isfinite(rd)) {
    for (double f : {1.0, 0.8, 0.7})
      probe::add_row("predict", "Q4_0 8B decode at " + std::to_string(int(f * 100)) + "% of read bw",
                     f * rd / bytes_q6head, "%.0f", "tok/s", "Q6_K head, 4.357 GB/token");
    if (std::isfinite(d2d))
      probe::add_row("predict", "Q4_0 8B decode at 100% of D2D bw", d2d / bytes_q6head, "%.0f", "tok/s", "");
  }
  const double plain_ms = fact("step_q4_0_plain_ms"), plain_stream_ms = fact("step_q4_0_plain_stream_ms");
  const double best_ms = fact("step_q4_0_best_ms"), n_kernels = fact("step_q4_0_plain_kernels");
  if (std::isfinite(plain_ms)) {
    // The measured steps read a Q4_0 head; a Q6_K head costs more bytes at the same speed.
    const double scale = bytes_q6head / bytes_q4head;
    probe::add_row("predict", "Q4_0 8B GEMV step, separate, graph, no PDL", 1e3 / (plain_ms * scale), "%.0f", "tok/s",
                   "Q6_K head scaled in; " + std::to_string(plain_ms * scale).substr(0, 5) + " ms");
    if (std::isfinite(best_ms))
      probe::add_row("predict", "Q4_0 8B GEMV step, best form measured", 1e3 / (best_ms * scale), "%.0f", "tok/s",
                     std::to_string(best_ms * scale).substr(0, 5) + " ms, " +
                         std::to_string(int(100 * bytes_q6head / (best_ms * scale * 1e-3) / rd)) + "% of read bw");
    if (std::isfinite(plain_stream_ms))
      probe::add_row("predict", "GEMV step: stream minus graph", (plain_stream_ms - plain_ms) * 1e3, "%.0f",
                     "us/token", std::to_string(int(n_kernels)) + " kernels");
    // Launch cost measured directly: the same step with empty kernels of the same grids.
    for (const char* k : {"", "_pdl", "_fused", "_pdl_fused"}) {
      const double e = fact(std::string("step_launch_only") + k + "_ms");
      const bool fused = strstr(k, "fused") != nullptr;
      const double real = fused ? fact("step_q4_0_best_fused_ms") : plain_ms;
      if (std::isfinite(e) && std::isfinite(real))
        probe::add_row("predict", std::string("empty-kernel step / real step") + (strstr(k, "pdl") ? ", PDL" : "") +
                                      (fused ? ", fused" : ""), 100 * e / real, "%.1f", "%",
                       std::to_string(int(e * 1e3)) + " us of " + std::to_string(int(real * 1e3)) + " us (graph)");
    }
    const double lg = fact("launch_graph_us"), ls = fact("launch_stream_us"), lp = fact("launch_graph_pdl_us");
    if (std::isfinite(lg) && std::isfinite(rd)) {
      const double ideal_ms = bytes_q6head / (0.8 * rd) * 1e3;
      const std::string note = std::to_string(int(n_kernels)) + " kernels x tiny-kernel time";
      probe::add_row("predict", "launch share of an 80% step, stream", n_kernels * ls * 1e-3 / ideal_ms * 100, "%.1f",
                     "%", note);
      probe::add_row("predict", "launch share of an 80% step, graph", n_kernels * lg * 1e-3 / ideal_ms * 100, "%.1f",
                     "%", note);
      probe::add_row("predict", "launch share of an 80% step, graph + PDL", n_kernels * lp * 1e-3 / ideal_ms * 100,
                     "%.1f", "%", note);
    }
  }
  const double layer_ms = fact("gemm_layer_ms"), deq_ms = fact("dequant_layer_ms");
  if (std::isfinite(layer_ms)) {
    probe::add_row("predict", "pp512 8B, cuBLASLt BF16 GEMMs only", 512 / (32 * layer_ms * 1e-3), "%.0f",
                   "tok/s", "attention, norms, head excluded");
    const double fp8_ms = fact("gemm_layer_fp8_ms");
    if (std::isfinite(fp8_ms))
      probe::add_row("predict", "pp512 8B, cuBLASLt FP8 GEMMs only", 512 / (32 * fp8_ms * 1e-3), "%.0f", "tok/s",
                     "FP8 weights and activations");
    if (std::isfinite(deq_ms))
      probe::add_row("predict", "pp512 8B, + Q4_0->BF16 dequant per ubatch", 512 / (32 * (layer_ms + deq_ms) * 1e-3),
                     "%.0f", "tok/s", "dequant of every layer once per 512 tokens");
  }
}

int main(int argc, char** argv) {
  probe::Options o;
  std::vector<std::string> what;
  std::string types = "q4_0,q8_0,bf16";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") o.quick = true;
    else if (a == "--types" && i + 1 < argc) types = argv[++i];
    else if (a == "info" || a == "bw" || a == "launch" || a == "gemv" || a == "gemm") what.push_back(a);
    else if (a == "all") what = {"bw", "launch", "gemv", "gemm"};
    else {
      fprintf(stderr, "usage: gpu_probe [info|bw|launch|gemv|gemm|all]... [--quick] [--types q4_0,q8_0,bf16]\n");
      return 1;
    }
  }
  if (what.empty()) what = {"bw", "launch", "gemv", "gemm"};
  if (o.quick) { o.reps = 5; o.warm = 1; }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n == 0) { fprintf(stderr, "no CUDA device\n"); return 2; }
  probe::Device dev;
  probe::bench_info(o, dev);
  for (const std::string& w : what) {
    if (w == "bw") probe::bench_bw(o, dev);
    else if (w == "launch") probe::bench_launch(o, dev);
    else if (w == "gemv") probe::bench_gemv(o, dev, types);
    else if (w == "gemm") probe::bench_gemm(o, dev);
  }
  print_predictions();
  printf("\n== summary (%s; medians of %d timed runs after %d warm-up)\n", dev.name.c_str(), o.reps, o.warm);
  printf("%-8s %-52s %10s %-10s %s\n", "section", "item", "value", "unit", "note");
  for (const probe::Row& r : probe::table())
    printf("%-8s %-52s %10s %-10s %s\n", r.section.c_str(), r.item.c_str(), r.value.c_str(), r.unit.c_str(),
           r.note.c_str());
  printf("correctness checks failed: %d\n", probe::failures());
  return probe::failures() ? 1 : 0;
}
