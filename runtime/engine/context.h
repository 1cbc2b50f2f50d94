// A decoding session: the KV cache, the scratch arena and the logits of the last step, over a
// shared immutable Model. One thread at a time.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "engine/profile.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace kestrel {

struct ContextOptions {
  int32_t n_ctx = 0;    // 0: the model's training context
  int32_t n_batch = 512;
  int32_t n_seq_max = 1;
  int n_threads = 0;    // 0: the model's setting
  // Keep the final hidden state (the output norm's input) of every row that gets logits: the
  // hook for drafters that read the target's features (EAGLE, MTP heads).
  bool capture_hidden = false;
  // The KV cache's element type: F16 (default), F32, F8_E4M3 (plain E4M3 bytes, half of F16's
  // memory; values beyond ±448 saturate; docs/LOW_PRECISION.md), or a block type, Q8_0 or Q4_0
  // (each token's row quantized in blocks of 32 values with an F16 scale, across its heads).
  // kv_type is K's; V takes kv_type_v, or kv_type when that is unset.
  DType kv_type = DType::F16;
  std::optional<DType> kv_type_v;
  DType v_type() const { return kv_type_v.value_or(kv_type); }
};

// One decode request. Empty positions / seq_ids / want_logits take the C API's defaults.
struct DecodeBatch {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  std::span<const int32_t> seq_ids;
  std::span<const bool> want_logits;
  // > 0: each wanted row keeps only its top_k best logits (1 .. kMaxBestLogits), selected where
  // the step ran (the TOP_K op: on a GPU the whole row never comes back); row(i) gives them and
  // logits(i) refuses. What a sampler whose best_needed() is nonzero reads. 0: whole rows.
  int32_t top_k = 0;
  // The wanted rows' final hidden states after the output norm (embedding(i)) instead of logits:
  // the output matrix is skipped.
  bool embeddings = false;
};

class Context {
 public:
  static Expected<std::unique_ptr<Context>> create(const Model& model, const ContextOptions& opts);
  ~Context();

  const Model& model() const { return model_; }
  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }
  int32_t n_ctx() const { return kv_->n_cells(); }
  Device& device() const { return model_.device(); }
  Executor& executor() { return *executor_; }

  // Runs the batch (split into steps of at most n_batch tokens), appending to the KV cache.
  // Validates every token id, sequence id and position first; on error nothing is cached.
  Status decode(const DecodeBatch& batch);
  // Logits of batch row i of the last decode (negative counts from the end); an error when the
  // decode kept only the best of each row (DecodeBatch::top_k).
  Expected<std::span<const float>> logits(int32_t i) const;
  // Batch row i of the last decode as the sampler reads it: whole, or its best logits.
  Expected<LogitRow> row(int32_t i) const;
  // The DecodeBatch::top_k for samplers that read `best_needed` best logits per row (0: whole
  // rows): that many on a device with its own memory, whole rows on host memory, where reading
  // the row costs nothing and the sampler's own selection is faster than a TOP_K pass (PERF.md).
  int32_t top_k_for(int32_t best_needed) const { return device().info().host_memory ? 0 : best_needed; }
  // Its final hidden state [n_embd] (ContextOptions::capture_hidden only).
  Expected<std::span<const float>> hidden(int32_t i) const;
  // Its state after the output norm [n_embd], of a decode with DecodeBatch::embeddings.
  Expected<std::span<const float>> embedding(int32_t i) const;
  // Per-op profiling (slower: one node at a time); profiler() is null when off.
  void set_profiling(bool on) { profiler_ = on ? std::make_unique<Profiler>() : nullptr; }
  Profiler* profiler() { return profiler_.get(); }

 private:
  Context(const Model& m) : model_(m) {}
  Status run_step(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::span<const int32_t> seq,
                  std::span<const int32_t> out_rows, float* logits_out, TokenLogit* best_out, float* hidden_out);
  Expected<int32_t> output_row(int32_t i, const char* what) const;  // batch row -> logits/hidden row
  Status check_supported();  // the device runs every node of a step's graph
  const Model& model_;
  ContextOptions opts_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<KvCache> kv_;
  uint8_t* arena_ = nullptr;
  size_t arena_size_ = 0;
  std::vector<float> logits_;        // [n_vocab * n_logit_rows] (whole rows)
  int32_t best_k_ = 0;               // > 0: the last decode kept this many per row, in best_
  std::vector<TokenLogit> best_;     // [best_k_ * n_logit_rows]
  std::vector<float> hidden_;        // [n_embd * n_logit_rows] (capture_hidden)
  std::vector<int32_t> logit_row_;   // batch row -> logits row, -1 if none
  bool embeddings_ = false;          // the last decode computed embeddings (in embd_), not logits
  std::vector<float> embd_;          // [n_embd * n_logit_rows]
  std::unique_ptr<Profiler> profiler_;
};

}  // namespace kestrel
