#include "info_summary.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_syntax.h"

namespace kestrel::cli {

using nlohmann::json;

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  return buf;
}

std::string human_count(double p) {
  char buf[32];
  if (p >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", p / 1e9);
  else if (p >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", p / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1fK", p / 1e3);
  return buf;
}

namespace {

// "Q4_K 71% · Q6_K 18% · F32 11%": the weights' bytes by type, largest first.
std::string quant_mix(const json& types) {
  std::vector<std::pair<double, std::string>> v;
  double total = 0;
  for (const auto& [type, bytes] : types.items()) v.emplace_back(bytes.get<double>(), type), total += bytes.get<double>();
  std::sort(v.rbegin(), v.rend());
  std::string s;
  for (const auto& [bytes, type] : v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%s %.0f%%", s.empty() ? "" : " · ", type.c_str(), total > 0 ? 100 * bytes / total : 0);
    s += buf;
  }
  return s;
}

std::string line(const char* label, const std::string& text) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "  %-11s ", label);
  return buf + text + "\n";
}

}  // namespace

std::string info_summary(const InfoInputs& in) {
  const json& d = in.desc;
  const json& hp = d["hparams"];
  const json& mem = d["memory"];
  const std::string arch = d.value("architecture", std::string("?"));
  const std::string name = d.value("name", std::string());
  std::string out = line("model", arch + (name.empty() ? std::string() : " \"" + name + "\"") + ", " +
                                      d.value("file", std::string()) + " (GGUF v" +
                                      std::to_string(d.value("gguf_version", 0)) + ")");

  const double total = d.value("n_params", 0.0), active = d.value("n_params_active", total);
  std::string params = human_count(total) + " parameters";
  if (active < total) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %s active per token (%.1f%%)", human_count(active).c_str(), 100 * active / total);
    params += buf;
  }
  out += line("parameters", params);
  out += line("weights", human_bytes(mem.value("weights_bytes", 0.0)) + ": " + quant_mix(d["tensor_types"]));

  char shape[256];
  std::snprintf(shape, sizeof shape, "%lld layers, embedding %lld, %lld heads (%lld KV) of %lld, FFN %lld, vocabulary %lld",
                hp.value("n_layer", 0LL), hp.value("n_embd", 0LL), hp.value("n_head", 0LL), hp.value("n_head_kv", 0LL),
                hp.value("head_dim_k", 0LL), hp.value("n_ff", 0LL), hp.value("n_vocab", 0LL));
  std::string shape_s = shape;
  if (hp.contains("moe"))
    shape_s += "; " + std::to_string(hp["moe"].value("n_expert_used", 0)) + " of " +
               std::to_string(hp["moe"].value("n_expert", 0)) + " experts per token";
  if (hp.contains("mla")) shape_s += "; MLA latent KV";
  if (hp.contains("ssm")) shape_s += "; Mamba-2 layers";
  if (hp.contains("sliding_window")) shape_s += "; sliding window " + std::to_string(hp["sliding_window"].get<long long>());
  out += line("shape", shape_s);

  const int64_t n_train = hp.value("n_ctx_train", int64_t{0});
  char ctx[160];
  std::snprintf(ctx, sizeof ctx, "%lld tokens trained; KV cache %llu bytes/token (%s)", static_cast<long long>(n_train),
                static_cast<unsigned long long>(in.kv_bytes_per_token), in.kv_type.c_str());
  out += line("context", ctx);
  // Every cache type this model's rows take (--cache-type-k/-v), bytes per token.
  std::string choices;
  for (const char* t : {"f16", "q8_0", "q4_0", "f8_e4m3"}) {
    const std::string key = std::string("kv_bytes_per_token") + (std::string(t) == "f16" ? "" : std::string("_") + t);
    if (mem.contains(key))
      choices += (choices.empty() ? "" : ", ") + std::string(t) + " " + std::to_string(mem[key].get<uint64_t>());
  }
  if (!choices.empty()) out += line("KV types", choices + " bytes/token");

  std::string chat;
  if (in.chat_template.empty()) {
    chat = "no chat template (chat uses the library's fallback)";
  } else {
    const ChatSyntax syntax = detect_chat_syntax(in.chat_template, arch);
    chat = "template present (" + std::to_string(in.chat_template.size()) + " bytes); tool calls: " + syntax.name;
    if (!syntax.think_open.empty()) chat += "; reasoning in " + syntax.think_open + "…" + syntax.think_close;
  }
  out += line("chat", chat);

  // Memory at the chosen context: the CPU (weights as placed, KV, a 512-token step's scratch) and,
  // when compiled, the CUDA backend's estimate.
  const double kv = static_cast<double>(in.kv_bytes_per_token) * static_cast<double>(in.n_ctx) +
                    mem.value("recurrent_state_bytes_per_seq", 0.0);
  const double w_cpu = std::max(mem.value("weights_bytes_placed", 0.0), mem.value("weights_bytes", 0.0));
  const double scratch = mem.value("scratch_bytes_batch512", 0.0);
  const std::string at = "at context " + std::to_string(in.n_ctx) + " (" + in.kv_type + " KV)";
  out += line("memory", at + ":");
  out += line("  cpu", "weights " + human_bytes(w_cpu) + " + KV " + human_bytes(kv) + " + scratch " +
                           human_bytes(scratch) + " = " + human_bytes(w_cpu + kv + scratch));
  if (!in.cuda.is_null()) {
    const json& c = in.cuda;
    std::string s = "weights " + human_bytes(c["weights_bytes"].get<double>()) + " + KV " +
                    human_bytes(c["kv_bytes"].get<double>()) + " + scratch " + human_bytes(c["scratch_bytes"].get<double>()) +
                    " = " + human_bytes(c["total_bytes"].get<double>());
    if (c.value("memory_total", uint64_t{0}) > 0)
      s += c["fits"].get<bool>() ? "; fits " + c.value("device", std::string()) : "; does NOT fit " + c.value("device", std::string());
    out += line("  cuda", s);
  }
  return out;
}

}  // namespace kestrel::cli
