// kestrel info: a short summary of the model on stdout (info_summary.h); with --json, the model's
// architecture, hyper-parameters, tensors and memory needs as JSON on stdout, and a one-line
// summary on stderr: total vs active parameters per token, KV bytes per token (and what full K/V
// would take when the cache is compressed, as MLA's is).
//   kestrel info -m MODEL [-d cuda] [-c N_CTX] [--json]
// With a device backend (-d cuda) nothing is loaded onto the device: the file is read as the
// scalar reference backend reads it (mapped, nothing copied), the device is opened on its own,
// and the JSON gains "device": its memory, what the model would take there and whether that
// fits; stderr says the same in words. -c is the context size (default the model's
// context_length, as memory.kv_bytes_n_ctx_train); given, memory also holds kv_bytes_n_ctx.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "bench_roofline.h"
#include "backends/backend.h"
#include "common.h"
#include "gguf/gguf.h"
#include "info_summary.h"

namespace kestrel::cli {
namespace {

using nlohmann::json;

// The KV cache's cells for n_ctx: whole blocks of 16 (fewer per block for tiny caches), as
// KvCache::create rounds them for one sequence.
uint64_t kv_cells(int64_t n_ctx) {
  int64_t bs = 16;
  while (bs > 1 && (n_ctx + bs - 1) / bs < 2) bs /= 2;
  return static_cast<uint64_t>((n_ctx + bs - 1) / bs * bs);
}

// What the model would take on a device backend, from its description (nothing placed yet):
//  - weights: every tensor of the file, each rounded to 256 bytes (the CUDA backend's
//    place_weights uploads them all into one allocation);
//  - KV cache: kv_per_token (memory.kv_bytes_per_token for F16 cells, or the --kv-type's) x n_ctx
//    rounded to whole blocks;
//  - scratch: a context's arena for a 512-token step (memory.scratch_bytes_batch512: the widest
//    live activations plus a row of logits) and its stream's kernel scratch, the larger of the
//    attention scores (capped at 64 MiB a launch) and a matmul's input rounded to F32 for 512
//    tokens (4 x 512 x the widest matmul input).
json device_needs(const json& d, const DeviceMemory& dev, int64_t n_ctx, uint64_t kv_per_token) {
  const json& mem = d["memory"];
  const json& hp = d["hparams"];
  uint64_t weights = 0;
  for (const auto& t : d["tensors"]) weights += (t["bytes"].get<uint64_t>() + 255) / 256 * 256;
  // One sequence's recurrent states (hybrid models) beside its KV cells.
  const uint64_t kv = kv_per_token * kv_cells(n_ctx) + mem.value("recurrent_state_bytes_per_seq", uint64_t{0});
  const uint64_t n_batch = 512;
  const uint64_t arena = mem.value("scratch_bytes_batch512", uint64_t{0});
  uint64_t widest = std::max(hp.value("n_embd", uint64_t{0}), hp.value("n_ff", uint64_t{0}));
  if (hp.contains("moe"))
    widest = std::max(widest, hp["moe"].value("n_ff_exp", uint64_t{0}) * hp["moe"].value("n_expert_used", uint64_t{0}));
  const uint64_t scores = std::min<uint64_t>(uint64_t{64} << 20, 4 * hp.value("n_head", uint64_t{0}) * n_batch *
                                                                        static_cast<uint64_t>(n_ctx));
  const uint64_t stream = std::max({uint64_t{1} << 20, scores, 4 * n_batch * widest});
  const uint64_t total = weights + kv + arena + stream;
  return {{"backend", dev.name},
          {"device", dev.device},
          {"memory_total", dev.total},
          {"memory_free", dev.free},
          {"loaded", false},
          {"n_ctx", n_ctx},
          {"n_batch", n_batch},
          {"weights_bytes", weights},
          {"kv_bytes", kv},
          {"scratch_bytes", arena + stream},
          {"scratch_arena_bytes", arena},
          {"scratch_stream_bytes", stream},
          {"total_bytes", total},
          {"fits", total <= dev.free},
          {"free_after_bytes", static_cast<int64_t>(dev.free) - static_cast<int64_t>(total)},
          {"scratch_estimate",
           "memory.scratch_bytes_batch512 (a 512-token step's activations and logits) + the stream's kernel "
           "scratch (max of attention scores capped at 64 MiB and 4 x 512 x the widest matmul input)"}};
}

}  // namespace

Opts info_options() {
  return model_options() +
         Opts{ctx_option("the context to size the KV cache for (default: the model's training context, as the summary sizes it)"),
              {"--json", "", "print the full description as JSON (hparams, tensors, memory)"}} +
         cache_options();
}

int cmd_info(const Args& a) {
  const KvTypes kv = kv_types_from_args(a);
  const std::string kv_name =
      kv.k == kv.v ? kv_type_name(kv.k) : std::string("K ") + kv_type_name(kv.k) + ", V " + kv_type_name(kv.v);
  const std::string backend = a.str("--device", "auto");
  const long long n_ctx_arg = a.integer("--ctx-size", 0);
  if (a.has("--ctx-size") && (n_ctx_arg < 1 || n_ctx_arg > (1ll << 24)))
    throw UsageError("-c: expected a context size in [1, 16777216]");
  // A device backend named outright: open it alone and read the model without placing it there.
  DeviceMemory dev;
  if (backend != "auto" && backend != "cpu" && backend != "ref") {
    dev = open_device_memory(backend);
    if (!dev.ok) throw std::runtime_error(dev.why);
    if (dev.host_memory) dev.ok = false;  // a host backend after all: today's output
  }
  ModelPtr model;
  if (dev.ok) {
    kestrel_model_options mo;
    kestrel_model_options_init(&mo);
    mo.backend = "ref";  // maps the file and copies nothing
    mo.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
    if (stderr_is_tty()) mo.progress = progress_bar;
    model = load_model(a.required("--model"), &mo);
  } else {
    model = load_model_from_args(a);
  }
  const std::string desc = describe(model.get());
  json d = json::parse(desc, nullptr, false);
  const bool has_memory = !d.is_discarded() && d.contains("memory");
  const int64_t n_ctx = n_ctx_arg > 0 ? n_ctx_arg : (has_memory ? d["hparams"].value("n_ctx_train", int64_t{0}) : 0);
  // KV bytes per token of the cache types asked for: K's and V's values per token (from the
  // description) at each type's bytes per value (a block type's 32 values and F16 scale).
  uint64_t kv_per_token = 0;
  if (has_memory) {
    auto bytes = [](uint64_t values, kestrel_kv_type t) {  // values: whole blocks (checked at load)
      return static_cast<uint64_t>(static_cast<double>(values) * kv_value_bytes(t));
    };
    kv_per_token = bytes(d["memory"].value("kv_values_per_token_k", uint64_t{0}), kv.k) +
                   bytes(d["memory"].value("kv_values_per_token_v", uint64_t{0}), kv.v);
  }
  if (!a.has("--json") && has_memory) {
    InfoInputs in;
    in.desc = d;
    if (auto f = gguf::File::open(a.required("--model")); f.ok())
      in.chat_template = f.value()->get_string("tokenizer.chat_template").value_or("");
    in.n_ctx = std::max<int64_t>(n_ctx, 1);
    in.kv_type = kv_name;
    in.kv_bytes_per_token = kv_per_token;
    const auto compiled = compiled_backends();
    if (dev.ok) {
      in.cuda = device_needs(d, dev, in.n_ctx, kv_per_token);
    } else if (std::find(compiled.begin(), compiled.end(), "cuda") != compiled.end()) {
      DeviceMemory none;
      none.name = "cuda";
      in.cuda = device_needs(d, none, in.n_ctx, kv_per_token);
    }
    std::fputs(info_summary(in).c_str(), stdout);
    return 0;
  }
  if (has_memory && (dev.ok || n_ctx_arg > 0)) {
    if (n_ctx_arg > 0) {
      d["memory"]["n_ctx"] = n_ctx;
      d["memory"]["kv_type"] = kv_name;
      d["memory"]["kv_bytes_n_ctx"] = kv_per_token * static_cast<uint64_t>(n_ctx);
    }
    if (dev.ok) {
      // Loaded for reading only: the placement fields would describe the reference backend's.
      for (const char* k : {"backend", "weights_bytes_placed", "weights_bytes_regrouped"}) d["memory"].erase(k);
      d["device"] = device_needs(d, dev, std::max<int64_t>(n_ctx, 1), kv_per_token);
    }
    std::printf("%s\n", d.dump(2, ' ', false, json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n", desc.c_str());
  }
  if (has_memory) {
    const auto& mem = d["memory"];
    const double total = d.value("n_params", 0.0), active = d.value("n_params_active", total);
    const double kv = mem.value("kv_bytes_per_token", 0.0), kv_full = mem.value("kv_bytes_per_token_full_kv", kv);
    std::fprintf(stderr, "%s: %.4g params, %.4g active per token (%.1f%%); KV cache %.0f bytes/token",
                 d.value("architecture", std::string("?")).c_str(), total, active,
                 total > 0 ? 100.0 * active / total : 0.0, kv);
    if (kv_full > kv) std::fprintf(stderr, " (full K/V would be %.0f: %.1fx smaller)", kv_full, kv_full / kv);
    const double state = mem.value("recurrent_state_bytes_per_seq", 0.0);
    if (state > 0) std::fprintf(stderr, " + recurrent state %.0f bytes/sequence", state);
    std::fprintf(stderr, "\n");
  }
  if (has_memory && dev.ok) {
    const json& x = d["device"];
    const double need = x["total_bytes"].get<double>(), left = x["free_after_bytes"].get<double>();
    std::string verdict = "fits, " + human_bytes(left) + " left";
    if (left < 0) {
      // The largest context that would fit beside the weights and scratch, if any.
      const double kv_tok = static_cast<double>(kv_per_token);
      const double room = static_cast<double>(dev.free) - x["weights_bytes"].get<double>() - x["scratch_bytes"].get<double>();
      char buf[96];
      if (room > 0 && kv_tok > 0)
        std::snprintf(buf, sizeof buf, " (-c %.0f would fit)", std::min(std::floor(room / kv_tok / 16) * 16, 16777216.0));
      else
        std::snprintf(buf, sizeof buf, " (the weights and scratch alone do not fit)");
      verdict = "does NOT fit, " + human_bytes(-left) + " short" + buf;
    }
    std::fprintf(stderr, "device: %s (%s), %s total, %s free\n", dev.device.c_str(), dev.name.c_str(),
                 human_bytes(static_cast<double>(dev.total)).c_str(), human_bytes(static_cast<double>(dev.free)).c_str());
    std::fprintf(stderr, "needs on it (not loaded): weights %s + KV cache %s (n_ctx %lld, %s) + scratch %s = %s: %s\n",
                 human_bytes(x["weights_bytes"].get<double>()).c_str(), human_bytes(x["kv_bytes"].get<double>()).c_str(),
                 static_cast<long long>(x["n_ctx"].get<int64_t>()), kv_name.c_str(), human_bytes(x["scratch_bytes"].get<double>()).c_str(),
                 human_bytes(need).c_str(), verdict.c_str());
  }
  return 0;
}

}  // namespace kestrel::cli
