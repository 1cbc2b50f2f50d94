// The reference backend: every op through the scalar kernels, one thread. Used as the oracle by
// the op harness and the synthetic-model tests.
#include "backends/host_backend.h"
#include "backends/ref/ops_ref.h"

namespace kestrel {
namespace {

class RefBackend final : public HostBackend {
 public:
  const BackendInfo& info() const override { return info_; }
  Status run(Graph& g, size_t begin, size_t end) override {
    for (size_t i = begin; i < end; ++i) {
      const Node& n = g.nodes()[i];
      if (n.op == Op::MATMUL) ref::matmul(n);
      else if (n.op == Op::MATMUL_ID) ref::matmul_id(n);
      else ref::run_items(n, 0, ref::parallel_items(n));
    }
    return Status::Ok();
  }

 private:
  BackendInfo info_{"ref", "scalar reference (single thread)", true};
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend() { return std::make_unique<RefBackend>(); }

}  // namespace kestrel
