// The shapes `kestrel synth` writes and `kestrel perf --preset` predicts: real models' published
// shapes (metadata keys without the architecture's prefix), and every architecture's tiny test
// shape.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "model/arch.h"

namespace kestrel::cli {

struct SynthShape {
  const ArchDef* arch = nullptr;
  std::vector<std::pair<std::string, gguf::Value>> kv;
  int32_t n_vocab = 64;                // a tiny shape's synthetic vocabulary
  const char* architecture = nullptr;  // general.architecture when an alias (nemotron_h_moe)
};

// A preset or tiny shape by name; UsageError naming `kestrel synth --list` when there is none.
SynthShape find_synth_shape(const std::string& name);
// `kestrel synth --list`: the presets and the tiny shapes.
void print_synth_shapes();

}  // namespace kestrel::cli
