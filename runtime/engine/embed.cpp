#include "engine/embed.h"

#include <cmath>
#include <string>

namespace kestrel {

Expected<Pooling> model_pooling(const Model& model) {
  const auto& f = model.file();
  const auto arch = f.get_string("general.architecture");
  const auto v = arch ? f.get_int(*arch + ".pooling_type") : std::nullopt;
  if (!v) return Pooling::kLast;
  if (*v == 1 || *v == 2 || *v == 3) return static_cast<Pooling>(*v);
  return Error(KESTREL_ERR_UNSUPPORTED, "embeddings: " + *arch + ".pooling_type " + std::to_string(*v) +
                                            " is not supported (1 mean, 2 cls, 3 last)");
}

Status embed(Context& ctx, std::span<const std::span<const int32_t>> inputs, Pooling pooling, bool normalize,
             std::vector<float>* out) {
  const size_t E = static_cast<size_t>(ctx.model().hparams().n_embd);
  const int32_t n_ctx = ctx.n_ctx(), n_seq = ctx.kv().n_seq_max();
  out->assign(inputs.size() * E, 0.0f);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) return Error(KESTREL_ERR_INVALID_ARGUMENT, "embeddings: input " + std::to_string(i) + " is empty");
    if (inputs[i].size() > static_cast<size_t>(n_ctx))
      return Error(KESTREL_ERR_CONTEXT_FULL, "embeddings: input " + std::to_string(i) + " has " +
                                                 std::to_string(inputs[i].size()) + " tokens, more than the context's " +
                                                 std::to_string(n_ctx));
  }
  ctx.kv().clear();
  for (size_t first = 0; first < inputs.size();) {
    // A group: as many inputs as fit the sequences and cells, one sequence each.
    // (Cells are claimed by whole blocks per sequence.)
    const size_t block = static_cast<size_t>(ctx.kv().block_size());
    auto cells_of = [&](size_t i) { return (inputs[i].size() + block - 1) / block * block; };
    size_t end = first, cells = 0;
    while (end < inputs.size() && (end == first || (end - first < static_cast<size_t>(n_seq) &&
                                                    cells + cells_of(end) <= static_cast<size_t>(n_ctx))))
      cells += cells_of(end++);
    std::vector<int32_t> tokens, pos, seq;
    std::vector<bool> want_bits;
    std::vector<size_t> starts;
    for (size_t i = first; i < end; ++i) {
      starts.push_back(tokens.size());
      const size_t n = inputs[i].size();
      for (size_t t = 0; t < n; ++t) {
        tokens.push_back(inputs[i][t]);
        pos.push_back(static_cast<int32_t>(t));
        seq.push_back(static_cast<int32_t>(i - first));
        want_bits.push_back(pooling == Pooling::kMean || (pooling == Pooling::kCls && t == 0) ||
                            (pooling == Pooling::kLast && t + 1 == n));
      }
    }
    const std::unique_ptr<bool[]> want(new bool[want_bits.size()]);
    for (size_t k = 0; k < want_bits.size(); ++k) want[k] = want_bits[k];
    DecodeBatch b;
    b.tokens = tokens;
    b.positions = pos;
    b.seq_ids = seq;
    b.want_logits = std::span<const bool>(want.get(), want_bits.size());
    b.embeddings = true;
    const Status st = ctx.decode(b);
    if (!st.ok()) {
      ctx.kv().clear();
      return st;
    }
    for (size_t i = first; i < end; ++i) {
      float* v = out->data() + i * E;
      const size_t n = inputs[i].size(), s = starts[i - first];
      const size_t r0 = pooling == Pooling::kLast ? s + n - 1 : s, r1 = pooling == Pooling::kMean ? s + n : r0 + 1;
      std::vector<double> acc(E, 0.0);
      for (size_t r = r0; r < r1; ++r) {
        auto row = ctx.embedding(static_cast<int32_t>(r));
        if (!row.ok()) return row.status();
        for (size_t k = 0; k < E; ++k) acc[k] += row.value()[k];
      }
      double norm = 0;
      for (size_t k = 0; k < E; ++k) {
        acc[k] /= static_cast<double>(r1 - r0);
        norm += acc[k] * acc[k];
      }
      const double scale = normalize && norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;
      for (size_t k = 0; k < E; ++k) v[k] = static_cast<float>(acc[k] * scale);
    }
    ctx.kv().clear();
    first = end;
  }
  return Status::Ok();
}

}  // namespace kestrel
