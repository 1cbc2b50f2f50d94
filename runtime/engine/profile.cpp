#include "engine/profile.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

namespace kestrel {
namespace {

// What a node reads from memory that is not an activation (weights, the KV cache) and its FLOPs.
void cost(Device& device, const Node& n, double* bytes, double* flops) {
  *bytes = 0;
  *flops = 0;
  const Tensor* d = n.dst;
  if (n.op == Op::MATMUL_ID) {
    // Each expert the batch chose is read once (that is the op's contract); count the distinct ids.
    const Tensor *w = n.src[0], *ids = n.src[2];
    size_t distinct = static_cast<size_t>(d->ne[1]);
    if (ids) {
      std::vector<int32_t> host(static_cast<size_t>(ids->ne[0] * ids->ne[1]));
      std::vector<char> seen(static_cast<size_t>(w->ne[2]), 0);
      for (int64_t t = 0; t < ids->ne[1]; ++t)
        (void)device.read(host.data() + t * ids->ne[0], ids->row(t), sizeof(int32_t) * static_cast<size_t>(ids->ne[0]));
      distinct = 0;
      for (int32_t e : host)
        if (e >= 0 && e < w->ne[2] && !seen[static_cast<size_t>(e)]) seen[static_cast<size_t>(e)] = 1, ++distinct;
    }
    *bytes = static_cast<double>(distinct) * static_cast<double>(w->nb[1]) * static_cast<double>(w->ne[1]);
    *flops = 2.0 * static_cast<double>(w->ne[0]) * static_cast<double>(w->ne[1]) * static_cast<double>(d->ne[1]) *
             static_cast<double>(d->ne[2]);
  } else if (n.op == Op::MATMUL) {
    const Tensor *w = n.src[0], *x = n.src[1];
    *bytes = static_cast<double>(w->nb[1]) * static_cast<double>(w->ne[1]);
    *flops = 2.0 * static_cast<double>(w->ne[0]) * static_cast<double>(w->ne[1]) * static_cast<double>(x->ne[1]);
  } else if (n.op == Op::ATTENTION && n.src[4]) {
    std::vector<int32_t> packed(static_cast<size_t>(n.src[4]->ne[0]));  // the batch, wherever it lives
    if (!device.read(packed.data(), n.src[4]->data, packed.size() * sizeof(int32_t)).ok()) return;
    const AttentionBatch batch = AttentionBatch::view(packed.data());
    const AttentionBatch* ab = &batch;
    const Tensor *q = n.src[0], *k = n.src[1], *v = n.src[2];
    double cells = 0;  // cells read per token, averaged over the batch
    for (int32_t t = 0; t < ab->n_tokens; ++t) cells += ab->n_cells_of(t);
    cells /= std::max(1, ab->n_tokens);
    *bytes = cells * (static_cast<double>(k->nb[1]) + static_cast<double>(v->nb[1]));
    // q.k and p.v for every head, token and cell (the mask skips some; this is the upper bound).
    *flops = 2.0 * cells * static_cast<double>(q->ne[1]) * static_cast<double>(q->ne[2]) *
             static_cast<double>(q->ne[0] + d->ne[0]);
  } else if (d) {
    *flops = static_cast<double>(d->ne[0]) * static_cast<double>(d->ne[1]) * static_cast<double>(d->ne[2]);
  }
}

}  // namespace

Status Profiler::run(Executor& executor, Graph& g) {
  using Clock = std::chrono::steady_clock;
  const size_t n = g.nodes().size();
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes()[i];
    const auto t0 = Clock::now();
    KS_RETURN_IF_ERROR(executor.run(g, i, i + 1));
    KS_RETURN_IF_ERROR(executor.sync());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    OpProfile& p = ops_[op_label(node)];
    double bytes, flops;
    cost(executor.device(), node, &bytes, &flops);
    p.calls += 1;
    p.seconds += s;
    p.bytes += bytes;
    p.flops += flops;
  }
  return Status::Ok();
}

std::string Profiler::json() const {
  std::vector<std::pair<std::string, OpProfile>> v(ops_.begin(), ops_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [k, p] : v)
    out.push_back({{"op", k}, {"calls", p.calls}, {"seconds", p.seconds}, {"bytes", p.bytes}, {"flops", p.flops}});
  return out.dump();
}

}  // namespace kestrel
