// The CPU backend: a thread pool, row-parallel ops, SIMD matmul (dispatched once per CPU).
#include "backends/host_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/moe.h"
#include "backends/cpu/simd.h"
#include "backends/ref/ops_ref.h"
#include "core/thread_pool.h"

namespace kestrel {
namespace {

class CpuBackend final : public HostBackend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads > 0 ? n_threads : default_thread_count()) {
    info_.name = "cpu";
    info_.device = std::to_string(pool_.size()) + " threads" + (cpu::has_avx2_fma() ? ", AVX2+FMA" : ", portable");
  }
  const BackendInfo& info() const override { return info_; }
  Status run(Graph& g, size_t begin, size_t end) override {
    for (size_t i = begin; i < end; ++i) {
      const Node& n = g.nodes()[i];
      if (n.op == Op::MATMUL) {
        i += cpu::matmuls(g.nodes(), i, end, pool_) - 1;
        continue;
      }
#if defined(__x86_64__)
      if (n.op == Op::ATTENTION && cpu::has_avx2_fma() && cpu::attention_supported(n)) {
        cpu::attention(n, pool_);
        continue;
      }
#endif
      if (n.op == Op::MATMUL_ID) {
        cpu::matmul_id(n, pool_);
        continue;
      }
      void (*rows)(const Node&, int64_t, int64_t) = ref::run_items;
#if defined(__x86_64__)
      if (cpu::has_avx2_fma() && cpu::gated_unary_supported(n)) rows = cpu::gated_unary;
#endif
      const int64_t items = ref::parallel_items(n);
      if (items < 4 || pool_.size() == 1) {
        rows(n, 0, items);
        continue;
      }
      pool_.run([&](int ith, int nth) {
        int64_t i0, i1;
        ThreadPool::split(items, ith, nth, &i0, &i1);
        if (i0 < i1) rows(n, i0, i1);
      });
    }
    return Status::Ok();
  }

 private:
  BackendInfo info_;
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace kestrel
