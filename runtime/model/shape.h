// A model's shape without its weights: hyper-parameters, the KV cache layout, each layer's
// attention window, and every tensor's type and size. What the performance model (`kestrel perf`)
// counts bytes and FLOPs from, for a GGUF on disk (its header only) or a preset never written
// (synth.h: synth_shape).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/hparams.h"
#include "tensor/dtype.h"

namespace kestrel {

struct ShapeTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<int64_t> ne;
  uint64_t bytes = 0;
};

struct ModelShape {
  HParams hp;
  const ArchDef* arch = nullptr;
  KvLayout kv;                  // what Kestrel's cache holds per token (every layer, every position)
  std::vector<int32_t> window;  // per layer: its attention window (0: the whole context)
  std::vector<ShapeTensor> tensors;
  uint64_t weight_bytes() const;
};

// The shape of the model in f: its header and tensor table (no tensor data is read).
Expected<ModelShape> model_shape(const gguf::File& f);
// hp and tensors of an architecture filled in with its KV layout and windows.
ModelShape finish_shape(const ArchDef& arch, HParams hp, std::vector<ShapeTensor> tensors);

}  // namespace kestrel
