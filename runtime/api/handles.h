// What the opaque C handles hold.
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chat/chat_reply.h"
#include "engine/context.h"
#include "kestrel.h"
#include "model/model.h"
#include "sampling/grammar_matcher.h"
#include "sampling/sampler.h"
#include "speculative/drafter.h"
#include "tokenizer/tokenizer.h"

struct kestrel_model {
  std::unique_ptr<kestrel::Model> model;
};
struct kestrel_context {
  const kestrel_model* owner;
  std::unique_ptr<kestrel::Context> ctx;
};
struct kestrel_sampler {
  std::unique_ptr<kestrel::Sampler> sampler;
};
struct kestrel_detokenizer {
  std::unique_ptr<kestrel::StreamingDetokenizer> detok;
  std::string pending;  // text not yet delivered (the caller's buffer was too small)
};

// A chat reply's family, tools and grammar (api_reply.cpp), and its text so far.
struct kestrel_reply_parser {
  kestrel::ChatSyntax syntax;
  kestrel::ReplyOptions opts;
  nlohmann::ordered_json tools;
  std::string grammar;
  std::string text;            // generated so far
  kestrel::ChatReply shown;    // what the deltas have given
  std::vector<std::string> ids;
  std::mt19937_64 rng{std::random_device{}()};
  std::string pending;         // a delta the caller's buffer could not take
  bool done = false;
};

namespace kestrel::api {
SamplerParams to_sampler_params(const kestrel_sampler_options& o);
// The logit-bias arrays: n_logit_bias >= 0, and both arrays given when it is > 0.
Status check_logit_bias(const char* fn, const kestrel_sampler_options& o);
// NULL gives the defaults (no speculation); bad values a message naming them.
Status to_spec_params(const kestrel_spec_options* in, SpecParams* out);
// The DType of a kestrel_kv_type; INVALID_ARGUMENT naming `where` and `field` for a value outside
// the enum.
Status to_kv_type(int32_t in, const char* where, DType* out, const char* field = "kv_type");
// K's and V's (kv_type_v -1: unset, V as K).
Status to_kv_types(int32_t k, int32_t v, const char* where, DType* k_out, std::optional<DType>* v_out);
void write_spec_stats(const SpecStats& s, kestrel_spec_stats* out);
// A caller's (strings, n) stop-string array, copied; a NULL array or entry is an error naming fn.
Status to_stop_strings(const char* fn, const char* const* in, int32_t n, std::vector<std::string>* out);
// The matcher of a grammar or a JSON schema (at most one; both NULL: *out stays null).
Status to_grammar(const char* fn, const char* grammar, const char* json_schema, const Tokenizer& tok,
                  std::shared_ptr<GrammarMatcher>* out);
// The same, or the grammar of a forced tool call when reply has one (markers: its family's marker
// tokens, allowed as their text); a forced call beside a grammar or a schema is an error naming fn.
Status to_grammar(const char* fn, const char* grammar, const char* json_schema, const kestrel_reply_parser* reply,
                  const std::vector<int32_t>& markers, const Tokenizer& tok, std::shared_ptr<GrammarMatcher>* out);
// The chat template a call uses: the caller's, else the model's GGUF key, else the fallback.
std::string chat_template_source(const kestrel_model* model, const kestrel_chat_options& o);
}
