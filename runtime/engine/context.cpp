#include "engine/context.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/limits.h"
#include "core/trace.h"
#include "model/builder.h"

namespace kestrel {

namespace {

// The KV cache's bytes (64-bit, saturating) against the memory of a host backend: a context that
// cannot fit is refused before anything is allocated, naming where n_ctx came from.
Status check_kv_memory(const Device& device, const KvLayout& layout, int64_t n_ctx, const std::string& n_ctx_name,
                       DType k_type, DType v_type, int32_t n_seq) {
  if (!device.info().host_memory) return Status::Ok();  // device memory: its allocator says
  const uint64_t per_token = layout.bytes_per_token(k_type, v_type);
  const uint64_t need = limits::add_sat(limits::add_sat(limits::mul_sat(per_token, static_cast<uint64_t>(n_ctx)),
                                                        limits::mul_sat(8, static_cast<uint64_t>(n_ctx))),  // positions, tokens
                                        limits::mul_sat(layout.state_bytes_per_seq(), static_cast<uint64_t>(n_seq)));
  const uint64_t have = limits::physical_memory();
  if (have == 0 || need <= have) return Status::Ok();
  return Error(KESTREL_ERR_OUT_OF_MEMORY, "context: " + n_ctx_name + " = " + std::to_string(n_ctx) + " needs a KV cache of " +
                                              std::to_string(need) + " bytes (" + std::to_string(per_token) +
                                              " per token), more than the " + std::to_string(have) +
                                              " bytes of memory of this machine; lower n_ctx");
}

// K's and V's cache types: each one of the five, block types only where the layout's rows are
// whole blocks, and one type for both when V is a view of K (MLA's latent).
Status check_kv_types(const KvLayout& layout, DType k, DType v) {
  for (int i = 0; i < 2; ++i) {
    const DType t = i == 0 ? k : v;
    const char* which = i == 0 ? "K" : "V";
    if (t != DType::F16 && t != DType::F32 && t != DType::F8_E4M3 && t != DType::Q8_0 && t != DType::Q4_0)
      return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("context: ") + which + " cache type " + dtype_name(t) +
                                                     " is not a KV cache type (f16, f32, f8_e4m3, q8_0 or q4_0)");
    const std::string why = layout.cache_type_error(t, i == 1);
    if (!why.empty())
      return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("context: ") + which + " cache type " + dtype_name(t) +
                                                     " does not fit this model: " + why);
  }
  if (layout.v_in_k && k != v)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("context: this model's V is a view of its K cache (MLA), so "
                                                           "both take one type; got K ") +
                                                   dtype_name(k) + ", V " + dtype_name(v));
  return Status::Ok();
}

// The TOP_K node that keeps each logits row's k best: {values [k, rows], ids [k, rows]}.
std::pair<Tensor*, Tensor*> add_top_k(Graph& g, Tensor* logits, int32_t k) {
  Tensor* vals = g.intermediate(DType::F32, k, logits->ne[1]);
  Tensor* ids = g.intermediate(DType::I32, k, logits->ne[1]);
  g.add(Op::TOP_K, vals, logits, ids);
  g.mark_output(vals);
  g.mark_output(ids);
  return {vals, ids};
}

}  // namespace

Expected<std::unique_ptr<Context>> Context::create(const Model& model, const ContextOptions& opts) {
  if (model.vocab_only())
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "context: the model was loaded vocabulary-only and cannot decode");
  std::unique_ptr<Context> c(new Context(model));
  c->opts_ = opts;
  const HParams& h = model.hparams();
  const bool ctx_from_model = c->opts_.n_ctx <= 0;
  if (ctx_from_model) c->opts_.n_ctx = h.n_ctx_train;
  if (c->opts_.n_batch <= 0) c->opts_.n_batch = 512;
  const std::string n_ctx_name = ctx_from_model ? "n_ctx (the model's " + h.arch + ".context_length)" : "n_ctx";
  // Every entry point's caps (core/limits.h), again here for callers inside the library.
  KS_RETURN_IF_ERROR(limits::check_context("context", {c->opts_.n_ctx, c->opts_.n_batch, c->opts_.n_seq_max}));
  const int threads = opts.n_threads > 0 ? opts.n_threads : model.options().n_threads;
  KS_RETURN_IF_ERROR(limits::check_threads("context: n_threads", threads));
  const KvLayout layout = model.kv_layout();
  KS_RETURN_IF_ERROR(check_kv_types(layout, opts.kv_type, opts.v_type()));
  KS_RETURN_IF_ERROR(check_kv_memory(model.device(), layout, c->opts_.n_ctx, n_ctx_name, opts.kv_type, opts.v_type(),
                                     c->opts_.n_seq_max));
  auto executor = model.device().create_executor(threads);
  if (!executor.ok()) return Error(executor.status().code(), "context: " + executor.status().message());
  c->executor_ = std::move(executor.value());
  KvCache::Options ko;
  ko.n_cells = c->opts_.n_ctx;
  ko.n_seq_max = c->opts_.n_seq_max;
  ko.k_rows = layout.k_rows;
  ko.v_rows = layout.v_rows;
  ko.v_in_k = layout.v_in_k;
  ko.conv_rows = layout.conv_rows;
  ko.ssm_rows = layout.ssm_rows;
  ko.type_k = opts.kv_type;
  ko.type_v = opts.v_type();
  auto kv = KvCache::create(ko, model.device());
  if (!kv.ok()) return kv.status();
  c->kv_ = std::move(kv.value());
  KS_RETURN_IF_ERROR(c->check_supported());
  return c;
}

Context::~Context() {
  if (arena_) device().release(arena_);
  kv_.reset();
}

// A two-token step (one logits row, so the output selection is in it too) built and not run:
// every node must have a kernel on the device, or the context is refused naming the first.
Status Context::check_supported() {
  const int32_t n = kv_->n_cells() >= 2 ? 2 : 1;  // a one-cell context: one token
  const int32_t toks[2] = {0, 0}, pos[2] = {0, 1}, seq[2] = {0, 0}, slots[2] = {0, 1}, out_row = n - 1;
  std::vector<int32_t> attn;
  kv_->pack_attention_batch(std::span<const int32_t>(pos, n), std::span<const int32_t>(seq, n), &attn);
  ForwardBatch fb;
  fb.tokens = std::span<const int32_t>(toks, n);
  fb.positions = std::span<const int32_t>(pos, n);
  fb.slots = std::span<const int32_t>(slots, n);
  fb.attn = attn;
  fb.output_rows = std::span<const int32_t>(&out_row, 1);
  Graph g;
  Builder b(g, model_, *kv_, fb);
  add_top_k(g, model_.arch().forward(b), std::min(kMaxBestLogits, model_.hparams().n_vocab));
  for (const Node& node : g.nodes()) {
    if (device().supports(node)) continue;
    std::string types;
    for (const Tensor* t : node.src)
      if (t) types += std::string(types.empty() ? "" : ", ") + dtype_name(t->type) + (t->layout ? " (placed layout)" : "");
    return Error(KESTREL_ERR_UNSUPPORTED, "context: backend '" + device().info().name + "' has no kernel for " +
                                              op_name(node.op) + " on " + types + " (" + model_.hparams().arch + ")");
  }
  return Status::Ok();
}

Status Context::decode(const DecodeBatch& in) {
  const int64_t T = static_cast<int64_t>(in.tokens.size());
  trace::Span span("engine", "decode", trace::on() ? "{\"tokens\":" + std::to_string(T) + "}" : std::string());
  if (T == 0) return Error(KESTREL_ERR_INVALID_ARGUMENT, "decode: empty batch");
  auto bad_len = [&](size_t n, const char* what) {
    return n != 0 && n != static_cast<size_t>(T)
               ? Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("decode: ") + what + " has " + std::to_string(n) +
                                                         " entries for " + std::to_string(T) + " tokens")
               : Status::Ok();
  };
  KS_RETURN_IF_ERROR(bad_len(in.positions.size(), "positions"));
  KS_RETURN_IF_ERROR(bad_len(in.seq_ids.size(), "seq_ids"));
  KS_RETURN_IF_ERROR(bad_len(in.want_logits.size(), "logits flags"));
  const int32_t n_vocab = model_.hparams().n_vocab;
  if (in.top_k < 0 || in.top_k > kMaxBestLogits)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "decode: top_k " + std::to_string(in.top_k) + " is outside [0, " +
                                                   std::to_string(kMaxBestLogits) + "] (0: whole rows)");
  std::vector<int32_t> seq(T, 0), pos(T);
  for (int64_t i = 0; i < T; ++i) {
    if (in.tokens[i] < 0 || in.tokens[i] >= n_vocab)
      return Error(KESTREL_ERR_OUT_OF_RANGE, "decode: token id " + std::to_string(in.tokens[i]) + " at batch row " +
                                                 std::to_string(i) + " is outside [0, " + std::to_string(n_vocab) + ")");
    if (!in.seq_ids.empty()) seq[i] = in.seq_ids[i];
    if (seq[i] < 0 || seq[i] >= kv_->n_seq_max())
      return Error(KESTREL_ERR_OUT_OF_RANGE, "decode: sequence id " + std::to_string(seq[i]) + " at batch row " +
                                                 std::to_string(i) + " is outside [0, " +
                                                 std::to_string(kv_->n_seq_max()) + ")");
  }
  if (in.positions.empty()) {
    std::vector<int64_t> next(kv_->n_seq_max(), -1);  // 64-bit: the last position may be the largest
    for (int64_t i = 0; i < T; ++i) {
      if (next[seq[i]] < 0) next[seq[i]] = int64_t{kv_->seq_pos_max(seq[i])} + 1;
      if (next[seq[i]] > limits::kMaxPosition)
        return Error(KESTREL_ERR_INVALID_ARGUMENT, "decode: sequence " + std::to_string(seq[i]) +
                                                       " has no position left after " + std::to_string(next[seq[i]] - 1));
      pos[i] = static_cast<int32_t>(next[seq[i]]++);
    }
  } else {
    for (int64_t i = 0; i < T; ++i) {
      pos[i] = in.positions[i];
      if (pos[i] < 0 || pos[i] > limits::kMaxPosition)
        return Error(KESTREL_ERR_INVALID_ARGUMENT, "decode: position " + std::to_string(pos[i]) + " at batch row " +
                                                       std::to_string(i) + " is outside [0, " +
                                                       std::to_string(limits::kMaxPosition) + "]");
    }
  }
  KS_RETURN_IF_ERROR(kv_->can_claim(seq));  // the whole batch fits, or nothing is cached
  // Which rows produce logits, and where they go.
  logit_row_.assign(T, -1);
  int32_t n_out = 0;
  for (int64_t i = 0; i < T; ++i) {
    const bool want = in.want_logits.empty() ? i == T - 1 : in.want_logits[i];
    if (want) logit_row_[i] = n_out++;
  }
  embeddings_ = in.embeddings;
  best_k_ = embeddings_ ? 0 : std::min(in.top_k, n_vocab);
  logits_.assign(best_k_ || embeddings_ ? 0 : static_cast<size_t>(n_out) * n_vocab, 0.0f);
  best_.assign(static_cast<size_t>(n_out) * best_k_, TokenLogit{0, 0.0f});
  const size_t n_embd = static_cast<size_t>(model_.hparams().n_embd);
  hidden_.assign(opts_.capture_hidden && !embeddings_ ? static_cast<size_t>(n_out) * n_embd : 0, 0.0f);
  embd_.assign(embeddings_ ? static_cast<size_t>(n_out) * n_embd : 0, 0.0f);

  int32_t out_done = 0;
  for (int64_t s = 0; s < T; s += opts_.n_batch) {
    const int64_t e = std::min<int64_t>(T, s + opts_.n_batch);
    std::vector<int32_t> rows;
    for (int64_t i = s; i < e; ++i)
      if (logit_row_[i] >= 0) rows.push_back(static_cast<int32_t>(i - s));
    std::span<const int32_t> toks = in.tokens.subspan(s, e - s);
    KS_RETURN_IF_ERROR(run_step(toks, std::span<const int32_t>(pos).subspan(s, e - s),
                                std::span<const int32_t>(seq).subspan(s, e - s), rows,
                                embeddings_ ? embd_.data() + static_cast<size_t>(out_done) * n_embd
                                : best_k_   ? nullptr
                                            : logits_.data() + static_cast<size_t>(out_done) * n_vocab,
                                best_k_ ? best_.data() + static_cast<size_t>(out_done) * best_k_ : nullptr,
                                hidden_.empty() ? nullptr : hidden_.data() + static_cast<size_t>(out_done) * n_embd));
    out_done += static_cast<int32_t>(rows.size());
  }
  return Status::Ok();
}

Status Context::run_step(std::span<const int32_t> tokens, std::span<const int32_t> pos,
                         std::span<const int32_t> seq, std::span<const int32_t> out_rows, float* logits_out,
                         TokenLogit* best_out, float* hidden_out) {
  std::vector<int32_t> slots, attn;
  KS_RETURN_IF_ERROR(kv_->claim(tokens, pos, seq, &slots));
  kv_->pack_attention_batch(pos, seq, &attn);
  ForwardBatch fb;
  fb.tokens = tokens;
  fb.positions = pos;
  fb.slots = slots;
  fb.attn = attn;
  // Steps without wanted logits still need a valid output row set: compute the last row only.
  const int32_t last = fb.n_tokens() - 1;
  fb.output_rows = out_rows.empty() ? std::span<const int32_t>(&last, 1) : out_rows;
  fb.capture_hidden = hidden_out != nullptr;
  fb.embeddings = embeddings_;  // then logits_out receives the normed states

  Graph g;
  Builder b(g, model_, *kv_, fb);
  Tensor* logits = model_.arch().forward(b);
  const bool keep_best = best_out && !out_rows.empty();  // the rows' best only: TOP_K on the device
  const auto [best_vals, best_ids] = keep_best ? add_top_k(g, logits, best_k_) : std::pair<Tensor*, Tensor*>{};
  const size_t need = g.plan();
  if (need > arena_size_) {
    if (arena_) device().release(arena_);
    arena_ = nullptr, arena_size_ = 0;
    auto mem = device().alloc(need);
    if (!mem.ok())
      return Error(mem.status().code(), "decode: cannot allocate " + std::to_string(need) + " bytes of scratch (" +
                                            mem.status().message() + ")");
    arena_ = static_cast<uint8_t*>(mem.value());
    arena_size_ = need;
  }
  g.bind(arena_);
  // Every per-step input in one upload: the graph's leading input region.
  KS_RETURN_IF_ERROR(executor_->write(arena_, b.input_image().data(), b.input_image().size()));
  KS_RETURN_IF_ERROR(profiler_ ? profiler_->run(*executor_, g) : executor_->run(g, 0, g.nodes().size()));
  KS_RETURN_IF_ERROR(executor_->sync());
  if (keep_best) {
    const size_t n = out_rows.size() * static_cast<size_t>(best_k_);
    std::vector<float> vals(n);
    std::vector<int32_t> ids(n);
    KS_RETURN_IF_ERROR(executor_->read(vals.data(), best_vals->data, n * sizeof(float)));
    KS_RETURN_IF_ERROR(executor_->read(ids.data(), best_ids->data, n * sizeof(int32_t)));
    for (size_t i = 0; i < n; ++i) best_out[i] = {ids[i], vals[i]};
  } else if (!out_rows.empty()) {
    KS_RETURN_IF_ERROR(executor_->read(logits_out, logits->data, out_rows.size() * logits->ne[0] * sizeof(float)));
  }
  if (!out_rows.empty() && hidden_out && b.hidden())
    KS_RETURN_IF_ERROR(executor_->read(hidden_out, b.hidden()->data, out_rows.size() * b.hidden()->ne[0] * sizeof(float)));
  return Status::Ok();
}

Expected<int32_t> Context::output_row(int32_t i, const char* what) const {
  const int32_t T = static_cast<int32_t>(logit_row_.size());
  const int32_t idx = i < 0 ? T + i : i;
  if (idx < 0 || idx >= T)
    return Error(KESTREL_ERR_OUT_OF_RANGE,
                 std::string(what) + ": row " + std::to_string(i) + " is outside the last batch of " + std::to_string(T));
  if (logit_row_[idx] < 0)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 std::string(what) + ": batch row " + std::to_string(idx) + " did not ask for logits");
  return logit_row_[idx];
}

Expected<std::span<const float>> Context::logits(int32_t i) const {
  auto row = output_row(i, "logits");
  if (!row.ok()) return row.status();
  if (embeddings_) return Error(KESTREL_ERR_INVALID_ARGUMENT, "logits: the last decode computed embeddings");
  if (best_k_ > 0)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "logits: the last decode kept only the best " + std::to_string(best_k_) +
                                                   " logits of each row (top_k); use row(), or decode with top_k = 0");
  const size_t V = model_.hparams().n_vocab;
  return std::span<const float>(logits_.data() + static_cast<size_t>(row.value()) * V, V);
}

Expected<LogitRow> Context::row(int32_t i) const {
  auto row = output_row(i, "logits");
  if (!row.ok()) return row.status();
  if (embeddings_) return Error(KESTREL_ERR_INVALID_ARGUMENT, "logits: the last decode computed embeddings");
  const int32_t V = model_.hparams().n_vocab;
  const size_t r = static_cast<size_t>(row.value());
  if (best_k_ > 0) return LogitRow{{}, std::span<const TokenLogit>(best_.data() + r * best_k_, best_k_), V};
  return LogitRow{std::span<const float>(logits_.data() + r * V, V), {}, V};
}

Expected<std::span<const float>> Context::embedding(int32_t i) const {
  if (!embeddings_) return Error(KESTREL_ERR_INVALID_ARGUMENT, "embedding: the last decode computed logits");
  auto row = output_row(i, "embedding");
  if (!row.ok()) return row.status();
  const size_t E = static_cast<size_t>(model_.hparams().n_embd);
  return std::span<const float>(embd_.data() + static_cast<size_t>(row.value()) * E, E);
}

Expected<std::span<const float>> Context::hidden(int32_t i) const {
  if (!opts_.capture_hidden)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "hidden: the context was created without capture_hidden");
  auto row = output_row(i, "hidden");
  if (!row.ok()) return row.status();
  const size_t E = static_cast<size_t>(model_.hparams().n_embd);
  return std::span<const float>(hidden_.data() + static_cast<size_t>(row.value()) * E, E);
}

}  // namespace kestrel
