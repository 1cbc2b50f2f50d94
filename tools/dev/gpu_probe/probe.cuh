// gpu_probe: shared helpers (error checks, timing, random fill, the summary table).
// A measurement tool for the CUDA backend's design, not part of the backend.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__,     \
              __LINE__, #call);                                                           \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)
// After every <<<>>> launch: launch-configuration errors surface here.
#define CK_LAUNCH() CK(cudaGetLastError())

namespace probe {

struct Options {
  bool quick = false;  // fewer repetitions (a smoke run)
  int reps = 20;       // timed repetitions per measurement (median reported)
  int warm = 3;        // untimed warm-up repetitions
};

struct Device {
  int sms = 0;
  size_t l2 = 0;
  size_t mem_total = 0;
  std::string name;
};

// One row of the table printed last.
struct Row {
  std::string section, item, value, unit, note;
};
std::vector<Row>& table();
void add_row(const std::string& section, const std::string& item, double value, const char* fmt,
             const std::string& unit, const std::string& note = "");
// Named numbers that later sections use for derived predictions (e.g. "read_GBps").
void set_fact(const std::string& key, double v);
double fact(const std::string& key);  // NaN when not measured in this run
int failures();                        // number of failed correctness checks so far
void record_check(const std::string& what, double err, double tol);

// Median of a vector (copies).
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times fn() (which enqueues work on stream s) with CUDA events: warm-up, then reps samples.
// Returns the median in milliseconds; all samples go to *samples when given.
template <class F>
double time_ms(cudaStream_t s, int warm, int reps, F&& fn, std::vector<double>* samples = nullptr) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) fn();
  CK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, s));
    fn();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  if (samples) *samples = t;
  return median(t);
}

// Stateless hash → uniform random numbers, the same on host and device.
__host__ __device__ inline uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + (uint64_t(seed) << 32 | seed) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return uint32_t((z ^ (z >> 31)) >> 16);
}
// Uniform in [-1, 1).
__host__ __device__ inline float hash_unit(uint64_t i, uint32_t seed) {
  return (hash32(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// Fills n 32-bit words with random bits (never zeros as a whole).
void fill_random_words(void* p, size_t n_words, uint32_t seed, cudaStream_t s);

// Sub-benchmarks (each appends rows to the table).
void bench_info(const Options& o, Device& dev);
void bench_bw(const Options& o, const Device& dev);
void bench_launch(const Options& o, const Device& dev);
void bench_gemv(const Options& o, const Device& dev, const std::string& types);
void bench_gemm(const Options& o, const Device& dev);

}  // namespace probe
