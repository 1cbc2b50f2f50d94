// The reference backend: every op through the scalar kernels, one thread, weights read where the
// file maps them. Used as the oracle by the op harness and the synthetic-model tests.
#include "backends/host_backend.h"
#include "backends/ref/ops_ref.h"

namespace kestrel {
namespace {

class RefExecutor final : public Executor {
 public:
  explicit RefExecutor(Device& d) : device_(d) {}
  Device& device() override { return device_; }
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
  Device& device_;
};

class RefDevice final : public HostDevice {
 public:
  const BackendInfo& info() const override { return info_; }
  Status place_weights(gguf::File&, std::unordered_map<std::string, Tensor>&,
                       const std::unordered_set<std::string>&) override {
    return Status::Ok();  // the file's bytes, as mapped
  }
  bool supports(const Node& n) const override {
    for (const Tensor* t : n.src)  // the scalar kernels read the file layouts only
      if (t && t->layout != 0) return false;
    return true;
  }
  Expected<std::unique_ptr<Executor>> create_executor(int) override {
    return std::unique_ptr<Executor>(new RefExecutor(*this));
  }

 private:
  BackendInfo info_{"ref", "scalar reference (single thread)", true};
};

}  // namespace

std::unique_ptr<Device> make_ref_device() { return std::make_unique<RefDevice>(); }

}  // namespace kestrel
