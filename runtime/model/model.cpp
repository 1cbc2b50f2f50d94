#include "model/model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

namespace kestrel {
namespace {

std::string layer_name(const std::string& name, int layer) {
  if (layer < 0) return name;
  char buf[256];
  std::snprintf(buf, sizeof buf, name.c_str(), layer);
  return buf;
}

}  // namespace

Expected<std::unique_ptr<Model>> Model::load(const std::string& path, const ModelLoadOptions& opts) {
  auto file = gguf::File::open(path, opts.use_mmap);
  if (!file.ok()) return file.status();
  return from_file(std::move(file.value()), opts);
}

Expected<std::unique_ptr<Model>> Model::from_file(std::unique_ptr<gguf::File> file, const ModelLoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->opts_ = opts;
  KS_RETURN_IF_ERROR(m->init());
  return m;
}

Status Model::init() {
  const gguf::File& f = *file_;
  auto arch_name = f.get_string("general.architecture");
  if (!arch_name) return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata 'general.architecture' is missing");
  if (opts_.vocab_only) {
    auto tok = Tokenizer::from_gguf(f);
    if (!tok.ok()) return tok.status();
    tokenizer_ = std::move(tok.value());
    hp_.arch = *arch_name;
    hp_.n_vocab = tokenizer_->n_vocab();
    return Status::Ok();
  }
  arch_ = find_arch(*arch_name);
  if (!arch_) {
    std::string names;
    for (const ArchDef* a : all_archs()) names += (names.empty() ? "" : ", ") + std::string(a->name);
    return Error(KESTREL_ERR_UNSUPPORTED,
                 f.path() + ": unsupported architecture '" + *arch_name + "' (supported: " + names + ")");
  }
  auto hp = read_hparams(f, *arch_name);
  if (!hp.ok()) return hp.status();
  hp_ = hp.value();
  hp_.rope.mode = arch_->rope_mode;

  auto tok = Tokenizer::from_gguf(f);
  if (!tok.ok()) return tok.status();
  tokenizer_ = std::move(tok.value());
  if (hp_.n_vocab == 0) hp_.n_vocab = tokenizer_->n_vocab();

  const size_t n_tensors = f.tensors().size();
  size_t done = 0;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    Tensor t = make_tensor(ti.type, ti.ne[0], ti.ne[1], ti.ne[2], ti.ne[3],
                           const_cast<uint8_t*>(f.tensor_data(ti)));
    t.name = ti.name;
    weight_bytes_ += ti.nbytes;
    n_params_ += static_cast<uint64_t>(ti.n_elements());
    tensors_.emplace(ti.name, std::move(t));
    if (opts_.progress) {
      // Touch the pages now (mmap is lazy), so the progress bar means something.
      volatile uint8_t sink = 0;
      const uint8_t* p = f.tensor_data(ti);
      for (size_t off = 0; off < ti.nbytes; off += 4096) sink = sink ^ p[off];
      (void)sink;
      if (!opts_.progress(static_cast<float>(++done) / static_cast<float>(n_tensors), opts_.progress_user))
        return Error(KESTREL_ERR_CANCELLED, f.path() + ": loading cancelled");
    }
  }
  return arch_->bind(*this, weights_);
}

Expected<const Tensor*> Model::optional(const std::string& pattern, std::vector<int64_t> ne, int layer) const {
  const std::string name = layer_name(pattern, layer);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return static_cast<const Tensor*>(nullptr);
  const Tensor& t = it->second;
  for (size_t i = 0; i < ne.size() && i < 4; ++i) {
    if (ne[i] >= 0 && t.ne[i] != ne[i]) {
      std::string want = "[";
      for (size_t j = 0; j < ne.size(); ++j) want += (j ? ", " : "") + std::to_string(ne[j]);
      return Error(KESTREL_ERR_FORMAT, file_->path() + ": tensor '" + name + "' has shape " +
                                           t.shape_string() + ", expected " + want + "]");
    }
  }
  return &t;
}

Expected<const Tensor*> Model::require(const std::string& pattern, std::vector<int64_t> ne, int layer) const {
  auto t = optional(pattern, std::move(ne), layer);
  if (t.ok() && t.value() == nullptr)
    return Error(KESTREL_ERR_FORMAT, file_->path() + ": tensor '" + layer_name(pattern, layer) + "' is missing");
  return t;
}

std::string Model::describe_json() const {
  using nlohmann::json;
  const HParams& h = hp_;
  json tensors = json::array();
  std::map<std::string, uint64_t> bytes_by_type;
  for (const gguf::TensorInfo& ti : file_->tensors()) {
    json ne = json::array();
    for (uint32_t i = 0; i < ti.n_dims; ++i) ne.push_back(ti.ne[i]);
    tensors.push_back({{"name", ti.name}, {"type", dtype_name(ti.type)}, {"shape", ne}, {"bytes", ti.nbytes}});
    bytes_by_type[dtype_name(ti.type)] += ti.nbytes;
  }
  const uint64_t kv_per_token = static_cast<uint64_t>(h.n_layer) * (h.k_row() + h.v_row()) * 2;  // F16
  // Scratch of one decode step of 512 tokens: the widest live activations plus the logits.
  const uint64_t per_token = 4ull * (4ull * h.n_embd + 3ull * std::max(h.n_ff, h.n_embd) +
                                     static_cast<uint64_t>(h.n_head) * (h.head_dim_k + h.head_dim_v) + 2 * h.k_row());
  json j = {
      {"architecture", h.arch},
      {"name", file_->get_string("general.name").value_or("")},
      {"file", file_->path()},
      {"gguf_version", file_->version()},
      {"hparams",
       {{"n_vocab", h.n_vocab}, {"n_ctx_train", h.n_ctx_train}, {"n_embd", h.n_embd}, {"n_layer", h.n_layer},
        {"n_head", h.n_head}, {"n_head_kv", h.n_head_kv}, {"head_dim_k", h.head_dim_k},
        {"head_dim_v", h.head_dim_v}, {"n_ff", h.n_ff}, {"rms_eps", h.rms_eps},
        {"rope", {{"n_rot", h.rope.n_rot}, {"mode", h.rope.mode == ROPE_NEOX ? "neox" : "normal"},
                  {"freq_base", h.rope.freq_base}, {"freq_scale", h.rope.freq_scale},
                  {"scaling_type", h.rope_scaling_type}}}}},
      {"vocab",
       {{"n_tokens", tokenizer_->n_vocab()}, {"model", file_->get_string("tokenizer.ggml.model").value_or("")},
        {"bos", tokenizer_->bos()}, {"eos", tokenizer_->eos()}}},
      {"n_params", n_params_},
      {"tensor_types", bytes_by_type},
      {"memory",
       {{"weights_bytes", weight_bytes_}, {"kv_bytes_per_token", kv_per_token},
        {"kv_bytes_n_ctx_train", kv_per_token * static_cast<uint64_t>(h.n_ctx_train)},
        {"scratch_bytes_batch512", per_token * 512 + 4ull * h.n_vocab}}},
      {"tensors", tensors},
  };
  return j.dump(2);
}

}  // namespace kestrel
