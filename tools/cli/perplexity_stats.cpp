#include "perplexity_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace kestrel::cli::ppl {

double token_nll(const float* logits, int n_vocab, int tok) {
  float max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(static_cast<double>(logits[tok] - max_logit) - std::log(sum_exp));
}

double quantize_row(const float* logits, int n_vocab, int tok, uint16_t* out) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(out, &scale, sizeof(float));
  std::memcpy(out + 2, &min_log_prob, sizeof(float));
  uint16_t* q = out + 4;
  std::memset(q, 0, static_cast<size_t>(row_u16(n_vocab) - 4) * sizeof(uint16_t));
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (int i = 0; i < n_vocab; ++i)
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(std::nearbyint(inv_scale * (logits[i] - min_logit))) : 0;
  }
  return static_cast<double>(max_logit + log_sum_exp - logits[tok]);
}

KldToken kld_row(const float* logits, int n_vocab, const uint16_t* base_row, int tok) {
  float max_logit = logits[0];
  int imax = 0;
  for (int i = 1; i < n_vocab; ++i)
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, base_row, sizeof(float));
  std::memcpy(&min_log_prob, base_row + 2, sizeof(float));
  const uint16_t* q = base_row + 4;

  KldToken t;
  t.nll = max_logit + log_sum_exp - logits[tok];
  t.nll_base = -(scale * q[tok] + min_log_prob);
  const float log_norm = max_logit + log_sum_exp;
  double sum = 0;
  int imax_base = -1;
  float p_log_base_max = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const float p_log_base = scale * q[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) sum += std::exp(p_log_base) * (p_log_base - logits[i] + log_norm);
  }
  t.kld = sum;
  t.same_top = imax == imax_base;
  t.p_diff = std::exp(-t.nll) - std::exp(-t.nll_base);
  return t;
}

void add(KldSums& s, const KldToken& t) {
  s.sum_nll += t.nll;
  s.sum_nll2 += t.nll * t.nll;
  s.sum_nll_base += t.nll_base;
  s.sum_nll_base2 += t.nll_base * t.nll_base;
  s.sum_nll_nll_base += t.nll * t.nll_base;
  s.sum_kld += t.kld;
  s.sum_kld2 += t.kld * t.kld;
  s.sum_p_diff += t.p_diff;
  const double p2 = static_cast<double>(t.p_diff) * t.p_diff;
  s.sum_p_diff2 += p2;
  s.sum_p_diff4 += p2 * p2;
  s.max_p_diff = std::max(s.max_p_diff, std::fabs(t.p_diff));
  s.n_same_top += t.same_top;
  ++s.count;
}

MeanErr mean_and_uncertainty(double sum, double sum2, size_t count) {
  if (count < 1) return {};
  const double f = sum / count;
  double df = sum2 / count - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.;
  return {f, df};
}

double covariance(double suma, double sumb, double sumab, size_t count) {
  if (count < 10) return 0.0;
  return (sumab / count - (suma / count) * (sumb / count)) / (count - 1);
}

MeanErr ppl_estimate(double nll, double nll2, size_t count) {
  if (count == 0) return {};
  const double mean = nll / count;
  const double ppl = std::exp(mean);
  const double var = nll2 / count - mean * mean;
  return {ppl, var > 0 && count > 1 ? std::sqrt(var / (count - 1)) * ppl : 0.0};
}

float percentile(const std::vector<float>& values, float fraction) {
  if (values.empty()) return 0;
  if (fraction <= 0) return values.front();
  if (fraction >= 1) return values.back();
  float p = fraction * (values.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= ip;
  return (1 - p) * values[ip] + p * values[std::min(ip + 1, values.size() - 1)];
}

float median(const std::vector<float>& v) {
  if (v.empty()) return 0;
  return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
}

namespace {
struct RatioParts {
  MeanErr ln_ppl, ln_base;
  double cov = 0;
  MeanErr ln_ratio;
};
RatioParts ratio_parts(const KldSums& s) {
  RatioParts r;
  r.ln_ppl = mean_and_uncertainty(s.sum_nll, s.sum_nll2, s.count);
  r.ln_base = mean_and_uncertainty(s.sum_nll_base, s.sum_nll_base2, s.count);
  r.cov = covariance(s.sum_nll, s.sum_nll_base, s.sum_nll_nll_base, s.count);
  const double v = r.ln_ppl.err * r.ln_ppl.err + r.ln_base.err * r.ln_base.err - 2.0 * r.cov;
  r.ln_ratio = {r.ln_ppl.mean - r.ln_base.mean, std::sqrt(std::max(0.0, v))};
  return r;
}
MeanErr rms(const KldSums& s) {
  const MeanErr mse = mean_and_uncertainty(s.sum_p_diff2, s.sum_p_diff4, s.count);
  const double v = std::sqrt(mse.mean);
  return {v, v > 0 ? 0.5 / v * mse.err : 0.0};
}
MeanErr same_top(const KldSums& s) {
  const double p = s.count ? 1.0 * s.n_same_top / s.count : 0.0;
  return {p, s.count > 1 ? std::sqrt(p * (1 - p) / (s.count - 1)) : 0.0};
}
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}
}  // namespace

KldReport kld_report(const KldSums& s, std::vector<float>& kv, std::vector<float>& pv) {
  std::sort(kv.begin(), kv.end());
  std::sort(pv.begin(), pv.end());
  KldReport r;
  const RatioParts rp = ratio_parts(s);
  const double ppl = std::exp(rp.ln_ppl.mean), base = std::exp(rp.ln_base.mean);
  r.ppl = {ppl, ppl * rp.ln_ppl.err};
  r.ppl_base = {base, base * rp.ln_base.err};
  const double denom = rp.ln_ppl.err * rp.ln_base.err;
  r.cor = denom > 0 ? 100.0 * rp.cov / denom : 0.0;
  r.ln_ratio = rp.ln_ratio;
  const double ratio = std::exp(rp.ln_ratio.mean);
  r.ratio = {ratio, ratio * rp.ln_ratio.err};
  const double cov = ppl * base * rp.cov;
  r.diff = {ppl - base, std::sqrt(std::max(0.0, r.ppl.err * r.ppl.err + r.ppl_base.err * r.ppl_base.err - 2.0 * cov))};
  r.kld = mean_and_uncertainty(s.sum_kld, s.sum_kld2, s.count);
  if (!kv.empty()) {
    r.kld_max = kv.back();
    r.kld_999 = percentile(kv, 0.999f);
    r.kld_99 = percentile(kv, 0.990f);
    r.kld_95 = percentile(kv, 0.950f);
    r.kld_90 = percentile(kv, 0.900f);
    r.kld_median = median(kv);
    r.kld_10 = percentile(kv, 0.100f);
    r.kld_5 = percentile(kv, 0.050f);
    r.kld_1 = percentile(kv, 0.010f);
    r.kld_01 = percentile(kv, 0.001f);
    r.kld_min = kv.front();
  }
  const MeanErr pd = mean_and_uncertainty(s.sum_p_diff, s.sum_p_diff2, s.count);
  r.p_diff_pct = {100.0 * pd.mean, 100.0 * pd.err};
  if (!pv.empty()) {
    const float fr[13] = {1.f,    0.999f, 0.990f, 0.950f, 0.900f, 0.750f, -1.f,
                          0.250f, 0.100f, 0.050f, 0.010f, 0.001f, 0.f};
    for (int i = 0; i < 13; ++i) r.p_diff_pcts[i] = 100.0f * (fr[i] < 0 ? median(pv) : percentile(pv, fr[i]));
  }
  const MeanErr rm = rms(s), st = same_top(s);
  r.rms_p_pct = {100.0 * rm.mean, 100.0 * rm.err};
  r.same_top_pct = {100.0 * st.mean, 100.0 * st.err};
  return r;
}

std::string kld_report_text(const KldReport& r) {
  std::string o = "====== Perplexity statistics ======\n";
  o += fmt("Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.ppl.mean, r.ppl.err);
  o += fmt("Mean PPL(base)                : %10.6f ± %10.6f\n", r.ppl_base.mean, r.ppl_base.err);
  o += fmt("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", r.cor);
  o += fmt("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r.ln_ratio.mean, r.ln_ratio.err);
  o += fmt("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r.ratio.mean, r.ratio.err);
  o += fmt("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", r.diff.mean, r.diff.err);
  o += "\n====== KL divergence statistics ======\n";
  o += fmt("Mean    KLD: %10.6f ± %10.6f\n", r.kld.mean, r.kld.err);
  o += fmt("Maximum KLD: %10.6f\n", r.kld_max);
  o += fmt("99.9%%   KLD: %10.6f\n", r.kld_999);
  o += fmt("99.0%%   KLD: %10.6f\n", r.kld_99);
  o += fmt("95.0%%   KLD: %10.6f\n", r.kld_95);
  o += fmt("90.0%%   KLD: %10.6f\n", r.kld_90);
  o += fmt("Median  KLD: %10.6f\n", r.kld_median);
  o += fmt("10.0%%   KLD: %10.6f\n", r.kld_10);
  o += fmt(" 5.0%%   KLD: %10.6f\n", r.kld_5);
  o += fmt(" 1.0%%   KLD: %10.6f\n", r.kld_1);
  o += fmt(" 0.1%%   KLD: %10.6f\n", r.kld_01);
  o += fmt("Minimum KLD: %10.6f\n", r.kld_min);
  o += "\n====== Token probability statistics ======\n";
  o += fmt("Mean    Δp: %6.3f ± %5.3f %%\n", r.p_diff_pct.mean, r.p_diff_pct.err);
  const char* names[13] = {
      "Maximum Δp:", "99.9%   Δp:", "99.0%   Δp:", "95.0%   Δp:", "90.0%   Δp:", "75.0%   Δp:", "Median  Δp:",
      "25.0%   Δp:", "10.0%   Δp:", " 5.0%   Δp:", " 1.0%   Δp:", " 0.1%   Δp:", "Minimum Δp:"};
  for (int i = 0; i < 13; ++i) o += fmt("%s %6.3f%%\n", names[i], r.p_diff_pcts[i]);
  o += fmt("RMS Δp    : %6.3f ± %5.3f %%\n", r.rms_p_pct.mean, r.rms_p_pct.err);
  o += fmt("Same top p: %6.3f ± %5.3f %%\n", r.same_top_pct.mean, r.same_top_pct.err);
  return o;
}

std::string kld_chunk_line(int chunk, const KldSums& s) {
  const RatioParts rp = ratio_parts(s);
  const double ppl = std::exp(rp.ln_ppl.mean);
  const MeanErr kl = mean_and_uncertainty(s.sum_kld, s.sum_kld2, s.count);
  const MeanErr rm = rms(s), st = same_top(s);
  return fmt("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
             chunk, ppl, ppl * rp.ln_ppl.err, rp.ln_ratio.mean, rp.ln_ratio.err, kl.mean, kl.err, 100.0 * rm.mean,
             100.0 * rm.err, 100.0 * st.mean, 100.0 * st.err);
}

}  // namespace kestrel::cli::ppl
