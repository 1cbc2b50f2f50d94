#include "model/shape.h"

namespace kestrel {

uint64_t ModelShape::weight_bytes() const {
  uint64_t n = 0;
  for (const ShapeTensor& t : tensors) n += t.bytes;
  return n;
}

ModelShape finish_shape(const ArchDef& arch, HParams hp, std::vector<ShapeTensor> tensors) {
  ModelShape s;
  hp.rope.mode = arch.rope_mode;
  s.arch = &arch;
  s.kv = arch.kv_layout ? arch.kv_layout(hp) : default_kv_layout(hp);
  for (int l = 0; l < hp.n_layer; ++l) s.window.push_back(arch.layer_window ? arch.layer_window(hp, l) : 0);
  s.hp = std::move(hp);
  s.tensors = std::move(tensors);
  return s;
}

Expected<ModelShape> model_shape(const gguf::File& f) {
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata 'general.architecture' is missing");
  const ArchDef* arch = find_arch(*arch_name);
  if (!arch) return Error(KESTREL_ERR_UNSUPPORTED, f.path() + ": unsupported architecture '" + *arch_name + "'");
  auto hp = read_hparams(f, *arch_name);
  if (!hp.ok()) return hp.status();
  std::vector<ShapeTensor> tensors;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    ShapeTensor t{ti.name, ti.type, std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims), ti.nbytes};
    // The vocabulary when the metadata leaves it out: the embedding's rows (as Model::init reads it).
    if (ti.name == "token_embd.weight" && hp.value().n_vocab == 0 && ti.n_dims >= 2)
      hp.value().n_vocab = static_cast<int32_t>(ti.ne[1]);
    tensors.push_back(std::move(t));
  }
  return finish_shape(*arch, std::move(hp.value()), std::move(tensors));
}

}  // namespace kestrel
