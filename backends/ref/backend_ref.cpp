// The reference backend: every op through the scalar kernels, one thread. Used as the oracle by
// the op harness and the synthetic-model tests.
#include <cstdlib>
#include <cstring>

#include "backends/backend.h"
#include "backends/ref/ops_ref.h"

namespace kestrel {
namespace {

class RefBackend final : public Backend {
 public:
  const BackendInfo& info() const override { return info_; }
  void* alloc(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void release(void* p) override { std::free(p); }
  void write(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void read(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  bool supports(const Node&) const override { return true; }
  Status run(Graph& g, size_t begin, size_t end) override {
    for (size_t i = begin; i < end; ++i) {
      const Node& n = g.nodes()[i];
      if (n.op == Op::MATMUL) ref::matmul(n);
      else ref::run_items(n, 0, ref::parallel_items(n));
    }
    return Status::Ok();
  }
  std::vector<std::string> kernels() const override {
    std::vector<std::string> k;
    for (int i = 0; i < static_cast<int>(Op::COUNT); ++i) k.push_back(op_name(static_cast<Op>(i)));
    return k;
  }

 private:
  BackendInfo info_{"ref", "scalar reference (single thread)", true};
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace kestrel
