#include "speculative/verify.h"

#include <algorithm>

namespace kestrel {
namespace {

// q's probability of each token, densely, for the rows of one verify() call.
class DenseQ {
 public:
  void set(const std::vector<std::pair<int32_t, double>>& q, size_t n_vocab) {
    reset(n_vocab);
    for (const auto& [id, w] : q) put(id, w);
  }
  void point(int32_t id, size_t n_vocab) {  // a token proposed with certainty
    reset(n_vocab);
    put(id, 1.0);
  }
  double operator()(int32_t id) const { return static_cast<size_t>(id) < dense_.size() ? dense_[static_cast<size_t>(id)] : 0.0; }
  void clear() {
    for (int32_t id : touched_) dense_[static_cast<size_t>(id)] = 0.0;
    touched_.clear();
  }

 private:
  void reset(size_t n_vocab) {
    clear();
    if (dense_.size() < n_vocab) dense_.assign(n_vocab, 0.0);
  }
  void put(int32_t id, double w) {
    if (id < 0 || static_cast<size_t>(id) >= dense_.size()) return;
    dense_[static_cast<size_t>(id)] = w;
    touched_.push_back(id);
  }
  std::vector<double> dense_;
  std::vector<int32_t> touched_;
};

}  // namespace

Status verify(Sampler& sampler, std::span<const LogitRow> rows, const Draft& draft, VerifyResult* out,
              AcceptRule rule) {
  const size_t k = draft.tokens.size();
  if (rows.size() != k + 1)
    return Error(KESTREL_ERR_INTERNAL, "verify: " + std::to_string(rows.size()) + " logits rows for " +
                                           std::to_string(k) + " drafted tokens");
  if (!draft.q.empty() && draft.q.size() != k)
    return Error(KESTREL_ERR_INTERNAL, "verify: draft distributions do not match its tokens");
  out->n_accepted = 0;
  out->tokens.clear();
  const bool greedy = sampler.params().temperature <= 0;
  thread_local std::vector<std::pair<int32_t, double>> p, residual;
  thread_local DenseQ q;
  for (size_t i = 0; i < k; ++i) {
    const int32_t d = draft.tokens[i];
    int32_t t;
    if (greedy) {
      auto pick = sampler.sample(rows[i]);
      if (!pick.ok()) return pick.status();
      t = pick.value();
    } else {
      KS_RETURN_IF_ERROR(sampler.distribution(rows[i], &p));
      const size_t n_vocab = rows[i].all.empty() ? static_cast<size_t>(rows[i].n_vocab) : rows[i].all.size();
      if (draft.q.empty()) q.point(d, n_vocab);
      else q.set(draft.q[i], n_vocab);
      double pd = 0;
      for (const auto& [id, w] : p)
        if (id == d) pd = w;
      const double qd = q(d);
      // Accept with probability min(1, p(d) / q(d)).
      if (qd > 0 && sampler.uniform() * qd < pd) {
        t = d;
      } else {
        residual.clear();
        double mass = 0;
        for (const auto& [id, w] : p) {
          const double r = rule == AcceptRule::kExact ? std::max(0.0, w - q(id)) : w;
          residual.emplace_back(id, r);
          mass += r;
        }
        if (!(mass > 0)) residual = p;  // p <= q everywhere only by rounding
        t = sampler.draw_from(residual);
      }
      q.clear();
    }
    sampler.accept(t);
    out->tokens.push_back(t);
    if (t != d) return Status::Ok();
    ++out->n_accepted;
  }
  auto bonus = sampler.sample(rows[k]);
  if (!bonus.ok()) return bonus.status();
  sampler.accept(bonus.value());
  out->tokens.push_back(bonus.value());
  return Status::Ok();
}

}  // namespace kestrel
