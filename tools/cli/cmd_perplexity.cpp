// kestrel perplexity: the perplexity of a model over a text, computed exactly as llama.cpp's
// llama-perplexity does it, and its KL-divergence mode (a quantized model against a base model's
// saved log-probabilities). The method:
// - the whole text is tokenized once, with BOS when the vocabulary adds one;
// - it is cut into n_chunk = n_tokens / CTX non-overlapping chunks of CTX tokens (the rest is
//   dropped); each chunk is evaluated from an empty cache with its first token replaced by BOS;
// - only the second half is scored: the logits at positions CTX/2 .. CTX-2 predict the tokens at
//   CTX/2+1 .. CTX-1 (CTX - 1 - CTX/2 tokens per chunk), nll = -log softmax(logits)[next];
// - after each chunk the running estimate exp(sum nll / count) is printed as [i]x.xxxx,;
// - the final estimate is PPL = exp(mean nll) +/- PPL * sqrt((mean(nll^2) - mean(nll)^2) / (count-1)).
// Several chunks run in one decode step as separate sequences (-b / -c of them, like llama.cpp's
// n_seq); with -b < -c a chunk is decoded in pieces of -b tokens.
// The arithmetic and the base file's format: perplexity_stats.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "common.h"
#include "perplexity_stats.h"

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs fn(i) for i in [0, n) on the machine's cores.
void parallel_for(int n, const std::function<void(int)>& fn) {
  const int n_threads = std::max(1, std::min<int>(n, static_cast<int>(std::thread::hardware_concurrency())));
  if (n_threads <= 1 || n < 8) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; i < n; i += n_threads) fn(i);
    });
  for (auto& th : threads) th.join();
}

// Evaluates chunks of CTX tokens, n_seq at a time, and hands back the scored rows' logits.
class ChunkRunner {
 public:
  ChunkRunner(const kestrel_model* model, const Args& a, int n_ctx, int n_batch_arg, int n_chunk)
      : n_ctx_(n_ctx), first_(n_ctx / 2), n_score_(n_ctx - 1 - n_ctx / 2) {
    n_vocab_ = kestrel_model_n_vocab(model);
    n_seq_ = std::max(1, std::min({n_batch_arg / n_ctx, n_chunk, 64}));
    n_batch_ = n_batch_arg >= n_ctx ? n_seq_ * n_ctx : n_batch_arg;
    kestrel_context_options co;
    kestrel_context_options_init(&co);
    co.n_ctx = static_cast<uint32_t>(n_seq_ * n_ctx);
    co.n_batch = static_cast<uint32_t>(n_batch_);
    co.n_seq_max = static_cast<uint32_t>(n_seq_);
    kv_types_from_args(a).apply(co);
    ctx_ = new_context(model, &co);
    rows_.resize(static_cast<size_t>(n_seq_) * n_score_);
    // A chunk decoded in pieces (-b < -c): its rows are copied out before the next piece's decode;
    // otherwise they are read where the context keeps them.
    if (n_batch_ < n_ctx_) logits_.resize(static_cast<size_t>(n_score_) * n_vocab_);
  }
  int n_seq() const { return n_seq_; }
  int n_batch() const { return n_batch_; }
  int n_vocab() const { return n_vocab_; }
  int n_score() const { return n_score_; }
  // Logits of chunk `seq` of the last run(), row k predicting the chunk's token first + k + 1;
  // valid until the next run().
  const float* row(int seq, int k) const { return rows_[static_cast<size_t>(seq) * n_score_ + k]; }

  // Evaluates chunks [c0, c0 + ns) of tokens (each with its first token replaced by bos if >= 0).
  void run(const std::vector<kestrel_token>& tokens, int c0, int ns, kestrel_token bos) {
    kestrel_kv_clear(ctx_.get());
    for (int p0 = 0; p0 < n_ctx_; p0 += std::min(n_batch_, n_ctx_)) {
      const int len = std::min(n_ctx_ - p0, std::min(n_batch_, n_ctx_));
      tok_.clear();
      pos_.clear();
      seq_.clear();
      want_.clear();
      struct Out {
        int32_t row, seq, k;  // the batch row, its chunk and scored position
      };
      std::vector<Out> out;
      for (int s = 0; s < ns; ++s) {
        const size_t base = static_cast<size_t>(c0 + s) * n_ctx_;
        for (int k = 0; k < len; ++k) {
          const int p = p0 + k;
          tok_.push_back(p == 0 && bos >= 0 ? bos : tokens[base + p]);
          pos_.push_back(p);
          seq_.push_back(s);
          const bool w = p >= first_ && p < n_ctx_ - 1;
          want_.push_back(w);
          if (w) out.push_back({static_cast<int32_t>(tok_.size() - 1), s, p - first_});
        }
      }
      const kestrel_batch b{static_cast<int32_t>(tok_.size()), tok_.data(), pos_.data(), seq_.data(),
                            reinterpret_cast<const bool*>(want_.data())};
      check(kestrel_decode(ctx_.get(), &b));
      for (const Out& o : out) {
        const float* l = nullptr;
        int32_t nv = 0;
        check(kestrel_get_logits(ctx_.get(), o.row, &l, &nv));
        const size_t at = static_cast<size_t>(o.seq) * n_score_ + o.k;
        if (logits_.empty()) {
          rows_[at] = l;
        } else {
          float* dst = logits_.data() + at * n_vocab_;
          std::memcpy(dst, l, sizeof(float) * n_vocab_);
          rows_[at] = dst;
        }
      }
    }
  }

 private:
  int n_ctx_, first_, n_score_, n_vocab_ = 0, n_seq_ = 1, n_batch_ = 0;
  ContextPtr ctx_;
  std::vector<float> logits_;       // the scored rows of a chunk decoded in pieces
  std::vector<const float*> rows_;  // [seq * n_score + k]
  std::vector<kestrel_token> tok_;
  std::vector<int32_t> pos_, seq_;
  std::vector<uint8_t> want_;
};

void log_setup(const char* what, int n_chunk, int n_ctx, const ChunkRunner& r) {
  std::fprintf(stderr, "perplexity: calculating %s over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d\n", what, n_chunk,
               n_ctx, r.n_batch(), r.n_seq());
}

void log_eta(double t_step, int n_chunk, int n_seq) {
  const double total = t_step * ((n_chunk + n_seq - 1) / n_seq);
  std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", t_step, total / 60.0);
}

void log_speed(int n_chunk, int n_ctx, double secs) {
  const double n = static_cast<double>(n_chunk) * n_ctx;
  std::fprintf(stderr, "perplexity: %.0f tokens evaluated in %.2f s (%.1f tokens/s)\n", n, secs,
               secs > 0 ? n / secs : 0.0);
}

void write_or_fail(std::ofstream& f, const void* p, size_t n, const std::string& path) {
  f.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  if (!f) throw std::runtime_error("--kl-divergence-base: cannot write " + path);
}

// Plain perplexity, and with base_path the base model's log-probabilities saved for --kl-divergence.
int perplexity_mode(const Args& a, const kestrel_model* model, const std::string& base_path) {
  const std::string text = read_option_file("--file", a.required("--file"));
  const int n_ctx = static_cast<int>(a.integer("--ctx-size", 512));
  const long long n_batch_arg = a.integer("--batch-size", 2048);
  if (n_ctx < 4) throw UsageError("-c/--ctx-size must be at least 4 tokens per chunk");
  if (n_batch_arg < 1) throw UsageError("-b/--batch-size must be at least 1");
  if (n_ctx > kestrel_model_n_ctx_train(model))
    std::fprintf(stderr, "perplexity: warning: the model was trained on only %d context tokens (%d specified)\n",
                 kestrel_model_n_ctx_train(model), n_ctx);

  const auto t_tok = Clock::now();
  std::fprintf(stderr, "perplexity: tokenizing the input ..\n");
  std::vector<kestrel_token> tokens = tokenize(model, text, /*add_special=*/true, /*parse_special=*/false);
  std::fprintf(stderr, "perplexity: tokenization took %g ms\n", 1e3 * seconds_since(t_tok));
  if (static_cast<long long>(tokens.size()) < 2LL * n_ctx)
    throw std::runtime_error("you need at least " + std::to_string(2 * n_ctx) +
                             " tokens to evaluate perplexity with a context of " + std::to_string(n_ctx) +
                             "; the text tokenizes to only " + std::to_string(tokens.size()) + " tokens");
  const kestrel_token bos = kestrel_model_token_bos(model);
  const bool add_bos = bos >= 0 && tokens[0] == bos;  // the vocabulary adds BOS (the text alone cannot make it)

  int n_chunk = static_cast<int>(tokens.size() / n_ctx);
  if (a.has("--chunks") && a.integer("--chunks", -1) >= 0)
    n_chunk = std::min<int>(n_chunk, static_cast<int>(a.integer("--chunks", -1)));
  if (n_chunk < 1) throw UsageError("--chunks must be at least 1");

  ChunkRunner runner(model, a, n_ctx, static_cast<int>(std::min<long long>(n_batch_arg, 1 << 20)), n_chunk);
  const int V = runner.n_vocab(), S = runner.n_score();
  const int first = n_ctx / 2;
  std::fprintf(stderr, "perplexity: have %zu tokens\n", tokens.size());
  log_setup("perplexity", n_chunk, n_ctx, runner);

  std::ofstream base;
  std::vector<uint16_t> qrows;
  if (!base_path.empty()) {
    base.open(base_path, std::ios::binary | std::ios::trunc);
    if (!base) throw std::runtime_error("--kl-divergence-base: cannot open " + base_path + " for writing");
    std::fprintf(stderr, "perplexity: saving the log-probabilities to %s\n", base_path.c_str());
    const uint32_t hdr_ctx = static_cast<uint32_t>(n_ctx);
    const int32_t hdr[2] = {V, n_chunk};
    write_or_fail(base, "_logits_", 8, base_path);
    write_or_fail(base, &hdr_ctx, sizeof hdr_ctx, base_path);
    write_or_fail(base, hdr, sizeof hdr, base_path);
    write_or_fail(base, tokens.data(), sizeof(kestrel_token) * static_cast<size_t>(n_chunk) * n_ctx, base_path);
    qrows.resize(static_cast<size_t>(S) * ppl::row_u16(V));
  }

  const bool json = a.has("--json");
  double nll = 0, nll2 = 0;
  size_t count = 0;
  std::vector<double> running;
  std::vector<double> v(S);
  const auto t0 = Clock::now();
  for (int c0 = 0; c0 < n_chunk; c0 += runner.n_seq()) {
    const int ns = std::min(runner.n_seq(), n_chunk - c0);
    const auto t_step = Clock::now();
    runner.run(tokens, c0, ns, add_bos ? bos : -1);
    if (c0 == 0) log_eta(seconds_since(t_step), n_chunk, runner.n_seq());
    for (int s = 0; s < ns; ++s) {
      const kestrel_token* next = tokens.data() + static_cast<size_t>(c0 + s) * n_ctx + first + 1;
      if (base.is_open()) {
        parallel_for(S, [&](int k) {
          v[k] =
              ppl::quantize_row(runner.row(s, k), V, next[k], qrows.data() + static_cast<size_t>(k) * ppl::row_u16(V));
        });
        write_or_fail(base, qrows.data(), qrows.size() * sizeof(uint16_t), base_path);
      } else {
        parallel_for(S, [&](int k) { v[k] = ppl::token_nll(runner.row(s, k), V, next[k]); });
      }
      for (int k = 0; k < S; ++k) {
        nll += v[k];
        nll2 += v[k] * v[k];
      }
      count += S;
      running.push_back(std::exp(nll / count));
      if (!json) {
        std::printf("[%d]%.4f,", c0 + s + 1, running.back());
        std::fflush(stdout);
      }
    }
  }
  const double secs = seconds_since(t0);
  if (base.is_open()) {
    base.close();
    if (!base) throw std::runtime_error("--kl-divergence-base: cannot write " + base_path);
  }
  const ppl::MeanErr est = ppl::ppl_estimate(nll, nll2, count);
  log_speed(n_chunk, n_ctx, secs);
  if (json) {
    nlohmann::json out = {{"ppl", est.mean},         {"ppl_err", est.err},
                          {"n_chunks", n_chunk},     {"n_tokens", count},
                          {"n_ctx", n_ctx},          {"n_batch", runner.n_batch()},
                          {"n_seq", runner.n_seq()}, {"tokens_in_text", tokens.size()},
                          {"chunk_ppl", running},    {"seconds", secs}};
    if (!base_path.empty()) out["kl_divergence_base"] = base_path;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", est.mean, est.err);
  }
  return 0;
}

struct BaseFile {
  std::ifstream in;
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0, n_chunk = 0;
  std::vector<kestrel_token> tokens;
};

void open_base(const std::string& path, BaseFile& f) {
  f.in.open(path, std::ios::binary);
  if (!f.in) throw UsageError("--kl-divergence: cannot open " + path);
  char magic[8] = {};
  f.in.read(magic, 8);
  if (!f.in || std::memcmp(magic, "_logits_", 8) != 0)
    throw std::runtime_error("--kl-divergence: " + path +
                             " does not look like a file of log-probabilities "
                             "(kestrel perplexity --kl-divergence-base or llama-perplexity's)");
  f.in.read(reinterpret_cast<char*>(&f.n_ctx), sizeof f.n_ctx);
  f.in.read(reinterpret_cast<char*>(&f.n_vocab), sizeof f.n_vocab);
  f.in.read(reinterpret_cast<char*>(&f.n_chunk), sizeof f.n_chunk);
  if (!f.in || f.n_ctx < 4 || f.n_ctx > (1u << 24) || f.n_vocab <= 0 || f.n_chunk <= 0)
    throw std::runtime_error("--kl-divergence: " + path + ": a truncated or damaged header");
  f.tokens.resize(static_cast<size_t>(f.n_ctx) * f.n_chunk);
  f.in.read(reinterpret_cast<char*>(f.tokens.data()),
            static_cast<std::streamsize>(f.tokens.size() * sizeof(kestrel_token)));
  if (!f.in) throw std::runtime_error("--kl-divergence: " + path + ": failed reading the evaluation tokens");
}

nlohmann::json report_json(const ppl::KldReport& r) {
  const float* d = r.p_diff_pcts;
  return {{"ppl", r.ppl.mean},
          {"ppl_err", r.ppl.err},
          {"ppl_base", r.ppl_base.mean},
          {"ppl_base_err", r.ppl_base.err},
          {"cor_ln_ppl", r.cor},
          {"ln_ppl_ratio", r.ln_ratio.mean},
          {"ln_ppl_ratio_err", r.ln_ratio.err},
          {"ppl_ratio", r.ratio.mean},
          {"ppl_ratio_err", r.ratio.err},
          {"ppl_diff", r.diff.mean},
          {"ppl_diff_err", r.diff.err},
          {"mean_kld", r.kld.mean},
          {"mean_kld_err", r.kld.err},
          {"kld_max", r.kld_max},
          {"kld_99_9", r.kld_999},
          {"kld_99", r.kld_99},
          {"kld_95", r.kld_95},
          {"kld_90", r.kld_90},
          {"kld_median", r.kld_median},
          {"kld_10", r.kld_10},
          {"kld_5", r.kld_5},
          {"kld_1", r.kld_1},
          {"kld_0_1", r.kld_01},
          {"kld_min", r.kld_min},
          {"mean_dp", r.p_diff_pct.mean},
          {"mean_dp_err", r.p_diff_pct.err},
          {"dp_max", d[0]},
          {"dp_99_9", d[1]},
          {"dp_99", d[2]},
          {"dp_95", d[3]},
          {"dp_90", d[4]},
          {"dp_75", d[5]},
          {"dp_median", d[6]},
          {"dp_25", d[7]},
          {"dp_10", d[8]},
          {"dp_5", d[9]},
          {"dp_1", d[10]},
          {"dp_0_1", d[11]},
          {"dp_min", d[12]},
          {"rms_dp", r.rms_p_pct.mean},
          {"rms_dp_err", r.rms_p_pct.err},
          {"same_top_p", r.same_top_pct.mean},
          {"same_top_p_err", r.same_top_pct.err}};
}

// The KL divergence of this model against a base file: its tokens, chunking and log-probabilities.
int kld_mode(const Args& a, const kestrel_model* model, const std::string& path) {
  BaseFile f;
  open_base(path, f);
  const int n_ctx = static_cast<int>(f.n_ctx);
  if (a.has("--ctx-size") && a.integer("--ctx-size", 0) != n_ctx)
    std::fprintf(stderr, "perplexity: %s was computed with a context of %d: using it (not -c %lld)\n", path.c_str(),
                 n_ctx, a.integer("--ctx-size", 0));
  if (a.has("--file"))
    std::fprintf(stderr, "perplexity: --kl-divergence reads its tokens from %s; -f is not used\n", path.c_str());
  const int V = kestrel_model_n_vocab(model);
  if (f.n_vocab != V)
    throw std::runtime_error("--kl-divergence: inconsistent vocabulary (" + std::to_string(f.n_vocab) + " in " + path +
                             " vs " + std::to_string(V) + " in the model)");
  int n_chunk = f.n_chunk;
  if (a.has("--chunks") && a.integer("--chunks", -1) >= 0)
    n_chunk = std::min<int>(n_chunk, static_cast<int>(a.integer("--chunks", -1)));
  if (n_chunk < 1) throw UsageError("--chunks must be at least 1");
  for (kestrel_token t : f.tokens)
    if (t < 0 || t >= V)
      throw std::runtime_error("--kl-divergence: " + path + " holds a token id outside the vocabulary");
  const kestrel_token bos = kestrel_model_token_bos(model);
  const bool add_bos = bos >= 0 && f.tokens[0] == bos;

  const long long n_batch_arg = a.integer("--batch-size", 2048);
  if (n_batch_arg < 1) throw UsageError("-b/--batch-size must be at least 1");
  ChunkRunner runner(model, a, n_ctx, static_cast<int>(std::min<long long>(n_batch_arg, 1 << 20)), n_chunk);
  const int S = runner.n_score(), nv = ppl::row_u16(V), first = n_ctx / 2;
  log_setup("KL divergence", n_chunk, n_ctx, runner);

  const bool json = a.has("--json");
  if (!json)
    std::printf(
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS "
        "           Same top p\n");
  ppl::KldSums sums;
  std::vector<float> kld_values, p_diff_values;
  std::vector<uint16_t> base_rows(static_cast<size_t>(S) * nv);
  std::vector<ppl::KldToken> toks(S);
  const auto t0 = Clock::now();
  for (int c0 = 0; c0 < n_chunk; c0 += runner.n_seq()) {
    const int ns = std::min(runner.n_seq(), n_chunk - c0);
    const auto t_step = Clock::now();
    runner.run(f.tokens, c0, ns, add_bos ? bos : -1);
    if (c0 == 0) log_eta(seconds_since(t_step), n_chunk, runner.n_seq());
    for (int s = 0; s < ns; ++s) {
      f.in.read(reinterpret_cast<char*>(base_rows.data()),
                static_cast<std::streamsize>(base_rows.size() * sizeof(uint16_t)));
      if (!f.in)
        throw std::runtime_error("--kl-divergence: failed reading the log-probs of chunk " +
                                 std::to_string(c0 + s + 1));
      const kestrel_token* next = f.tokens.data() + static_cast<size_t>(c0 + s) * n_ctx + first + 1;
      parallel_for(S, [&](int k) {
        toks[k] = ppl::kld_row(runner.row(s, k), V, base_rows.data() + static_cast<size_t>(k) * nv, next[k]);
      });
      for (const ppl::KldToken& t : toks) {
        ppl::add(sums, t);
        kld_values.push_back(static_cast<float>(t.kld));
        p_diff_values.push_back(t.p_diff);
      }
      if (!json) {
        std::printf("%s", ppl::kld_chunk_line(c0 + s + 1, sums).c_str());
        std::fflush(stdout);
      }
    }
  }
  log_speed(n_chunk, n_ctx, seconds_since(t0));
  if (sums.count < 100)
    std::fprintf(stderr, "perplexity: only %zu tokens scored: the statistics below are rough\n", sums.count);
  const ppl::KldReport r = ppl::kld_report(sums, kld_values, p_diff_values);
  if (json) {
    nlohmann::json out = report_json(r);
    out["n_chunks"] = n_chunk;
    out["n_tokens"] = sums.count;
    out["n_ctx"] = n_ctx;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("\n%s", ppl::kld_report_text(r).c_str());
  }
  return 0;
}

}  // namespace

Opts perplexity_options() {
  return model_options() +
         Opts{{"-f,--file", "FILE", "the text to score (required, except with --kl-divergence)"},
              ctx_option("tokens per chunk; the second half of each is scored (default 512)"),
              {"-b,--batch-size", "N", "tokens per decode step: N / CTX chunks run together (default 2048)"},
              {"--chunks", "N", "score at most the first N chunks (default: all)"},
              {"--kl-divergence-base", "FILE",
               "also save this (base) model's log-probabilities to FILE, llama-perplexity's format"},
              {"--kl-divergence", "FILE",
               "compare with a base FILE: mean KLD and percentiles, delta-p, same top p, PPL ratio"},
              {"--json", "",
               "print one JSON object (ppl, ppl_err, n_chunks, n_tokens; KLD: mean_kld, same_top_p, ppl_ratio...)"}} +
         cache_options();
}

int cmd_perplexity(const Args& a) {
  a.required("--model");
  const std::string base = a.str("--kl-divergence-base"), kld = a.str("--kl-divergence");
  if (!base.empty() && !kld.empty())
    throw UsageError("--kl-divergence-base saves a base, --kl-divergence compares with one: give one of them");
  if (kld.empty()) a.required("--file");
  ModelPtr model = load_model_from_args(a);
  return kld.empty() ? perplexity_mode(a, model.get(), base) : kld_mode(a, model.get(), kld);
}

}  // namespace kestrel::cli
