// Speculative decoding's C boundary: options in, statistics out.
#include <cstring>

#include "api/guard.h"
#include "api/handles.h"

namespace kestrel::api {

Status to_spec_params(const kestrel_spec_options* in, SpecParams* out) {
  kestrel_spec_options o;
  kestrel_spec_options_init(&o);
  const char* err = nullptr;
  if (!read_options(in, &o, &err)) return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("speculative: ") + err);
  // The enum's bytes as an integer: a C caller may pass any value, which C++ may not load as
  // the enum type.
  int32_t mode = 0;
  static_assert(sizeof o.mode == sizeof mode);
  std::memcpy(&mode, &o.mode, sizeof mode);
  switch (mode) {
    case KESTREL_SPEC_NONE: out->mode = SpecMode::kNone; break;
    case KESTREL_SPEC_DRAFT: out->mode = SpecMode::kDraft; break;
    case KESTREL_SPEC_NGRAM: out->mode = SpecMode::kNgram; break;
    default:
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "speculative: mode " + std::to_string(mode) + " is not a kestrel_spec_mode");
  }
  if (o.k_max < 1 || o.k_max > 64)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "speculative: k_max must be in [1, 64] (got " + std::to_string(o.k_max) + ")");
  if (o.ngram_min < 1 || o.ngram_max < o.ngram_min || o.ngram_max > 64)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "speculative: need 1 <= ngram_min <= ngram_max <= 64 (got " +
                                                   std::to_string(o.ngram_min) + ", " + std::to_string(o.ngram_max) + ")");
  out->k_max = o.k_max;
  out->ngram = {o.ngram_min, o.ngram_max};
  return Status::Ok();
}

void write_spec_stats(const SpecStats& s, kestrel_spec_stats* out) {
  if (!out) return;
  kestrel_spec_stats v{};
  v.struct_size = sizeof v;
  v.n_steps = s.steps;
  v.n_drafted = s.drafted;
  v.n_accepted = s.accepted;
  write_out(v, out, sizeof v);
}

}  // namespace kestrel::api

extern "C" {

void kestrel_spec_options_init(kestrel_spec_options* o) {
  if (!o) return;
  *o = kestrel_spec_options{};
  o->struct_size = sizeof *o;
  o->mode = KESTREL_SPEC_NONE;
  o->k_max = 8;
  o->ngram_min = 1;
  o->ngram_max = 3;
}

}  // extern "C"
