#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "engine/stop_strings.h"
#include "speculative/verify.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

struct Scheduler::Request {
  uint64_t id = 0;
  RequestSpec spec;
  Sampler sampler;
  StreamingDetokenizer detok;
  std::vector<int32_t> input;      // tokens to have in the KV cache: prompt, then (after preemption) + generated
  std::vector<int32_t> generated;  // sampled tokens; the last one is not in the cache yet
  StopStrings stops;               // decoded text not yet emitted (could start a stop string)
  int32_t seq = -1;
  int32_t n_past = 0;              // tokens of `input` (then of generated) in the cache
  bool admitted_once = false;
  std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  std::atomic<bool> cancel{false};
  bool done = false;
  RequestResult result;
  // Speculative decoding: prompt + generated, the drafter (n-gram: its own; draft model: the
  // scheduler's), the draft sampler of a sampled request, the adaptive length, this step's draft.
  std::vector<int32_t> history;
  std::unique_ptr<Drafter> own_drafter;
  Drafter* drafter = nullptr;
  std::unique_ptr<Sampler> draft_sampler;
  DraftLength len;
  Draft draft;
  // A model with recurrent layers cannot drop rejected drafts from its state: it goes back to the
  // checkpoint taken before the step, and these tokens (the step's token and the accepted drafts)
  // are decoded again, without logits, ahead of the next token (which then does not speculate).
  std::vector<int32_t> replay;
  Request(RequestSpec s, const Tokenizer& tok)
      : spec(std::move(s)), sampler(spec.sampling), detok(tok, false), input(spec.prompt), stops(spec.stop_strings),
        history(spec.prompt), len(spec.speculative.k_max) {
    sampler.set_grammar(spec.grammar);
    detok.render_also(spec.render_tokens);
  }
  bool decoding() const { return n_past >= static_cast<int32_t>(input.size()); }
};

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    default: return "none";
  }
}

Expected<std::unique_ptr<Scheduler>> Scheduler::create(const Model& model, const SchedulerOptions& o) {
  if (o.n_parallel < 1 || o.n_parallel > KvCache::kMaxSeq)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "engine: n_parallel must be in [1, " + std::to_string(KvCache::kMaxSeq) + "]");
  if (o.n_batch < 1) return Error(KESTREL_ERR_INVALID_ARGUMENT, "engine: n_batch must be >= 1");
  std::unique_ptr<Scheduler> s(new Scheduler(model));
  ContextOptions co;
  co.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min(model.hparams().n_ctx_train, 4096);
  co.n_seq_max = o.n_parallel;
  co.n_batch = o.n_batch;
  co.n_threads = o.n_threads;
  co.kv_type = o.kv_type;
  co.kv_type_v = o.kv_type_v;
  auto ctx = Context::create(model, co);
  if (!ctx.ok()) return ctx.status();
  s->ctx_ = std::move(ctx.value());
  if (o.draft_model) {
    // The draft's cache mirrors the target's (prefix blocks shared the same way) plus each
    // sequence's draft and a partly filled block: a little more room than the target.
    ContextOptions dco = co;
    dco.n_ctx = co.n_ctx + o.n_parallel * 96;
    auto d = make_model_drafter(*o.draft_model, model, dco);
    if (!d.ok()) return d.status();
    s->draft_ = std::move(d.value());
  }
  s->n_ctx_ = co.n_ctx;
  s->n_parallel_ = o.n_parallel;
  s->n_batch_ = o.n_batch;
  for (int32_t i = o.n_parallel - 1; i >= 0; --i) s->free_seqs_.push_back(i);
  s->kv_stats_ = s->ctx_->kv().stats();
  s->worker_ = std::thread([p = s.get()] { p->loop(); });
  return s;
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (auto& [id, r] : live_) r->cancel = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Expected<uint64_t> Scheduler::submit(RequestSpec spec) {
  const int32_t n_vocab = model_.hparams().n_vocab;
  if (spec.prompt.empty()) return Error(KESTREL_ERR_INVALID_ARGUMENT, "request: the prompt has no tokens");
  for (size_t i = 0; i < spec.prompt.size(); ++i)
    if (spec.prompt[i] < 0 || spec.prompt[i] >= n_vocab)
      return Error(KESTREL_ERR_OUT_OF_RANGE, "request: prompt token " + std::to_string(i) + " (id " +
                                                 std::to_string(spec.prompt[i]) + ") is outside [0, " +
                                                 std::to_string(n_vocab) + ")");
  if (static_cast<int64_t>(spec.prompt.size()) + 1 > n_ctx_)
    return Error(KESTREL_ERR_CONTEXT_FULL, "request: the prompt has " + std::to_string(spec.prompt.size()) +
                                               " tokens, the context holds " + std::to_string(n_ctx_));
  if (spec.max_tokens < 1) return Error(KESTREL_ERR_INVALID_ARGUMENT, "request: max_tokens must be >= 1");
  KS_RETURN_IF_ERROR(validate(spec.sampling));
  if (spec.speculative.mode == SpecMode::kDraft && !draft_)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "request: speculative mode 'draft' needs an engine with a draft model");
  auto r = std::make_shared<Request>(std::move(spec), model_.tokenizer());
  for (int32_t t : r->spec.prompt) r->sampler.accept_prompt(t);
  if (r->spec.speculative.mode == SpecMode::kNgram) r->own_drafter = make_ngram_drafter(r->spec.speculative.ngram);
  r->drafter = r->spec.speculative.mode == SpecMode::kDraft ? draft_.get() : r->own_drafter.get();
  if (r->drafter) r->draft_sampler = draft_sampler_for(r->sampler);
  r->result.n_prompt = static_cast<int32_t>(r->spec.prompt.size());
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Error(KESTREL_ERR_CANCELLED, "engine: shutting down");
    id = r->id = next_id_++;
    waiting_.push_back(r);
    live_[id] = r;
    ++n_requests_;
  }
  work_cv_.notify_one();
  return id;
}

Status Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second->done)
    return Error(KESTREL_ERR_OUT_OF_RANGE, "engine: no running request " + std::to_string(id));
  it->second->cancel = true;
  work_cv_.notify_one();
  return Status::Ok();
}

Expected<RequestResult> Scheduler::wait(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return Error(KESTREL_ERR_OUT_OF_RANGE, "engine: no request " + std::to_string(id));
  std::shared_ptr<Request> r = it->second;
  done_cv_.wait(lock, [&] { return r->done; });
  live_.erase(id);
  return r->result;
}

std::string Scheduler::stats_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  const KvCache::Stats& k = kv_stats_;
  nlohmann::json j = {
      {"requests_total", n_requests_}, {"requests_finished", n_finished_},
      {"requests_waiting", static_cast<int64_t>(waiting_.size())}, {"requests_running", n_running_},
      {"requests_preempted", n_preempted_}, {"tokens_prompt", tok_prompt_}, {"tokens_cached", tok_cached_},
      {"tokens_generated", tok_generated_},
      {"speculative", {{"steps", spec_steps_}, {"drafted", spec_drafted_}, {"accepted", spec_accepted_}}},
      {"kv", {{"block_size", k.block_size}, {"blocks", k.blocks}, {"blocks_used", k.blocks_held},
              {"blocks_cached", k.blocks_cached}, {"blocks_free", k.blocks_free}}},
      {"prefix_cache_hit_rate",
       k.prefix_query_tokens > 0 ? static_cast<double>(k.prefix_hit_tokens) / static_cast<double>(k.prefix_query_tokens) : 0.0}};
  return j.dump();
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_ && running_.empty()) {
        for (auto& r : waiting_) r->cancel = true;
      }
    }
    step();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && running_.empty() && waiting_.empty()) return;
  }
}

// Gives r's sequence slot back: its cells go (full blocks stay in the prefix cache), the draft
// model's too.
void Scheduler::release_seq(Request& r) {
  if (r.seq < 0) return;
  (void)ctx_->kv().seq_remove(r.seq, 0, -1);
  if (r.drafter) r.drafter->release(r.seq);
  free_seqs_.push_back(r.seq);
  r.seq = -1;
}

void Scheduler::finish(Request& r, FinishReason why, Status st, bool flush_text) {
  if (trace::on()) {
    static const char* const kWhy[] = {"none", "stop", "length", "cancelled", "error"};
    trace::instant("scheduler", "finish", "{\"request\":" + std::to_string(r.id) + ",\"reason\":\"" +
                                              kWhy[static_cast<int>(why)] + "\",\"generated\":" +
                                              std::to_string(r.generated.size()) + "}");
  }
  release_seq(r);
  if (flush_text && (why == FinishReason::Stop || why == FinishReason::Length)) {
    // The detokenizer's incomplete tail (U+FFFD), still matched against the stop strings, and
    // the text held back for them.
    std::string rest = r.stops.push(r.detok.flush());
    rest += r.stops.take_held();
    if (!rest.empty() && r.spec.on_token) r.spec.on_token(-1, rest);
  }
  r.result.finish = why;
  r.result.status = std::move(st);
  r.result.stop_index = r.stops.matched();
  r.result.n_generated = static_cast<int32_t>(r.generated.size());
  r.draft.clear();
  {  // the totals first, so that stats read from on_done (or right after it) include r
    std::lock_guard<std::mutex> lock(mu_);
    kv_stats_ = ctx_->kv().stats();
    n_running_ = static_cast<int32_t>(std::count_if(running_.begin(), running_.end(), [&](const auto& p) {
      return p.get() != &r && !p->done;
    }));
    ++n_finished_;
    tok_generated_ += r.result.n_generated;
    spec_steps_ += r.result.spec.steps;
    spec_drafted_ += r.result.spec.drafted;
    spec_accepted_ += r.result.spec.accepted;
  }
  if (r.spec.on_done) r.spec.on_done(r.result);
  std::lock_guard<std::mutex> lock(mu_);
  r.done = true;
  if (r.spec.on_done) live_.erase(r.id);
  done_cv_.notify_all();
}

void Scheduler::admit() {
  std::vector<std::shared_ptr<Request>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->cancel) cancelled.push_back(*it), it = waiting_.erase(it);
      else ++it;
    }
  }
  for (auto& r : cancelled) finish(*r, FinishReason::Cancelled);
  while (static_cast<int32_t>(running_.size()) < n_parallel_ && !free_seqs_.empty()) {
    std::shared_ptr<Request> r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) break;
      r = waiting_.front();
      waiting_.pop_front();
    }
    r->seq = free_seqs_.back();
    free_seqs_.pop_back();
    r->n_past = ctx_->kv().attach_prefix(r->seq, r->input);
    // Admission by free blocks: the rest of its input and one more block must fit now.
    const KvCache::Stats ks = ctx_->kv().stats();
    const int32_t need = (static_cast<int32_t>(r->input.size()) - r->n_past) / ks.block_size + 1;
    if (!running_.empty() && ks.blocks_free + ks.blocks_cached < need) {
      release_seq(*r);
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.push_front(r);
      break;
    }
    if (trace::on())
      trace::instant("scheduler", "admit", "{\"request\":" + std::to_string(r->id) + ",\"tokens\":" +
                                               std::to_string(r->input.size()) + ",\"cached\":" +
                                               std::to_string(r->n_past) + "}");
    if (!r->admitted_once) {
      r->admitted_once = true;
      r->result.n_cached = r->n_past;
      r->result.queue_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r->submitted).count();
      std::lock_guard<std::mutex> lock(mu_);
      tok_prompt_ += r->result.n_prompt;
      tok_cached_ += r->n_past;
    }
    running_.push_back(r);
  }
}

// Frees KV blocks for the batch by preempting the most recently admitted request (recompute).
bool Scheduler::preempt_for(const std::vector<int32_t>& seqs) {
  if (ctx_->kv().can_claim(seqs).ok()) return true;
  if (running_.size() <= 1) return false;
  std::shared_ptr<Request> v = running_.back();
  running_.pop_back();
  if (trace::on()) trace::instant("scheduler", "preempt", "{\"request\":" + std::to_string(v->id) + "}");
  release_seq(*v);
  v->input = v->spec.prompt;
  v->input.insert(v->input.end(), v->generated.begin(), v->generated.end());
  v->n_past = 0;
  v->replay.clear();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.push_front(v);
  ++n_preempted_;
  return false;
}

// Proposals for this step: every decoding request that speculates gets up to len.k tokens (no
// more than it may still generate, less one); the draft model's requests in one batched call.
void Scheduler::draft_all() {
  trace::Span span("speculative", "draft");
  std::vector<DraftRequest> model_reqs;
  std::vector<Request*> model_owners;
  for (auto& r : running_) {
    r->draft.clear();
    if (!r->drafter || !r->decoding() || !r->replay.empty()) continue;
    const int32_t k = std::min(r->len.k, r->spec.max_tokens - static_cast<int32_t>(r->generated.size()) - 1);
    if (k <= 0) continue;
    const DraftRequest req{.seq = r->seq, .history = r->history, .k = k, .sampler = r->draft_sampler.get()};
    if (r->drafter == draft_.get()) {
      model_reqs.push_back(req);
      model_owners.push_back(r.get());
    } else {
      (void)r->drafter->propose({&req, 1}, {&r->draft, 1});
    }
  }
  if (model_reqs.empty()) return;
  std::vector<Draft> out(model_reqs.size());
  (void)draft_->propose(model_reqs, out);  // a drafter that fails proposes nothing
  for (size_t i = 0; i < out.size(); ++i) model_owners[i]->draft = std::move(out[i]);
}

bool Scheduler::step() {
  trace::Span span("engine", "step");
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->cancel) {
      std::shared_ptr<Request> r = running_[i];
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      finish(*r, FinishReason::Cancelled);
    } else {
      ++i;
    }
  }
  admit();
  if (running_.empty()) {
    span.drop();
    std::lock_guard<std::mutex> lock(mu_);
    n_running_ = 0;
    kv_stats_ = ctx_->kv().stats();
    return false;
  }
  draft_all();

  std::vector<int32_t> tokens, pos, seqs;
  std::vector<bool> want;
  std::vector<Request*> row_req;  // the request a logits row samples for (the first row of a draft's)
  std::vector<char> row_decodes;  // that row is a decoding request's (verify), not a prompt's end
  for (bool with_drafts = true;;) {
    tokens.clear(), pos.clear(), seqs.clear(), want.clear(), row_req.clear(), row_decodes.clear();
    int32_t budget = n_batch_;
    // Every decoding request's next token (and its draft) first, then prompt chunks in
    // admission order.
    for (auto& r : running_) {
      const int32_t n_replay = static_cast<int32_t>(r->replay.size());
      if (!r->decoding() || budget <= n_replay) continue;
      if (!with_drafts || n_replay > 0) r->draft.clear();
      for (int32_t i = 0; i < n_replay; ++i) {
        tokens.push_back(r->replay[static_cast<size_t>(i)]);
        pos.push_back(r->n_past + i);
        seqs.push_back(r->seq);
        want.push_back(false);
        row_req.push_back(nullptr);
        row_decodes.push_back(0);
      }
      budget -= n_replay;
      if (static_cast<int32_t>(r->draft.tokens.size()) > budget - 1) r->draft.tokens.resize(static_cast<size_t>(budget - 1));
      if (!r->draft.q.empty()) r->draft.q.resize(r->draft.tokens.size());
      for (size_t i = 0; i <= r->draft.tokens.size(); ++i) {
        tokens.push_back(i == 0 ? r->generated.back() : r->draft.tokens[i - 1]);
        pos.push_back(r->n_past + n_replay + static_cast<int32_t>(i));
        seqs.push_back(r->seq);
        want.push_back(true);
        row_req.push_back(i == 0 ? r.get() : nullptr);
        row_decodes.push_back(1);
        --budget;
      }
    }
    for (auto& r : running_) {
      const int32_t left = static_cast<int32_t>(r->input.size()) - r->n_past;
      if (left <= 0 || budget == 0) continue;
      const int32_t n = std::min(left, budget);
      for (int32_t i = 0; i < n; ++i) {
        tokens.push_back(r->input[static_cast<size_t>(r->n_past + i)]);
        pos.push_back(r->n_past + i);
        seqs.push_back(r->seq);
        want.push_back(i == left - 1);
        row_req.push_back(i == left - 1 ? r.get() : nullptr);
        row_decodes.push_back(0);
      }
      budget -= n;
    }
    if (ctx_->kv().can_claim(seqs).ok()) break;
    if (with_drafts) {  // out of blocks: first no speculation this step, then preemption
      with_drafts = false;
      continue;
    }
    if (preempt_for(seqs)) break;
    if (running_.size() == 1 && !ctx_->kv().can_claim(seqs).ok()) {
      std::shared_ptr<Request> r = running_.front();
      running_.clear();
      finish(*r, FinishReason::Length);  // the context is full with this request alone
      return true;
    }
  }
  if (tokens.empty()) return true;
  if (ctx_->kv().recurrent()) {  // what a rejected draft rolls back to
    for (auto& r : running_) {
      if (!r->decoding() || r->draft.tokens.empty()) continue;
      const Status cs = ctx_->kv().checkpoint(r->seq);
      if (!cs.ok()) r->draft.clear();  // no room for checkpoints: no speculation (its row stays)
    }
  }
  if (trace::on()) {  // the batch's composition
    int32_t decoding = 0;
    for (auto& r : running_) decoding += r->decoding() ? 1 : 0;
    span.set_args("{\"tokens\":" + std::to_string(tokens.size()) + ",\"sequences\":" + std::to_string(running_.size()) +
                  ",\"decoding\":" + std::to_string(decoding) + ",\"prefilling\":" +
                  std::to_string(running_.size() - static_cast<size_t>(decoding)) + "}");
  }
  std::unique_ptr<bool[]> want_arr(new bool[want.size()]);
  for (size_t i = 0; i < want.size(); ++i) want_arr[i] = want[i];
  const Status st = ctx_->decode({.tokens = tokens, .positions = pos, .seq_ids = seqs,
                                  .want_logits = {want_arr.get(), want.size()}, .top_k = ctx_->top_k_for(best_needed(row_req))});
  if (!st.ok()) {
    std::vector<std::shared_ptr<Request>> all;
    all.swap(running_);
    for (auto& r : all) finish(*r, FinishReason::Error, st);
    return true;
  }
  // Bookkeeping, then sampling (or verification) in batch order.
  for (auto& r : running_) {
    if (r->decoding()) {  // decoding requests advance by their replay and what verification keeps
      if (!r->replay.empty() && std::count(seqs.begin(), seqs.end(), r->seq) > 0) {
        r->n_past += static_cast<int32_t>(r->replay.size());
        r->replay.clear();
      }
      continue;
    }
    r->n_past += static_cast<int32_t>(std::count(seqs.begin(), seqs.end(), r->seq));
  }
  for (size_t i = 0; i < row_req.size(); ++i) {
    Request* r = row_req[i];
    if (!r) continue;
    if (row_decodes[i]) {
      verify_drafts(*r, static_cast<int32_t>(i));  // no draft: plain sampling from the one row
      continue;
    }
    auto l = ctx_->row(static_cast<int32_t>(i));
    if (l.ok()) emit(*r, l.value());
  }
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->done) running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    else ++i;
  }
  std::lock_guard<std::mutex> lock(mu_);
  n_running_ = static_cast<int32_t>(running_.size());
  kv_stats_ = ctx_->kv().stats();
  return true;
}

int32_t Scheduler::best_needed(const std::vector<Request*>& row_req) {
  int32_t k = 1;
  for (const Request* r : row_req) {
    if (!r) continue;
    const int32_t need = r->spec.on_logits ? 0 : r->sampler.best_needed();
    if (need == 0) return 0;
    k = std::max(k, need);
  }
  return k;
}

// r's last token and draft were decoded from batch row first_row on: verify, keep the accepted
// drafts in the cache (the rest goes), deliver the emitted tokens.
void Scheduler::verify_drafts(Request& r, int32_t first_row) {
  const size_t k = r.draft.tokens.size();
  std::vector<LogitRow> rows;
  for (size_t i = 0; i <= k; ++i) {
    auto l = ctx_->row(first_row + static_cast<int32_t>(i));
    if (!l.ok()) return finish(r, FinishReason::Error, l.status());
    rows.push_back(l.value());
  }
  VerifyResult vr;
  trace::Span span("speculative", "verify");
  Status st = verify(r.sampler, rows, r.draft, &vr);
  if (!st.ok()) return finish(r, FinishReason::Error, st);
  if (trace::on())
    span.set_args("{\"request\":" + std::to_string(r.id) + ",\"drafted\":" + std::to_string(k) +
                  ",\"accepted\":" + std::to_string(vr.n_accepted) + "}");
  if (ctx_->kv().recurrent() && vr.n_accepted < static_cast<int32_t>(k)) {
    st = ctx_->kv().seq_remove(r.seq, r.n_past, -1);  // back to the checkpoint: replay what stays
    r.replay.assign(1, r.generated.back());
    r.replay.insert(r.replay.end(), r.draft.tokens.begin(), r.draft.tokens.begin() + vr.n_accepted);
  } else {
    r.n_past += 1 + vr.n_accepted;
    st = ctx_->kv().seq_remove(r.seq, r.n_past, -1);
  }
  if (!st.ok()) return finish(r, FinishReason::Error, st);
  if (k > 0) {
    ++r.result.spec.steps;
    r.result.spec.drafted += static_cast<int32_t>(k);
    r.result.spec.accepted += vr.n_accepted;
    r.len.update(static_cast<int32_t>(k), vr.n_accepted);
  }
  r.draft.clear();
  for (size_t i = 0; i < vr.tokens.size(); ++i)
    if (!deliver(r, vr.tokens[i], rows[i])) return;
}

// Samples the next token of r from logits and delivers it.
void Scheduler::emit(Request& r, const LogitRow& logits) {
  auto next = r.sampler.sample(logits);
  if (!next.ok()) return finish(r, FinishReason::Error, next.status());
  r.sampler.accept(next.value());
  deliver(r, next.value(), logits);
}

// Streams token t of r (sampled from logits); finishes r on a stop condition (then false).
bool Scheduler::deliver(Request& r, int32_t t, const LogitRow& logits) {
  if (r.spec.on_logits) r.spec.on_logits(logits.all);  // whole rows: best_needed() saw the callback
  r.generated.push_back(t);
  r.history.push_back(t);
  const Tokenizer& tok = model_.tokenizer();
  const bool eog = r.spec.stop_at_eog && tok.is_eog(t);
  const bool stop_tok = std::find(r.spec.stop_tokens.begin(), r.spec.stop_tokens.end(), t) != r.spec.stop_tokens.end();
  if (eog || stop_tok) {
    const bool go_on = !r.spec.on_token || r.spec.on_token(t, "");
    finish(r, go_on ? FinishReason::Stop : FinishReason::Cancelled);
    return false;
  }
  // A stop string ends the text before it; otherwise all but a tail that could still grow into
  // one is emitted.
  const std::string out = r.stops.push(r.detok.push(t));
  if (r.stops.stopped()) {
    if (r.spec.on_token && !r.spec.on_token(t, out)) {
      finish(r, FinishReason::Cancelled);
    } else {
      finish(r, FinishReason::Stop, Status::Ok(), /*flush_text=*/false);  // the rest follows the stop string
    }
    return false;
  }
  if (r.spec.on_token && !r.spec.on_token(t, out)) {
    finish(r, FinishReason::Cancelled);
    return false;
  }
  if (static_cast<int32_t>(r.generated.size()) >= r.spec.max_tokens) {
    finish(r, FinishReason::Length);
    return false;
  }
  return true;
}

}  // namespace kestrel
