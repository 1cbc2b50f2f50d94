// The continuous-batching scheduler: requests enter a queue; a worker thread runs steps, each one
// decode batch holding the next token of every running request plus prefill chunks of the ones
// still reading their prompt, under a token budget (chunked prefill). A request is admitted when a
// sequence slot is free; its prompt first attaches whatever the KV prefix cache holds. When the
// KV blocks run out, the most recently admitted request is preempted: its cells are dropped and
// it re-queues with prompt + generated tokens (recompute; its published blocks usually come back
// from the prefix cache). Cancellation is honoured at the next step. Requests that speculate put
// their last token and a draft into the step's batch (every drafting request's draft in one
// target pass), keep what verification accepts and roll their cache back past the rest.
// Callbacks run on the worker thread; submit/cancel/wait/stats may be called from any thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/context.h"
#include "sampling/sampler.h"
#include "speculative/drafter.h"

namespace kestrel {

enum class FinishReason { None, Stop, Length, Cancelled, Error };

struct RequestResult {
  FinishReason finish = FinishReason::None;
  Status status;             // the error, for FinishReason::Error
  int32_t n_prompt = 0;      // prompt tokens
  int32_t n_cached = 0;      // of those, taken from the prefix cache
  int32_t n_generated = 0;
  SpecStats spec;            // speculative decoding: drafted and accepted tokens
  int32_t stop_index = -1;   // the stop string that ended it (its index in RequestSpec::stop_strings)
  double queue_s = 0;        // from submit to its first admission into a batch (0: never admitted)
};

struct RequestSpec {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 128;
  SamplerParams sampling;
  bool stop_at_eog = true;
  std::vector<int32_t> stop_tokens;
  std::vector<std::string> stop_strings;  // generation ends before the first match; text not emitted
  SpecParams speculative;                  // kDraft needs an engine with a draft model
  std::shared_ptr<GrammarMatcher> grammar; // constrained decoding (this request's own matcher); null: none
  std::vector<int32_t> render_tokens;      // special tokens whose text the output shows (a chat family's markers)
  // Per generated token: its id and the text that became final (stop strings held back); false
  // cancels the request. id -1: the last text at the end.
  std::function<bool(int32_t token, const std::string& piece)> on_token;
  // The logits each token was sampled from (e.g. to check batch invariance).
  std::function<void(std::span<const float> logits)> on_logits;
  std::function<void(const RequestResult&)> on_done;  // then the request is forgotten (no wait)
};

struct SchedulerOptions {
  int32_t n_ctx = 0;       // KV cells shared by all requests; 0: min(model's context, 4096)
  int32_t n_parallel = 4;  // requests decoding at once (sequence slots)
  int32_t n_batch = 256;   // token budget per step
  int n_threads = 0;
  // Drafts for kDraft requests: a smaller model with the same vocabulary, decoded in its own
  // context (same n_ctx and slots), all drafting requests batched. Must outlive the scheduler.
  const Model* draft_model = nullptr;
  DType kv_type = DType::F16;  // ContextOptions::kv_type(_v), for the target and the draft
  std::optional<DType> kv_type_v;
};

class Scheduler {
 public:
  static Expected<std::unique_ptr<Scheduler>> create(const Model& model, const SchedulerOptions& opts);
  ~Scheduler();  // cancels everything and joins the worker

  Expected<uint64_t> submit(RequestSpec spec);
  Status cancel(uint64_t id);                // NOT_FOUND when unknown or already finished
  Expected<RequestResult> wait(uint64_t id);  // blocks until it finishes; then forgets it
  std::string stats_json() const;            // queue, running, tokens, KV blocks, prefix hits
  int32_t n_ctx() const { return n_ctx_; }
  const Model& model() const { return model_; }

 private:
  struct Request;
  explicit Scheduler(const Model& m) : model_(m) {}
  void loop();
  bool step();  // false when there was nothing to run
  void admit();
  void finish(Request& r, FinishReason why, Status st = Status::Ok(), bool flush_text = true);
  void emit(Request& r, const LogitRow& logits);
  bool deliver(Request& r, int32_t token, const LogitRow& logits);  // false: r finished
  // The best logits per row the step's sampling needs (0: whole rows), over the requests of the
  // rows that want logits (a logits callback needs whole rows).
  static int32_t best_needed(const std::vector<Request*>& row_req);
  void draft_all();  // drafts for every decoding request that speculates
  void verify_drafts(Request& r, int32_t first_row);
  void release_seq(Request& r);
  bool preempt_for(const std::vector<int32_t>& seqs);

  const Model& model_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Drafter> draft_;  // the draft model's, when there is one
  int32_t n_ctx_ = 0, n_parallel_ = 0, n_batch_ = 0;
  std::thread worker_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::deque<std::shared_ptr<Request>> waiting_;              // mu_
  std::unordered_map<uint64_t, std::shared_ptr<Request>> live_;  // mu_: submitted, not yet forgotten
  std::vector<std::shared_ptr<Request>> running_;             // worker only
  std::vector<int32_t> free_seqs_;                            // worker only
  // Counters (mu_), published by the worker after each step.
  int64_t n_requests_ = 0, n_finished_ = 0, tok_prompt_ = 0, tok_cached_ = 0, tok_generated_ = 0, n_preempted_ = 0;
  int64_t spec_steps_ = 0, spec_drafted_ = 0, spec_accepted_ = 0;
  int32_t n_running_ = 0;
  KvCache::Stats kv_stats_;
};

const char* finish_reason_name(FinishReason r);

}  // namespace kestrel
