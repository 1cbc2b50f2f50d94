// The arithmetic of `kestrel perplexity`, the same as llama.cpp's llama-perplexity: the negative
// log-likelihood of a token from one logits row, the KL-divergence base file's quantized
// log-probabilities, a row's KL divergence against them, and the statistics printed at the end.
//
// The KL-divergence base file (written by --kl-divergence-base, read by --kl-divergence) is
// llama-perplexity's --kl-divergence-base format, so either tool reads the other's file
// (little-endian):
//   char[8]   "_logits_"
//   uint32    n_ctx                  the chunk size (-c) the base was computed with
//   int32     n_vocab
//   int32     n_chunk
//   int32     tokens[n_chunk * n_ctx]  the evaluated tokens, as in the text (not BOS-replaced)
//   then per chunk, for each of its n_ctx - 1 - n_ctx/2 scored positions, one row of
//   nv = 2 * ((n_vocab + 1) / 2) + 4 uint16:
//     float32 scale, float32 min_log_prob   (the row's first 4 uint16)
//     uint16  q[n_vocab] (+1 zero if n_vocab is odd)
//   where log p(i) = scale * q[i] + min_log_prob over the range [max - 16, max] of the log-probs
//   (the logits below max_logit - 16 are stored as 0, i.e. as min_log_prob).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel::cli::ppl {

// Per row: nv uint16 (scale and min_log_prob as two floats, then the quantized log-probs).
inline int row_u16(int n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// -log p(tok) under softmax(logits): llama-perplexity's log_softmax (float max, double sum).
double token_nll(const float* logits, int n_vocab, int tok);

// Writes a row's quantized log-probs into out[row_u16(n_vocab)]; returns -log p(tok).
double quantize_row(const float* logits, int n_vocab, int tok, uint16_t* out);

// Running sums over tokens of the KL-divergence mode.
struct KldSums {
  double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
  double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
  float max_p_diff = 0;
  size_t n_same_top = 0, count = 0;
};
// One token's values, computed independently per row (in parallel), then added in order.
struct KldToken {
  float nll = 0, nll_base = 0;
  double kld = 0;
  float p_diff = 0;
  bool same_top = false;
};
KldToken kld_row(const float* logits, int n_vocab, const uint16_t* base_row, int tok);
void add(KldSums& s, const KldToken& t);

// mean and its standard error (0 when count <= 10), as llama-perplexity's mean_and_uncertainty.
struct MeanErr {
  double mean = 0, err = 0;
};
MeanErr mean_and_uncertainty(double sum, double sum2, size_t count);
double covariance(double suma, double sumb, double sumab, size_t count);
// The final estimate from sums of nll and nll^2 over count tokens: PPL = exp(mean), ± = PPL *
// sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)).
MeanErr ppl_estimate(double nll, double nll2, size_t count);

// Percentile of sorted values by linear interpolation (llama-perplexity's), and the median.
float percentile(const std::vector<float>& sorted, float fraction);
float median(const std::vector<float>& sorted);

// Everything the KL-divergence mode reports (percentages where llama-perplexity prints %).
struct KldReport {
  MeanErr ppl, ppl_base, ln_ratio, ratio, diff, kld, p_diff_pct, rms_p_pct, same_top_pct;
  double cor = 0;  // Cor(ln PPL(Q), ln PPL(base)), percent
  float kld_max = 0, kld_999 = 0, kld_99 = 0, kld_95 = 0, kld_90 = 0, kld_median = 0, kld_10 = 0, kld_5 = 0, kld_1 = 0,
        kld_01 = 0, kld_min = 0;
  // Δp percentiles, percent: max, 99.9, 99, 95, 90, 75, median, 25, 10, 5, 1, 0.1, min
  float p_diff_pcts[13] = {};
};
// kld_values and p_diff_values are sorted in place.
KldReport kld_report(const KldSums& s, std::vector<float>& kld_values, std::vector<float>& p_diff_values);
// llama-perplexity's three blocks of statistics, as text.
std::string kld_report_text(const KldReport& r);
// The per-chunk line: chunk, PPL, ln(PPL(Q)/PPL(base)), KLD, Δp RMS, same top p (running values).
std::string kld_chunk_line(int chunk, const KldSums& s);

}  // namespace kestrel::cli::ppl
