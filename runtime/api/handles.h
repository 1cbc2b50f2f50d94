// What the opaque C handles hold.
#pragma once
#include <memory>

#include "engine/context.h"
#include "kestrel.h"
#include "model/model.h"
#include "sampling/sampler.h"
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

namespace kestrel::api {
SamplerParams to_sampler_params(const kestrel_sampler_options& o);
}
