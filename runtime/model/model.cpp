#include "model/model.h"
#include "core/limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>

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
  KS_RETURN_IF_ERROR(limits::check_threads("model: n_threads", opts.n_threads));  // contexts start them
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->opts_ = opts;
  KS_RETURN_IF_ERROR(m->init());
  return m;
}

Model::~Model() = default;

Status Model::init() {
  const gguf::File& f = *file_;
  auto arch_name = f.get_string("general.architecture");
  if (opts_.vocab_only) {
    // A vocabulary-only file (e.g. from tools/convert) need not name an architecture.
    auto tok = Tokenizer::from_gguf(f);
    if (!tok.ok()) return tok.status();
    tokenizer_ = std::move(tok.value());
    hp_.arch = arch_name ? *arch_name : std::string();
    hp_.n_vocab = tokenizer_->n_vocab();
    return Status::Ok();
  }
  if (!arch_name) return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata 'general.architecture' is missing");
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
  // Every id the model can produce must have a token to show (a longer list is harmless).
  if (hp_.n_vocab > tokenizer_->n_vocab())
    return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata 'tokenizer.ggml.tokens' has " +
                                         std::to_string(tokenizer_->n_vocab()) + " entries, fewer than the " +
                                         std::to_string(hp_.n_vocab) + " of the vocabulary ('" + hp_.arch +
                                         ".vocab_size' / the embedding rows)");

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
  KS_RETURN_IF_ERROR(arch_->bind(*this, weights_));
  KS_RETURN_IF_ERROR(bind_second_scales());
  if (recording_) return Status::Ok();
  auto device = create_device(opts_.backend);
  if (!device.ok()) return device.status();
  device_ = std::move(device.value());
  // An embedding table the output head does not share is only gathered from.
  std::unordered_set<std::string> gather_only;
  if (weights_.tok_embd && weights_.tok_embd != weights_.output) gather_only.insert(weights_.tok_embd->name);
  return device_->place_weights(*file_, tensors_, gather_only);
}

Expected<Model::TensorTable> Model::tensor_table(std::unique_ptr<gguf::File> metadata, HParams* hp) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(metadata);
  m->recording_ = true;
  KS_RETURN_IF_ERROR(m->init());
  if (hp) *hp = m->hp_;
  return std::move(m->recorded_);
}

Expected<const Tensor*> Model::optional(const std::string& pattern, std::vector<int64_t> ne, int layer) const {
  const std::string name = layer_name(pattern, layer);
  auto it = tensors_.find(name);
  if (it == tensors_.end() && recording_) {
    if (ne.empty() || ne.size() > 4 || std::any_of(ne.begin(), ne.end(), [](int64_t d) { return d <= 0; }))
      return Error(KESTREL_ERR_FORMAT, "tensor '" + name + "': the tensor table gives no concrete shape");
    recorded_.emplace_back(name, ne);
    ne.resize(4, 1);
    it = tensors_.emplace(name, make_tensor(DType::F32, ne[0], ne[1], ne[2], ne[3])).first;
    it->second.name = name;
  }
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

namespace {

// Parameters and bytes a token does not read: of every expert tensor ([K, N, n_expert]
// matrices, [N, n_expert] biases), the share (n_expert - n_used) / n_expert; all of the NextN
// blocks (block index >= n_layer), which the forward pass skips.
std::pair<uint64_t, uint64_t> unused_expert_share(const gguf::File& f, const HParams& h) {
  uint64_t params = 0, bytes = 0;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    int blk = -1;
    if (h.n_layer_nextn > 0 && std::sscanf(ti.name.c_str(), "blk.%d.", &blk) == 1 && blk >= h.n_layer) {
      params += static_cast<uint64_t>(ti.n_elements());
      bytes += ti.nbytes;
      continue;
    }
    if (h.n_expert <= 0) continue;
    const int64_t e = ti.n_dims >= 3 ? ti.ne[2] : ti.ne[1];
    if (ti.name.find("_exps.") == std::string::npos || e != h.n_expert) continue;
    params += static_cast<uint64_t>(ti.n_elements()) / h.n_expert * (h.n_expert - h.n_expert_used);
    bytes += ti.nbytes / h.n_expert * (h.n_expert - h.n_expert_used);
  }
  return {params, bytes};
}

}  // namespace

uint64_t Model::n_params_active() const { return n_params_ - unused_expert_share(*file_, hp_).first; }

KvLayout Model::kv_layout() const { return arch_ && arch_->kv_layout ? arch_->kv_layout(hp_) : default_kv_layout(hp_); }

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
  const KvLayout layout = kv_layout();
  const uint64_t kv_per_token = layout.bytes_per_token(DType::F16);
  // What one token would cost with every head's K and V stored in full (MLA decompressed).
  const uint64_t kv_full_per_token =
      h.kv_lora_rank > 0 ? 2ull * h.n_layer * h.n_head * static_cast<uint64_t>(h.head_dim_k_mla + h.head_dim_v_mla)
                         : kv_per_token;
  // Scratch of one decode step of 512 tokens: the widest live activations plus the logits.
  const uint64_t per_token = 4ull * (4ull * h.n_embd + 3ull * std::max(h.n_ff, h.n_embd) +
                                     static_cast<uint64_t>(h.n_head) * (h.head_dim_k + h.head_dim_v) + 2 * h.k_row() +
                                     3ull * h.n_expert_used * std::max(h.n_ff_exp, h.n_embd));
  json hp = {{"n_vocab", h.n_vocab}, {"n_ctx_train", h.n_ctx_train}, {"n_embd", h.n_embd}, {"n_layer", h.n_layer},
             {"n_head", h.n_head}, {"n_head_kv", h.n_head_kv}, {"head_dim_k", h.head_dim_k},
             {"head_dim_v", h.head_dim_v}, {"n_ff", h.n_ff}, {"rms_eps", h.rms_eps},
             {"rope", {{"n_rot", h.rope.n_rot}, {"mode", h.rope.mode == ROPE_NEOX ? "neox" : "normal"},
                       {"freq_base", h.rope.freq_base}, {"freq_scale", h.rope.freq_scale},
                       {"scaling_type", h.rope_scaling_type}}}};
  if (h.sliding_window > 0) hp["sliding_window"] = h.sliding_window;
  if (h.n_layer_nextn > 0) hp["n_layer_nextn"] = h.n_layer_nextn;  // after n_layer, not run
  if (h.ssm_d_inner > 0)
    hp["ssm"] = {{"d_inner", h.ssm_d_inner}, {"d_state", h.ssm_d_state}, {"d_conv", h.ssm_d_conv},
                 {"n_group", h.ssm_n_group}, {"n_head", h.ssm_n_head}};
  if (!h.n_head_kv_layer.empty()) hp["n_head_kv_per_layer"] = h.n_head_kv_layer;
  if (!h.n_ff_layer.empty()) hp["n_ff_per_layer"] = h.n_ff_layer;
  if (h.n_expert > 0)
    hp["moe"] = {{"n_expert", h.n_expert}, {"n_expert_used", h.n_expert_used}, {"n_ff_exp", h.n_ff_exp},
                 {"n_expert_shared", h.n_expert_shared}, {"n_layer_dense_lead", h.n_layer_dense_lead},
                 {"gating", h.expert_gating == 2 ? "sigmoid" : "softmax"}, {"n_expert_groups", h.n_expert_groups},
                 {"weights_norm", h.expert_weights_norm}, {"weights_scale", h.expert_weights_scale}};
  if (h.kv_lora_rank > 0)
    hp["mla"] = {{"q_lora_rank", h.q_lora_rank}, {"kv_lora_rank", h.kv_lora_rank},
                 {"head_dim_k", h.head_dim_k_mla}, {"head_dim_v", h.head_dim_v_mla}};
  json j = {
      {"architecture", h.arch},
      {"name", file_->get_string("general.name").value_or("")},
      {"file", file_->path()},
      {"gguf_version", file_->version()},
      {"hparams", hp},
      {"vocab",
       {{"n_tokens", tokenizer_->n_vocab()}, {"model", file_->get_string("tokenizer.ggml.model").value_or("")},
        {"bos", tokenizer_->bos()}, {"eos", tokenizer_->eos()}}},
      {"n_params", n_params_},
      {"n_params_active", n_params_active()},
      {"tensor_types", bytes_by_type},
      {"memory",
       {{"weights_bytes", weight_bytes_},
        {"weights_bytes_active", weight_bytes_ - unused_expert_share(*file_, h).second},  // read per token
        {"kv_bytes_per_token", kv_per_token},
        {"kv_bytes_per_token_full_kv", kv_full_per_token},
        {"kv_bytes_per_token_f8_e4m3", layout.bytes_per_token(DType::F8_E4M3)},  // --kv-type f8_e4m3
        {"kv_bytes_n_ctx_train", kv_per_token * static_cast<uint64_t>(h.n_ctx_train)},
        // Recurrent (SSM) layers: a constant per sequence instead of bytes per token.
        {"recurrent_state_bytes_per_seq", layout.state_bytes_per_seq()},
        {"scratch_bytes_batch512", per_token * 512 + 4ull * h.n_vocab},
        // The backend's load-time placement (Device::place_weights): the CPU's huge pages and
        // regrouped rows, a GPU's upload. One copy, whatever the number of contexts.
        {"backend", device_ ? device_->info().name : ""},
        {"weights_bytes_placed", device_ ? device_->placed().placed_bytes : 0},
        {"weights_bytes_regrouped", device_ ? device_->placed().regrouped_bytes : 0}}},
      {"tensors", tensors},
  };
  // Values per token in K and in V (0: V is a view of K), for any mix of cache types, and the
  // block-quantized caches (--cache-type-k/-v q8_0, q4_0) where every layer's rows are whole blocks.
  uint64_t k_values = 0, v_values = 0;
  for (size_t l = 0; l < layout.k_rows.size(); ++l)
    k_values += static_cast<uint64_t>(layout.k_rows[l]), v_values += layout.v_in_k ? 0 : static_cast<uint64_t>(layout.v_rows[l]);
  j["memory"]["kv_values_per_token_k"] = k_values;
  j["memory"]["kv_values_per_token_v"] = v_values;
  for (DType t : {DType::Q8_0, DType::Q4_0})
    if (layout.cache_type_error(t, false).empty() && layout.cache_type_error(t, true).empty())
      j["memory"][std::string("kv_bytes_per_token_") + dtype_name(t)] = layout.bytes_per_token(t);
  // Strings from the file (general.name, paths) may hold invalid UTF-8: replaced, never thrown.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kestrel
