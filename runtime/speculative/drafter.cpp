#include "speculative/drafter.h"

namespace kestrel {

std::unique_ptr<Sampler> draft_sampler_for(const Sampler& target) {
  if (target.params().temperature <= 0) return nullptr;
  SamplerParams p = target.params();
  p.seed ^= 0x5DEECE66Dull;
  p.repeat_penalty = 1.0f, p.presence_penalty = 0, p.frequency_penalty = 0;
  return std::make_unique<Sampler>(p);
}

}  // namespace kestrel
