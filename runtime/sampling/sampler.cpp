// The sampler chain (see sampler.h for the order and the contract).
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "sampling/grammar_matcher.h"

namespace kestrel {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string fmt_float(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

Status bad_option(const char* field, const std::string& why) {
  return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("sampler option ") + field + " " + why);
}

Status check_finite(const char* field, float v) {
  if (std::isfinite(v)) return Status::Ok();
  return bad_option(field, "must be finite (got " + fmt_float(v) + ")");
}

// Logits may be -inf (a banned token) but never NaN or +inf (softmax would be undefined).
bool usable_logit(float l) { return !std::isnan(l) && l != kInf; }

}  // namespace

Status validate(const SamplerParams& p) {
  KS_RETURN_IF_ERROR(check_finite("temperature", p.temperature));
  KS_RETURN_IF_ERROR(check_finite("top_p", p.top_p));
  if (p.top_p < 0) return bad_option("top_p", "must be >= 0 (got " + fmt_float(p.top_p) + ")");
  KS_RETURN_IF_ERROR(check_finite("min_p", p.min_p));
  if (p.min_p > 1) return bad_option("min_p", "must be <= 1 (got " + fmt_float(p.min_p) + ")");
  KS_RETURN_IF_ERROR(check_finite("repeat_penalty", p.repeat_penalty));
  if (p.repeat_penalty <= 0)
    return bad_option("repeat_penalty", "must be > 0 (got " + fmt_float(p.repeat_penalty) + ")");
  KS_RETURN_IF_ERROR(check_finite("presence_penalty", p.presence_penalty));
  KS_RETURN_IF_ERROR(check_finite("frequency_penalty", p.frequency_penalty));
  if (p.penalty_last_n < 0)
    return bad_option("penalty_last_n", "must be >= 0 (got " + std::to_string(p.penalty_last_n) + ")");
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto [tok, v] = p.logit_bias[i];
    const std::string field = "logit_bias[" + std::to_string(i) + "]";
    if (tok < 0) return bad_option(field.c_str(), "has a negative token id (" + std::to_string(tok) + ")");
    if (!usable_logit(v))
      return bad_option(field.c_str(), "value for token " + std::to_string(tok) + " must be finite or -inf (got " +
                                           fmt_float(v) + ")");
  }
  return Status::Ok();
}

Sampler::Sampler(SamplerParams params)
    : params_(std::move(params)), params_status_(validate(params_)), rng_(params_.seed) {}

void Sampler::accept(int32_t token) {
  if (grammar_ && grammar_status_.ok() && token >= 0) grammar_status_ = grammar_->accept(token);
  accept_prompt(token);
}

void Sampler::set_grammar(std::shared_ptr<GrammarMatcher> grammar) {
  grammar_ = std::move(grammar);
  grammar_status_ = Status::Ok();
}

void Sampler::accept_prompt(int32_t token) {
  if (token < 0 || params_.penalty_last_n <= 0) return;
  const size_t cap = static_cast<size_t>(params_.penalty_last_n);
  if (history_.size() < cap) {
    history_.push_back(token);
  } else {  // the ring is full: the oldest token leaves the window
    const int32_t old = history_[history_head_];
    auto it = counts_.find(old);
    if (it != counts_.end() && --it->second == 0) counts_.erase(it);
    history_[history_head_] = token;
    history_head_ = (history_head_ + 1) % cap;
  }
  ++counts_[token];
}

void Sampler::reset() {
  history_.clear();
  history_head_ = 0;
  counts_.clear();
  rng_.reseed(params_.seed);
}

int32_t Sampler::best_needed() const {
  const SamplerParams& p = params_;
  if (!params_status_.ok() || !p.logit_bias.empty() || grammar_) return 0;
  const bool penalties =
      p.penalty_last_n > 0 && (p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
  if (penalties) return 0;
  if (p.temperature <= 0) return 1;
  return p.top_k > 0 && p.top_k <= kMaxBestLogits ? p.top_k : 0;
}

Status Sampler::prepare(const LogitRow& row) {
  return row.best.empty() ? prepare_all(row.all) : prepare_best(row);
}

// The best logits in strict order are what prepare_all() and the top-k cut would have left:
// candidates sorted already, no bias or penalties to apply (best_needed() said so).
Status Sampler::prepare_best(const LogitRow& row) {
  KS_RETURN_IF_ERROR(params_status_);
  const int32_t need = best_needed();
  const size_t n = row.best.size();
  if (need == 0 || (n < static_cast<size_t>(need) && static_cast<int64_t>(n) < row.n_vocab))
    return Error(KESTREL_ERR_INTERNAL, "sampler: the step kept the best " + std::to_string(n) +
                                           " logits of the row; these sampler options need " +
                                           (need ? "the best " + std::to_string(need) : std::string("the whole row")));
  cand_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenLogit& t = row.best[i];
    if (!usable_logit(t.logit))  // NaN and +inf rank first: one in the row is here
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "sampler: logits[" + std::to_string(t.id) + "] is " +
                                                     fmt_float(t.logit) + " (NaN and +inf are not allowed)");
    cand_[i] = {t.id, t.logit};
  }
  sorted_ = n;
  max_logit_ = cand_.front().logit;
  if (params_.temperature > 0 && params_.top_k >= row.n_vocab) {
    // The row is the whole vocabulary and top-k cuts nothing: the chain then walks it in id
    // order (top-p sorts what it keeps), and so must this, for the same draws.
    std::sort(cand_.begin(), cand_.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    sorted_ = 0;
  }
  if (max_logit_ == -kInf)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "sampler: every logit is -inf after logit bias and penalties; no token can be sampled");
  return Status::Ok();
}

Status Sampler::prepare_all(std::span<const float> logits) {
  KS_RETURN_IF_ERROR(params_status_);
  if (logits.empty()) return Error(KESTREL_ERR_INVALID_ARGUMENT, "sampler: the logits row is empty");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "sampler: n_vocab " + std::to_string(logits.size()) + " does not fit token ids (int32)");
  const size_t n = logits.size();
  cand_.resize(n);
  sorted_ = 0;
  bool bad = false;  // a branch-free pass; the offending index is looked up only on error
  for (size_t i = 0; i < n; ++i) {
    const float l = logits[i];
    bad |= !(l < kInf);  // NaN or +inf
    cand_[i] = {static_cast<int32_t>(i), l};
  }
  if (bad) {
    for (size_t i = 0; i < n; ++i)
      if (!usable_logit(logits[i]))
        return Error(KESTREL_ERR_INVALID_ARGUMENT, "sampler: logits[" + std::to_string(i) + "] is " +
                                                       fmt_float(logits[i]) + " (NaN and +inf are not allowed)");
  }
  // Until truncation cand_[id] is token id, so bias and penalties index directly.
  const auto changed_badly = [](int32_t tok, const char* by) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "sampler: the logit of token " + std::to_string(tok) + " overflowed after " + by);
  };
  for (size_t j = 0; j < params_.logit_bias.size(); ++j) {
    const auto [tok, b] = params_.logit_bias[j];
    if (static_cast<size_t>(tok) >= n)
      return Error(KESTREL_ERR_OUT_OF_RANGE, "sampler: logit_bias[" + std::to_string(j) + "] token " +
                                                 std::to_string(tok) + " is outside the vocabulary (n_vocab " +
                                                 std::to_string(n) + ")");
    float& l = cand_[static_cast<size_t>(tok)].logit;
    l += b;
    if (!usable_logit(l)) return changed_badly(tok, "logit_bias");
  }
  const float rep = params_.repeat_penalty, freq = params_.frequency_penalty, pres = params_.presence_penalty;
  if (rep != 1.0f || freq != 0.0f || pres != 0.0f) {
    for (const auto& [tok, count] : counts_) {
      if (static_cast<size_t>(tok) >= n) continue;  // recorded with another vocabulary
      float& l = cand_[static_cast<size_t>(tok)].logit;
      l = l > 0 ? l / rep : l * rep;
      l -= static_cast<float>(count) * freq + (count > 0 ? pres : 0.0f);
      if (!usable_logit(l)) return changed_badly(tok, "the penalties");
    }
  }
  if (grammar_) {
    KS_RETURN_IF_ERROR(grammar_status_);
    auto mask = grammar_->allowed();
    KS_RETURN_IF_ERROR(mask.status());
    const std::vector<uint8_t>& allowed = *mask.value();
    if (allowed.size() != n)
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "sampler: the grammar's vocabulary has " + std::to_string(allowed.size()) +
                                                     " tokens, the logits " + std::to_string(n));
    for (size_t i = 0; i < n; ++i)
      if (!allowed[i]) cand_[i].logit = -kInf;
  }
  float mx = -kInf;
  for (const Candidate& c : cand_) mx = std::max(mx, c.logit);
  max_logit_ = mx;
  if (mx == -kInf)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 grammar_ ? "sampler: no token the grammar allows here has a finite logit (after logit bias and penalties)"
                          : "sampler: every logit is -inf after logit bias and penalties; no token can be sampled");
  return Status::Ok();
}

namespace {
// The strict order the chain uses everywhere: higher logit first, then lower id.
struct Better {
  template <class C>
  bool operator()(const C& a, const C& b) const {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
};
}  // namespace

// Makes cand_[0, m) the m best candidates in order, extending an already sorted prefix:
// O(n + m log m), so a small top-k or a short top-p nucleus never sorts the whole vocabulary.
void Sampler::sort_prefix(size_t m) {
  m = std::min(m, cand_.size());
  if (m <= sorted_) return;
  const auto first = cand_.begin() + static_cast<std::ptrdiff_t>(sorted_);
  const auto mid = cand_.begin() + static_cast<std::ptrdiff_t>(m);
  const size_t want = m - sorted_, rest = cand_.size() - sorted_;
  if (want * 16 <= rest) {
    // Few out of many (top-k 40 of 150k): one pass keeping the best `want` in a heap whose front
    // is the worst of them; most candidates cost one comparison. Then move them to the front.
    heap_.assign(first, mid);
    std::make_heap(heap_.begin(), heap_.end(), Better{});
    for (auto it = mid; it != cand_.end(); ++it) {
      if (!Better{}(*it, heap_.front())) continue;
      std::pop_heap(heap_.begin(), heap_.end(), Better{});
      heap_.back() = *it;
      std::push_heap(heap_.begin(), heap_.end(), Better{});
    }
    const Candidate worst_kept = heap_.front();
    std::partition(first, cand_.end(), [&](const Candidate& c) { return !Better{}(worst_kept, c); });
  } else if (mid != cand_.end()) {
    std::nth_element(first, mid, cand_.end(), Better{});
  }
  std::sort(first, mid, Better{});
  sorted_ = m;
}

void Sampler::apply_top_k() {
  const int32_t k = params_.top_k;
  if (k <= 0 || static_cast<size_t>(k) >= cand_.size()) return;
  sort_prefix(static_cast<size_t>(k));
  cand_.resize(static_cast<size_t>(k));
}

namespace {
// Top-p narrows the nucleus before sorting with a histogram of probability mass over the
// distance below the max logit: kTopPBuckets buckets spanning kTopPRange (exp(-48) ~ 1e-21).
constexpr size_t kTopPBuckets = 1024;
constexpr double kTopPRange = 48.0;

size_t top_p_bucket(double distance) {  // monotone: a higher logit never gets a later bucket
  const double x = distance * (static_cast<double>(kTopPBuckets) / kTopPRange);
  return x < static_cast<double>(kTopPBuckets - 1) ? static_cast<size_t>(x) : kTopPBuckets - 1;
}
}  // namespace

// Keeps the smallest best-first prefix whose softmax mass reaches top_p (at least one token).
// Only candidates in the buckets up to the one where the mass reaches top_p get sorted; if
// rounding leaves the walk short, the prefix keeps growing in doubling sorted chunks.
void Sampler::apply_top_p() {
  const double p = params_.top_p;
  const size_t n = cand_.size();
  if (!(p < 1.0) || n <= 1) return;
  const double mx = max_logit_;
  const bool narrow = sorted_ == 0 && n >= 4096;
  if (narrow) hist_.assign(kTopPBuckets, 0.0);
  double z = 0;
  for (const Candidate& c : cand_) {
    const double w = std::exp(static_cast<double>(c.logit) - mx);
    z += w;
    if (narrow) hist_[top_p_bucket(mx - static_cast<double>(c.logit))] += w;
  }
  const double target = p * z;
  if (narrow) {
    double acc = 0;
    size_t last = 0;  // the last bucket that may hold nucleus tokens
    while (last + 1 < kTopPBuckets && (acc += hist_[last]) < target * (1 + 1e-9)) ++last;
    if (last + 1 < kTopPBuckets) {
      const auto mid = std::partition(cand_.begin(), cand_.end(), [&](const Candidate& c) {
        return top_p_bucket(mx - static_cast<double>(c.logit)) <= last;
      });
      std::sort(cand_.begin(), mid, Better{});
      sorted_ = static_cast<size_t>(mid - cand_.begin());
    }
  }
  double cum = 0;
  size_t kept = 0;
  while (kept < n) {
    if (kept == sorted_) sort_prefix(std::max<size_t>(64, 2 * sorted_));
    cum += std::exp(static_cast<double>(cand_[kept].logit) - mx);
    ++kept;
    if (cum >= target) break;
  }
  cand_.resize(kept);
  sorted_ = std::min(sorted_, kept);
}

// Drops tokens whose probability is below min_p times the highest: p_i / p_max = exp(l_i - max).
// A stable compaction, so a sorted prefix stays sorted and an unsorted set stays in id order.
void Sampler::apply_min_p() {
  const double mp = params_.min_p;
  if (!(mp > 0) || cand_.size() <= 1) return;
  const double mx = max_logit_;
  // Decide in logit space, calling exp only within a hair of the bound (same answers, fewer exps).
  const double bound = mx + std::log(mp), margin = 1e-6 * (1.0 + std::fabs(bound));
  size_t w = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    const double l = cand_[i].logit;
    const bool keep = l > bound + margin || (l >= bound - margin && std::exp(l - mx) >= mp);
    if (keep) cand_[w++] = cand_[i];
  }
  cand_.resize(w);
  sorted_ = std::min(sorted_, w);  // the threshold is monotone: survivors of the prefix lead
}

void Sampler::truncate() {
  apply_top_k();
  apply_top_p();
  apply_min_p();
}

int32_t Sampler::argmax() const {
  for (const Candidate& c : cand_)  // id order: the first maximum is the lowest id
    if (c.logit == max_logit_) return c.id;
  return cand_.front().id;  // unreachable: prepare() set max_logit_ from cand_
}

// softmax((l - max) / T) in double, then one uniform draw walking the candidates in order.
int32_t Sampler::draw() {
  const double t = params_.temperature, mx = max_logit_;
  weights_.resize(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    weights_[i] = std::exp((static_cast<double>(cand_[i].logit) - mx) / t);
    sum += weights_[i];
  }
  const double u = rng_.uniform() * sum;  // sum >= 1: the maximum contributes exp(0)
  double cum = 0;
  size_t last_positive = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    if (weights_[i] <= 0) continue;
    cum += weights_[i];
    last_positive = i;
    if (u < cum) return cand_[i].id;
  }
  return cand_[last_positive].id;  // u rounded up to sum
}

Expected<int32_t> Sampler::sample(const LogitRow& logits) {
  KS_RETURN_IF_ERROR(prepare(logits));
  if (params_.temperature <= 0) return argmax();
  truncate();
  return draw();
}

Status Sampler::distribution(const LogitRow& logits, std::vector<std::pair<int32_t, double>>* out) {
  KS_RETURN_IF_ERROR(prepare(logits));
  out->clear();
  if (params_.temperature <= 0) {
    out->emplace_back(argmax(), 1.0);
    return Status::Ok();
  }
  truncate();
  // draw()'s weights, normalized.
  const double t = params_.temperature, mx = max_logit_;
  double sum = 0;
  out->reserve(cand_.size());
  for (const Candidate& c : cand_) {
    const double w = std::exp((static_cast<double>(c.logit) - mx) / t);
    out->emplace_back(c.id, w);
    sum += w;
  }
  for (auto& [id, w] : *out) w /= sum;
  return Status::Ok();
}

int32_t Sampler::draw_from(std::span<const std::pair<int32_t, double>> weights) {
  double sum = 0;
  for (const auto& [id, w] : weights) sum += w;
  const double u = rng_.uniform() * sum;
  double cum = 0;
  int32_t last_positive = weights.empty() ? -1 : weights.front().first;
  for (const auto& [id, w] : weights) {
    if (w <= 0) continue;
    cum += w;
    last_positive = id;
    if (u < cum) return id;
  }
  return last_positive;  // u rounded up to sum
}

Expected<std::vector<std::pair<int32_t, float>>> Sampler::debug_apply(std::span<const float> logits) {
  KS_RETURN_IF_ERROR(prepare_all(logits));
  const bool greedy = params_.temperature <= 0;
  if (!greedy) truncate();
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(cand_.size());
  for (const Candidate& c : cand_) out.emplace_back(c.id, greedy ? c.logit : c.logit / params_.temperature);
  return out;
}

}  // namespace kestrel
