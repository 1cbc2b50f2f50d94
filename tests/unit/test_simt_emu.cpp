// The SIMT emulator (backends/cuda/emu): kernels written as CUDA run on the CPU with GPU
// semantics: indices, block barriers, shared memory, warp shuffles and votes, atomics; a missing
// barrier gives a wrong value and barrier misuse an error naming the threads, never a hang.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cuda/emu/cuda_shim.h"

using kestrel::cuda_emu::launch_kernel;

namespace {

__global__ void write_ids(int* out) {
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[b * per_block + t] += static_cast<int>(b * per_block + t) + 1;
}

// Sum of n values per block: a tree in shared memory. With `skip_barrier` the barrier after the
// loads is dropped: a bug the emulator must expose.
__global__ void block_sum(const float* x, float* out, int n, bool skip_barrier) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  const unsigned i = blockIdx.x * blockDim.x + t;
  s[t] = i < static_cast<unsigned>(n) ? x[i] : 0.0f;
  if (!skip_barrier) __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Inclusive prefix sum over a warp with __shfl_up_sync (Hillis-Steele); `wrong_direction` uses
// __shfl_down_sync instead (lanes swapped: a suffix sum).
__global__ void warp_scan(const int* x, int* out, bool wrong_direction) {
  const unsigned lane = threadIdx.x % 32;
  int v = x[threadIdx.x];
  for (unsigned d = 1; d < 32; d *= 2) {
    const int o = wrong_direction ? __shfl_down_sync(0xffffffffu, v, d) : __shfl_up_sync(0xffffffffu, v, d);
    if (wrong_direction ? lane + d < 32 : lane >= d) v += o;
  }
  out[threadIdx.x] = v;
}

__global__ void warp_max_xor(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int m = 16; m > 0; m /= 2) v = std::max(v, __shfl_xor_sync(0xffffffffu, v, m));
  out[threadIdx.x] = v;
}

// Sums over segments of 16 lanes (xor, width 16), then lane 3 of each 8-lane segment broadcast
// (idx, width 8), and each lane's own id.
__global__ void segments(const int* x, int* sum16, int* bcast8, unsigned* lanes) {
  int v = x[threadIdx.x];
  for (int m = 8; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m, 16);
  sum16[threadIdx.x] = v;
  bcast8[threadIdx.x] = __shfl_sync(0xffffffffu, x[threadIdx.x], 3, 8);
  lanes[threadIdx.x] = kestrel::cuda_emu::lane_id();
}

__global__ void votes(const int* x, unsigned* ballot, int* any, int* all) {
  const int p = x[threadIdx.x] > 0;
  const unsigned b = __ballot_sync(0xffffffffu, p);
  const int a = __any_sync(0xffffffffu, p), l = __all_sync(0xffffffffu, p);
  if (threadIdx.x % 32 == 0) {
    ballot[threadIdx.x / 32] = b;
    any[threadIdx.x / 32] = a;
    all[threadIdx.x / 32] = l;
  }
}

__global__ void histogram(const int* x, int n, int* out, int bins) {
  KS_DYNAMIC_SMEM(int, h);
  for (int b = static_cast<int>(threadIdx.x); b < bins; b += static_cast<int>(blockDim.x)) h[b] = 0;
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) atomicAdd(&h[x[i] % bins], 1);
  __syncthreads();
  for (int b = static_cast<int>(threadIdx.x); b < bins; b += static_cast<int>(blockDim.x)) out[b] = h[b];
}

__global__ void early_exit(int* out) {
  if (threadIdx.x >= 16) return;  // these threads never reach the barrier below
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void divergent(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  else __syncwarp();
  out[threadIdx.x] = 1;
}

struct alignas(16) Float4 {
  float x, y, z, w;
};

// Each thread loads one Float4 from base + offset floats: offset 1 misaligns every load.
__global__ void load4(const float* base, int offset, float* out) {
  const Float4 v = kestrel::cuda_emu::vector_load(reinterpret_cast<const Float4*>(base + offset) + threadIdx.x);
  out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

__global__ void throws(int*) {
  if (threadIdx.x == 5) throw std::runtime_error("bad index");
}

}  // namespace

TEST_CASE("SIMT emulator: every thread of a 3-D grid of 3-D blocks runs once with its indices") {
  std::vector<int> out(3 * 2 * 2 * 4 * 3 * 2, 0);
  REQUIRE(launch_kernel(write_ids, dim3(3, 2, 2), dim3(4, 3, 2), 0, out.data()) == "");
  for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == static_cast<int>(i) + 1);
}

TEST_CASE("SIMT emulator: shared-memory reduction with barriers; a dropped barrier shows") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int n : {256, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = u(rng);
    const int blocks = (n + 255) / 256;
    std::vector<float> out(static_cast<size_t>(blocks), -1.0f), bad(out);
    REQUIRE(launch_kernel(block_sum, dim3(blocks), dim3(256), 0, x.data(), out.data(), n, false) == "");
    REQUIRE(launch_kernel(block_sum, dim3(blocks), dim3(256), 0, x.data(), bad.data(), n, true) == "");
    for (int b = 0; b < blocks; ++b) {
      double want = 0;
      for (int i = 256 * b; i < std::min(n, 256 * (b + 1)); ++i) want += x[static_cast<size_t>(i)];
      CHECK(out[static_cast<size_t>(b)] == doctest::Approx(want).epsilon(1e-4));
      CHECK(bad[static_cast<size_t>(b)] != doctest::Approx(want).epsilon(1e-4));  // the race is visible
    }
  }
}

TEST_CASE("SIMT emulator: warp shuffles (up, down, xor) and votes, full and partial warps") {
  std::mt19937 rng(8);
  std::vector<int> x(64);
  for (int& v : x) v = static_cast<int>(rng() % 100) - 50;
  std::vector<int> scan(64), wrong(64);
  REQUIRE(launch_kernel(warp_scan, dim3(1), dim3(64), 0, x.data(), scan.data(), false) == "");
  REQUIRE(launch_kernel(warp_scan, dim3(1), dim3(64), 0, x.data(), wrong.data(), true) == "");
  int mismatches = 0;
  for (int w = 0; w < 2; ++w) {
    int acc = 0;
    for (int l = 0; l < 32; ++l) {
      acc += x[static_cast<size_t>(32 * w + l)];
      CHECK(scan[static_cast<size_t>(32 * w + l)] == acc);
      mismatches += wrong[static_cast<size_t>(32 * w + l)] != acc;
    }
  }
  CHECK(mismatches > 0);  // lanes exchanged the other way: the check would fail

  std::vector<float> f(40), mx(40);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>((i * 37) % 41);
  REQUIRE(launch_kernel(warp_max_xor, dim3(1), dim3(40), 0, f.data(), mx.data()) == "");
  for (size_t i = 0; i < 32; ++i) CHECK(mx[i] == *std::max_element(f.begin(), f.begin() + 32));
  // The partial warp (lanes 32-39): partners that do not exist give the lane its own value.
  for (size_t i = 32; i < 40; ++i) CHECK(mx[i] == *std::max_element(f.begin() + 32, f.end()));

  std::vector<int> sum16(64), bcast8(64);
  std::vector<unsigned> lanes(64);
  REQUIRE(launch_kernel(segments, dim3(1), dim3(64), 0, x.data(), sum16.data(), bcast8.data(), lanes.data()) == "");
  for (size_t i = 0; i < 64; ++i) {
    const size_t s16 = i - i % 16, s8 = i - i % 8;
    CHECK(sum16[i] == std::accumulate(x.begin() + static_cast<long>(s16), x.begin() + static_cast<long>(s16 + 16), 0));
    CHECK(bcast8[i] == x[s8 + 3]);
    CHECK(lanes[i] == i % 32);
  }

  std::vector<int> p(64, 1);
  p[3] = 0;
  p[40] = -1;
  for (int i = 32; i < 64; ++i) p[static_cast<size_t>(i)] = i == 40 ? 1 : 0;
  std::vector<unsigned> ballot(2);
  std::vector<int> any(2), all(2);
  REQUIRE(launch_kernel(votes, dim3(1), dim3(64), 0, p.data(), ballot.data(), any.data(), all.data()) == "");
  CHECK(ballot[0] == (0xffffffffu & ~(1u << 3)));
  CHECK(ballot[1] == (1u << 8));
  CHECK(any[0] == 1);
  CHECK(all[0] == 0);
  CHECK(any[1] == 1);
  CHECK(all[1] == 0);
}

TEST_CASE("SIMT emulator: dynamic shared memory and atomics; shared memory starts as garbage") {
  std::vector<int> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int>((i * 7919) % 1009);
  const int bins = 17;
  std::vector<int> h(bins, -1);
  REQUIRE(launch_kernel(histogram, dim3(1), dim3(96), bins * sizeof(int), x.data(), 1000, h.data(), bins) == "");
  std::vector<int> want(bins, 0);
  for (int v : x) ++want[static_cast<size_t>(v % bins)];
  CHECK(h == want);
  // Without the zeroing loop the bins would start at -1 (0xFF bytes): read-before-write shows.
  std::vector<int> raw(4, 0);
  REQUIRE(kestrel::cuda_emu::launch(dim3(1), dim3(4), 4 * sizeof(int), [&] {
            raw[threadIdx.x] = static_cast<int*>(kestrel::cuda_emu::dynamic_shared())[threadIdx.x];
          }) == "");
  CHECK(raw == std::vector<int>(4, -1));
}

TEST_CASE("SIMT emulator: barrier misuse and exceptions are errors naming the threads, not hangs") {
  std::vector<int> out(64, 0);
  const std::string e1 = launch_kernel(early_exit, dim3(2), dim3(64), 0, out.data());
  CHECK(e1.find("block (0, 0, 0)") != std::string::npos);
  CHECK(e1.find("__syncthreads reached by threads 0, 1") != std::string::npos);
  CHECK(e1.find("never by threads 16") != std::string::npos);
  const std::string e2 = launch_kernel(divergent, dim3(1), dim3(64), 0, out.data());
  CHECK(e2.find("different barriers") != std::string::npos);
  const std::string e3 = launch_kernel(throws, dim3(1), dim3(8), 0, out.data());
  CHECK(e3.find("thread 5 threw: bad index") != std::string::npos);
  CHECK(kestrel::cuda_emu::launch(dim3(1), dim3(2048), 0, [] {}).find("1 to 1024") != std::string::npos);
  alignas(16) float data[4 * 9] = {};
  for (int i = 0; i < 36; ++i) data[i] = static_cast<float>(i);
  std::vector<float> sums(8);
  CHECK(launch_kernel(load4, dim3(1), dim3(8), 0, data, 0, sums.data()) == "");
  CHECK(sums[1] == 4 + 5 + 6 + 7);
  const std::string e4 = launch_kernel(load4, dim3(1), dim3(8), 0, data, 1, sums.data());
  CHECK(e4.find("misaligned 16-byte vector load") != std::string::npos);
  // The emulator is usable again after an error.
  std::vector<int> ids(8, 0);
  CHECK(launch_kernel(write_ids, dim3(1), dim3(8), 0, ids.data()) == "");
  CHECK(ids[7] == 8);
}

#ifdef KESTREL_TEST_EMU_RUNTIME
namespace {
__global__ void add_to(int* out, const int* in, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] += in[i];
}
}  // namespace

TEST_CASE("SIMT emulator: stream capture records launches, copies and fills; a graph replays them") {
  using kestrel::cuda_emu::launch_kernel_on;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  std::vector<int> in(40), out(40, 0), host(40, 7);
  std::iota(in.begin(), in.end(), 1);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaMemcpyAsync(in.data(), host.data(), 3 * sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);
  CHECK(launch_kernel_on(s, add_to, dim3(2), dim3(32), 0, out.data(), static_cast<const int*>(in.data()), 40) == "");
  CHECK(cudaMemsetAsync(out.data() + 39, 0, sizeof(int), s) == cudaSuccess);
  CHECK(std::all_of(out.begin(), out.end(), [](int v) { return v == 0; }));  // recorded, not run
  CHECK(in[0] == 1);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(g) == cudaSuccess);  // the instance keeps its own copy
  for (int replay = 1; replay <= 2; ++replay) {
    in[10] = 100 * replay;  // the arguments were captured, the memory is read at replay
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  }
  CHECK(out[0] == 14);          // the copy ran first each time: 7 + 7
  CHECK(out[5] == 12);          // 6 + 6
  CHECK(out[10] == 100 + 200);  // each replay read the memory as it was then
  CHECK(out[39] == 0);          // the fill ran after the kernel
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);

  // What capture forbids fails, and the capture ends invalidated: synchronizing the stream or the
  // device, cudaMalloc on the capturing thread, the legacy stream's copies.
  for (int what = 0; what < 4; ++what) {
    CAPTURE(what);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    void* p = nullptr;
    int x = 0;
    cudaError_t e = what == 0   ? cudaStreamSynchronize(s)
                    : what == 1 ? cudaDeviceSynchronize()
                    : what == 2 ? cudaMalloc(&p, 16)
                                : cudaMemcpy(&x, out.data(), sizeof x, cudaMemcpyDefault);
    CHECK(e != cudaSuccess);
    CHECK(p == nullptr);
    const cudaError_t end = cudaStreamEndCapture(s, &g);
    CHECK(g == nullptr);
    CHECK(end == cudaErrorStreamCaptureInvalidated);
  }
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);  // no capture now
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
}
#endif
