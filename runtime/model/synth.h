// Random-weight models of any registered architecture, built with the GGUF writer: the metadata
// of a TinyConfig (or any configuration, e.g. a real model's shape for benchmarks), a tiny
// SentencePiece vocabulary, and random values for every tensor the architecture's bind() asks
// for. The synthetic-model test and benchmarks use it; nothing is downloaded.
#pragma once
#include <cstdint>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/shape.h"
#include "tensor/dtype.h"

namespace kestrel {

struct SynthOptions {
  // Type of the matrices (2-D and up) that have a reference quantizer; a row length the type's
  // block does not divide gets llama-quantize's fallback type, and 1-D tensors and routers stay
  // F32 (as llama-quantize leaves them).
  DType weight_type = DType::F32;
  uint32_t seed = 1;
  int32_t n_vocab = 64;
  int n_threads = 1;  // threads that quantize the rows
  // A real vocabulary: this file's tokenizer.* keys replace the synthetic one (and n_vocab), so
  // that what depends on token text (grammars, the tokenizer) is measured at a real model's size.
  const gguf::File* vocab_from = nullptr;
  // general.architecture and the keys' prefix: an alias of arch (e.g. "nemotron_h_moe", which
  // llama.cpp tells apart); nullptr: arch's own name.
  const char* architecture = nullptr;
};

// A GGUF holding config's metadata and random weights (write() it or to_bytes() it).
Expected<gguf::Writer> synth_model(const ArchDef& arch, const TinyConfig& config, const SynthOptions& o);
// The shape synth_model would write (every tensor typed as it would be), without the weights:
// a real model's size costs nothing (kestrel perf --preset).
Expected<ModelShape> synth_shape(const ArchDef& arch, const TinyConfig& config, const SynthOptions& o);

}  // namespace kestrel
