// The CPU backend: the device places the weights (weights_cpu.h: huge pages, rows regrouped for
// the SIMD kernels); each context's executor has its own thread pool and runs row-parallel ops,
// the SIMD matmuls (dispatched once per CPU) and attention.
#include <system_error>

#include "backends/host_backend.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/moe.h"
#include "backends/cpu/repacked.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/weights_cpu.h"
#include "backends/ref/ops_ref.h"
#include "core/thread_pool.h"
#include "core/trace.h"

namespace kestrel {
namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(Device& d, int n_threads) : device_(d), pool_(n_threads > 0 ? n_threads : default_thread_count()) {}
  Device& device() override { return device_; }
  Status run(Graph& g, size_t begin, size_t end) override {
    if (trace::on()) return run_traced(g, begin, end);
    return run_nodes(g, begin, end);
  }

 private:
  // One span per op on every thread that works on it (the workers' named by the pool).
  Status run_traced(Graph& g, size_t begin, size_t end) {
    for (size_t i = begin; i < end;) {
      const Node& n = g.nodes()[i];
      label_ = op_label(n);
      size_t j = i + 1;  // consecutive matmuls run as one batch of products
      while (n.op == Op::MATMUL && j < end && g.nodes()[j].op == Op::MATMUL) ++j;
      trace::Span span("op", label_);
      pool_.trace_label(label_.c_str());
      const Status st = run_nodes(g, i, j);
      pool_.trace_label(nullptr);
      if (!st.ok()) return st;
      i = j;
    }
    return Status::Ok();
  }

  Status run_nodes(Graph& g, size_t begin, size_t end) {
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
      if (cpu::has_avx2_fma() && cpu::ssm_scan_supported(n)) rows = cpu::ssm_scan;
#endif
      if (n.op == Op::GET_ROWS && n.src[0]->layout == cpu::kLayoutGrouped8) rows = cpu::get_rows_grouped;
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

  Device& device_;
  ThreadPool pool_;
  std::string label_;  // the traced op's name, which the pool's workers read
};

class CpuDevice final : public HostDevice {
 public:
  CpuDevice() {
    info_.name = "cpu";
    info_.device = cpu::has_avx2_fma() ? "AVX2+FMA" : "portable";
  }
  const BackendInfo& info() const override { return info_; }
  Status place_weights(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors,
                       const std::unordered_set<std::string>& gather_only) override {
    if (!cpu::regroup_enabled()) return Status::Ok();
    return cpu::place_weights(f, tensors, gather_only, &arena_);
  }
  PlacedWeights placed() const override { return arena_.stats(); }
  // Every op; a grouped matrix only where its kernels read it (matmul, and gathered rows).
  bool supports(const Node& n) const override {
    for (int i = 0; i < Node::kMaxSrc; ++i) {
      const Tensor* t = n.src[i];
      if (!t || t->layout == 0) continue;
      if (t->layout != cpu::kLayoutGrouped8 || i != 0 || (n.op != Op::MATMUL && n.op != Op::GET_ROWS)) return false;
    }
    return true;
  }
  Expected<std::unique_ptr<Executor>> create_executor(int n_threads) override {
    try {
      return std::unique_ptr<Executor>(new CpuExecutor(*this, n_threads));
    } catch (const std::system_error& e) {  // a worker thread could not start (core/thread_pool.h)
      return Error(KESTREL_ERR_BACKEND, std::string("cpu: ") + e.what());
    }
  }

 private:
  BackendInfo info_;
  cpu::PlacedArena arena_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace kestrel
