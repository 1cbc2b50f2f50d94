// kestrel perf: predicts a model's speed and memory on a hardware profile from its shape alone
// (perf_model.h): decode by batch and by context, prefill by prompt length, where decode turns
// compute-bound, what fits in memory, MoE's distinct experts, speculative decoding, tensor
// parallelism. A table, --json, or --plot FILE.svg.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "args.h"
#include "common.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "info_summary.h"
#include "kestrel_version.h"  // generated: KESTREL_GIT_COMMIT
#include "model/synth.h"
#include "perf_calibrate.h"
#include "perf_model.h"
#include "perf_plot.h"
#include "synth_presets.h"

namespace kestrel::cli {
namespace {

using json = nlohmann::json;

struct Subject {
  ModelShape shape;
  std::string name;
};

Subject subject_from_args(const Args& a) {
  Subject s;
  if (a.has("--model") == a.has("--preset")) throw UsageError("perf: give -m MODEL or --preset NAME (one of them)");
  if (a.has("--model")) {
    if (a.has("--type")) throw UsageError("perf: --type is --preset's; a file's types are its own");
    auto f = gguf::File::open(a.str("--model"));
    if (!f.ok()) throw UsageError("perf: " + f.status().message());
    auto shape = model_shape(*f.value());
    if (!shape.ok()) throw UsageError("perf: " + shape.status().message());
    s.shape = std::move(shape.value());
    s.name = a.str("--model");
    return s;
  }
  const SynthShape p = find_synth_shape(a.str("--preset"));
  SynthOptions o;
  o.n_vocab = p.n_vocab;
  o.architecture = p.architecture;
  const std::string type = a.str("--type", "f16");
  if (!dtype_from_name(type.c_str(), &o.weight_type)) throw UsageError("perf: unknown --type '" + type + "'");
  auto shape = synth_shape(*p.arch, TinyConfig{"perf", p.kv}, o);
  if (!shape.ok()) throw UsageError("perf: " + shape.status().message());
  s.shape = std::move(shape.value());
  s.name = a.str("--preset") + " (" + type + ")";
  return s;
}

HwProfile hw_from_args(const Args& a) {
  const std::string name = a.str("--hw", "local");
  if (name == "local" && !local_profile_exists()) {
    std::fprintf(stderr, "kestrel perf: no calibrated profile of this machine yet: calibrating (kestrel bench --calibrate)\n");
    HwProfile p = calibrate_cpu(default_thread_count(), true);
    save_local_profile(p);
    std::fprintf(stderr, "kestrel perf: saved %s\n", local_profile_path().c_str());
    return p;
  }
  HwProfile p = load_hw_profile(name);
  if (name == "local") {
    const std::string w = stale_profile_warning(p, local_profile_path(), KESTREL_GIT_COMMIT);
    if (!w.empty()) std::fprintf(stderr, "kestrel perf: %s\n", w.c_str());
  }
  return p;
}

DType kv_dtype(kestrel_kv_type t) {
  DType d = DType::F16;
  dtype_from_name(kv_type_name(t), &d);
  return d;
}

std::vector<double> number_list(const std::string& flag, const std::string& list) {
  std::vector<double> out;
  for (int v : token_counts(flag, list)) out.push_back(v);
  return out;
}

}  // namespace

Opts perf_options() {
  return Opts{{"-m,--model", "FILE", "a GGUF model (only its header is read)"},
          {"--preset", "NAME", "a shape kestrel synth knows (kestrel synth --list), never written"},
          {"--type", "TYPE", "--preset's matrix type: f16, bf16, q8_0, q4_0, q4_K, mxfp4, ... (default f16)"},
          {"--hw", "NAME|FILE", "hardware profile: local (this machine, calibrated on first use), a built-in name "
                                "(--list-hw) or a JSON file (default local)"},
          {"--list-hw", "", "list the built-in hardware profiles"},
          {"-t,--threads", "N", "CPU threads (default: the profile's cores)"},
          {"-c,--ctx-size", "N", "tokens in context while decoding (default 0)"},
          {"--ctx", "N", "the same as -c/--ctx-size"},
          {"-p,--n-prompt", "N", "the prompt whose prefill speed is reported (default 512)"},
          {"-b,--batch-size", "N", "prefill chunk: tokens per step (default 512)"},
          {"--batches", "N[,N..]", "decode batch sizes to sweep (default 1,2,4,8,16,32,64)"},
          {"--contexts", "N[,N..]", "contexts to sweep at batch 1 (default 0,4096,16384,32768)"},
          {"--prompts", "N[,N..]", "prompt lengths to sweep (default 128,512,2048,8192)"},
          {"--tp", "N[,N..]", "tensor-parallel GPU counts to compare (e.g. 1,2,4,8)"},
          {"--spec-accept", "A", "speculative decoding: the drafts' per-token acceptance rate (0..1)"},
          {"--spec-draft", "N", "speculative decoding: tokens drafted per step (default 4)"},
          {"--spec-draft-cost", "C", "speculative decoding: one draft step's time over the target's (default 0.05)"},
          {"--per-op", "", "also list each op class of one decode step"},
          {"--json", "", "print one JSON object"},
          {"--plot", "FILE.svg", "write the sweeps and the roofline as an SVG chart"}} +
         cache_options();
}

int cmd_perf(const Args& a) {
  if (a.has("--list-hw")) {
    std::printf("local  this machine (%s%s)\n", local_profile_path().c_str(),
                local_profile_exists() ? "" : ", not yet calibrated");
    for (const std::string& n : hw_profile_names()) {
      const HwProfile p = load_hw_profile(n);
      std::printf("%-14s %s: %.0f GB, %.0f GB/s\n", n.c_str(), p.description.c_str(), p.memory_bytes / 1e9, p.bandwidth_gbs);
    }
    return 0;
  }
  const Subject subj = subject_from_args(a);
  const HwProfile hw = hw_from_args(a);
  if (a.has("--threads") && !hw.is_cpu()) throw UsageError("perf: -t/--threads is for CPU profiles; " + hw.name + " is a GPU");
  if ((a.has("--spec-draft") || a.has("--spec-draft-cost")) && !a.has("--spec-accept"))
    throw UsageError("perf: --spec-draft and --spec-draft-cost need --spec-accept");
  PerfOptions o;
  o.threads = static_cast<int>(a.integer("--threads", hw.is_cpu() ? hw.cores : 1));
  if (o.threads < 1) throw UsageError("perf: --threads must be >= 1");
  const KvTypes kvt = kv_types_from_args(a);
  o.kv_k = kv_dtype(kvt.k), o.kv_v = kv_dtype(kvt.v);
  o.n_batch = static_cast<int>(a.integer("--batch-size", 512));
  if (o.n_batch < 1) throw UsageError("perf: --batch-size must be >= 1");
  const int64_t ctx = a.integer("--ctx-size", a.integer("--ctx", 0));
  const int64_t n_prompt = a.integer("--n-prompt", 512);
  if (ctx < 0 || n_prompt < 1) throw UsageError("perf: --ctx-size must be >= 0 and --n-prompt >= 1");
  const std::vector<double> batches = number_list("--batches", a.str("--batches", "1,2,4,8,16,32,64"));
  const std::vector<double> contexts = number_list("--contexts", a.str("--contexts", "0,4096,16384,32768"));
  const std::vector<double> prompts = number_list("--prompts", a.str("--prompts", "128,512,2048,8192"));
  std::vector<double> tps;
  if (a.has("--tp")) tps = number_list("--tp", a.str("--tp"));
  for (double t : tps)
    if (t < 1) throw UsageError("perf: --tp counts must be >= 1");
  if (!tps.empty() && hw.is_cpu()) throw UsageError("perf: --tp models GPUs over a link; " + hw.name + " is a CPU profile");

  const ModelCosts c = model_costs(subj.shape, hw.kind, o.kv_k, o.kv_v);
  const StepTime d1 = decode_step(c, hw, o, 1, ctx);
  const double ttft = prefill_seconds(c, hw, o, n_prompt);
  json j = {{"model", subj.name},
            {"architecture", subj.shape.hp.arch},
            {"hw", hw.name},
            {"hw_description", hw.description},
            {"threads", hw.is_cpu() ? o.threads : 0},
            {"ctx", ctx},
            {"kv_type_k", kv_type_name(kvt.k)},
            {"kv_type_v", kv_type_name(kvt.v)},
            {"decode_tok_s", 1 / d1.seconds},
            {"itl_ms", 1e3 * d1.seconds},
            {"n_prompt", n_prompt},
            {"prefill_tok_s", n_prompt / ttft},
            {"ttft_ms", 1e3 * ttft},
            {"weights_bytes", c.weights_bytes},
            {"weights_bytes_active", c.weights_bytes_active},
            {"kv_bytes_per_token", c.kv_bytes_per_token},
            {"state_bytes_per_seq", c.state_bytes_per_seq},
            {"compute_bound_batch", compute_bound_batch(c, hw, o, ctx)},
            {"max_batch_at_ctx", max_batch_at_ctx(c, hw, o, std::max<int64_t>(ctx, 1))}};
  double windowed = 0;  // the KV a step attends to at ctx: sliding-window layers stop at their window
  for (const AttentionLayerCost& l : c.attention)
    windowed += l.kv_bytes_per_pos * static_cast<double>(l.window > 0 ? std::min<int64_t>(ctx, l.window) : ctx);
  j["kv_bytes_attended_at_ctx"] = windowed;
  if (c.n_expert > 0) j["moe"] = {{"n_expert", c.n_expert}, {"n_expert_used", c.n_expert_used}};
  for (double b : batches) {
    if (b < 1) continue;
    const StepTime s = decode_step(c, hw, o, static_cast<int>(b), ctx);
    json row = {{"batch", b}, {"tok_s", b / s.seconds}, {"tok_s_per_seq", 1 / s.seconds}, {"itl_ms", 1e3 * s.seconds},
                {"bound", s.compute_seconds >= s.memory_seconds ? "compute" : "memory"},
                {"intensity_flop_per_byte", s.flops / s.bytes}};
    if (c.n_expert > 0) row["distinct_experts"] = expected_distinct_experts(c.n_expert, c.n_expert_used, b);
    j["decode_by_batch"].push_back(row);
  }
  for (double cx : contexts) {
    const StepTime s = decode_step(c, hw, o, 1, static_cast<int64_t>(cx));
    double att = 0;
    for (const OpTime& op : s.ops)
      if (op.op == "attention") att = op.seconds;
    j["decode_by_ctx"].push_back({{"ctx", cx}, {"tok_s", 1 / s.seconds}, {"itl_ms", 1e3 * s.seconds},
                                  {"attention_share", att / s.seconds}});
  }
  for (double p : prompts) {
    if (p < 1) continue;
    const double t = prefill_seconds(c, hw, o, static_cast<int64_t>(p));
    j["prefill_by_prompt"].push_back({{"n_prompt", p}, {"tok_s", p / t}, {"ttft_ms", 1e3 * t}});
  }
  for (const OpTime& op : d1.ops)
    j["per_op"].push_back({{"op", op.op}, {"bytes", op.bytes}, {"flops", op.flops}, {"ms", 1e3 * op.seconds},
                           {"bound", op.compute_bound ? "compute" : "memory"}});
  j["overhead_ms"] = 1e3 * d1.overhead_seconds;
  // The prompt's first chunk, by op class (a prefill's steps differ in attention only).
  const int first = static_cast<int>(std::min<int64_t>(n_prompt, o.n_batch));
  const StepTime p1 = chunk_step(c, hw, o, first, 0, first == n_prompt ? 1 : 0);
  for (const OpTime& op : p1.ops)
    j["per_op_prefill"].push_back({{"op", op.op}, {"bytes", op.bytes}, {"flops", op.flops}, {"ms", 1e3 * op.seconds},
                                   {"bound", op.compute_bound ? "compute" : "memory"}});
  j["prefill_chunk"] = {{"tokens", first}, {"overhead_ms", 1e3 * p1.overhead_seconds}};
  if (a.has("--spec-accept")) {
    const double alpha = a.number("--spec-accept", 0);
    const int gamma = static_cast<int>(a.integer("--spec-draft", 4));
    const double cost = a.number("--spec-draft-cost", 0.05);
    if (alpha < 0 || alpha > 1 || gamma < 1 || cost < 0)
      throw UsageError("perf: --spec-accept wants 0..1, --spec-draft >= 1, --spec-draft-cost >= 0");
    const SpecPrediction sp = speculative(c, hw, o, ctx, alpha, gamma, cost);
    json best;
    for (int g = 1; g <= 16; ++g) {
      const SpecPrediction q = speculative(c, hw, o, ctx, alpha, g, cost);
      if (best.is_null() || q.speedup > best["speedup"].get<double>()) best = {{"draft", g}, {"speedup", q.speedup}};
    }
    j["speculative"] = {{"accept", alpha},      {"draft", gamma},     {"draft_cost", cost},
                        {"tokens_per_step", sp.tokens_per_step}, {"speedup", sp.speedup}, {"tok_s", sp.tok_s},
                        {"best", best}};
  }
  for (double t : tps) {
    PerfOptions ot = o;
    ot.tp = static_cast<int>(t);
    const double b1 = 1 / decode_step(c, hw, ot, 1, ctx).seconds;
    const StepTime s64 = decode_step(c, hw, ot, 64, ctx);
    j["tensor_parallel"].push_back({{"gpus", t}, {"decode_tok_s", b1}, {"speedup", b1 * d1.seconds},
                                    {"batch64_tok_s", 64 / s64.seconds}, {"link_share_batch64", s64.link_seconds / s64.seconds},
                                    {"prefill_tok_s", n_prompt / prefill_seconds(c, hw, ot, n_prompt)},
                                    {"max_batch_at_ctx", max_batch_at_ctx(c, hw, ot, std::max<int64_t>(ctx, 1))}});
  }

  if (a.has("--plot")) {
    const std::string path = a.str("--plot");
    PlotChart by_batch{"decode by batch (context " + std::to_string(ctx) + ")", "concurrent sequences", "tokens/s", true, true, {}};
    PlotSeries total{"all sequences", {}}, per_seq{"per sequence", {}};
    for (const auto& r : j["decode_by_batch"])
      total.points.emplace_back(r["batch"], r["tok_s"]), per_seq.points.emplace_back(r["batch"], r["tok_s_per_seq"]);
    by_batch.series = {total, per_seq};
    PlotChart by_ctx{"decode by context (batch 1)", "context (tokens)", "tokens/s", false, false, {{"decode", {}}}};
    for (const auto& r : j["decode_by_ctx"]) by_ctx.series[0].points.emplace_back(r["ctx"], r["tok_s"]);
    PlotChart by_prompt{"prefill by prompt length", "prompt (tokens)", "tokens/s", true, false, {{"prefill", {}}}};
    for (const auto& r : j["prefill_by_prompt"]) by_prompt.series[0].points.emplace_back(r["n_prompt"], r["tok_s"]);
    // The roofline of the matrices' format: attainable FLOP/s against FLOPs per byte, with the
    // decode steps of the batch sweep placed on it.
    const double bw = hw.bandwidth(o.threads) * 1e9 * hw.eff_memory;
    std::string fmt = "f32";
    for (const MatmulCost& m : c.matmuls)
      if (!m.gather && m.op.rfind("vectors", 0) != 0) fmt = hw.gflops.count(m.type) ? m.type : m.format;
    const double peak = hw.compute_gflops(fmt, o.threads) * 1e9 * hw.eff_compute;
    PlotChart roof{"roofline (" + hw.name + ", " + fmt + ")", "FLOPs per byte", "GFLOP/s", true, true,
                   {{"attainable", {}}, {"decode steps by batch", {}, true}}};
    for (double i = 0.01; i <= 1e4; i *= 1.25) roof.series[0].points.emplace_back(i, std::min(peak, bw * i) / 1e9);
    for (double b : batches) {
      if (b < 1) continue;
      const StepTime s = decode_step(c, hw, o, static_cast<int>(b), ctx);
      roof.series[1].points.emplace_back(s.flops / s.bytes, s.flops / s.seconds / 1e9);
    }
    const std::string svg = svg_charts("kestrel perf: " + subj.name + " on " + hw.description,
                                       {by_batch, by_ctx, by_prompt, roof});
    std::ofstream out(path);
    if (!(out << svg)) throw UsageError("perf: cannot write " + path);
  }

  if (a.has("--json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s (%s) on %s: %s", subj.name.c_str(), subj.shape.hp.arch.c_str(), hw.name.c_str(), hw.description.c_str());
  if (hw.is_cpu()) std::printf(", %d thread%s", o.threads, o.threads > 1 ? "s" : "");
  std::printf("\n\nmemory: weights %s (read per token %s), KV %s per token (%s/%s)", human_bytes(c.weights_bytes).c_str(),
              human_bytes(c.weights_bytes_active).c_str(), human_bytes(c.kv_bytes_per_token).c_str(),
              kv_type_name(kvt.k), kv_type_name(kvt.v));
  if (c.state_bytes_per_seq > 0) std::printf(", recurrent state %s per sequence", human_bytes(c.state_bytes_per_seq).c_str());
  std::printf("\n  at context %lld: %lld sequences fit in %.0f GB; decode turns compute-bound at batch %d\n",
              static_cast<long long>(std::max<int64_t>(ctx, 1)), static_cast<long long>(j["max_batch_at_ctx"].get<int64_t>()),
              hw.memory_bytes / 1e9, j["compute_bound_batch"].get<int>());
  std::printf("  decode %.1f tok/s (%.2f ms per token) at context %lld; prefill of %lld tokens %.1f tok/s (first token after %.1f ms)\n",
              j["decode_tok_s"].get<double>(), j["itl_ms"].get<double>(), static_cast<long long>(ctx),
              static_cast<long long>(n_prompt), j["prefill_tok_s"].get<double>(), j["ttft_ms"].get<double>());
  std::printf("\ndecode by batch (context %lld)\n| batch | tok/s | tok/s per sequence | ms per step | bound |%s\n|---:|---:|---:|---:|---|%s\n",
              static_cast<long long>(ctx), c.n_expert > 0 ? " experts read per layer |" : "", c.n_expert > 0 ? "---:|" : "");
  for (const auto& r : j["decode_by_batch"]) {
    std::printf("| %.0f | %.1f | %.1f | %.2f | %s |", r["batch"].get<double>(), r["tok_s"].get<double>(),
                r["tok_s_per_seq"].get<double>(), r["itl_ms"].get<double>(), r["bound"].get<std::string>().c_str());
    if (c.n_expert > 0) std::printf(" %.1f of %d |", r["distinct_experts"].get<double>(), c.n_expert);
    std::printf("\n");
  }
  std::printf("\ndecode by context (batch 1)\n| context | tok/s | ms per token | attention share |\n|---:|---:|---:|---:|\n");
  for (const auto& r : j["decode_by_ctx"])
    std::printf("| %.0f | %.1f | %.2f | %.0f%% |\n", r["ctx"].get<double>(), r["tok_s"].get<double>(),
                r["itl_ms"].get<double>(), 100 * r["attention_share"].get<double>());
  std::printf("\nprefill by prompt length\n| prompt | tok/s | first token ms |\n|---:|---:|---:|\n");
  for (const auto& r : j["prefill_by_prompt"])
    std::printf("| %.0f | %.1f | %.1f |\n", r["n_prompt"].get<double>(), r["tok_s"].get<double>(), r["ttft_ms"].get<double>());
  if (j.contains("speculative")) {
    const auto& s = j["speculative"];
    std::printf("\nspeculative decoding (acceptance %.2f, %d drafted, draft cost %.2f): %.2f tokens per step, %.2fx, %.1f tok/s; "
                "best draft length %d (%.2fx)\n",
                s["accept"].get<double>(), s["draft"].get<int>(), s["draft_cost"].get<double>(),
                s["tokens_per_step"].get<double>(), s["speedup"].get<double>(), s["tok_s"].get<double>(),
                s["best"]["draft"].get<int>(), s["best"]["speedup"].get<double>());
  }
  if (j.contains("tensor_parallel")) {
    std::printf("\ntensor parallel over %s\n| GPUs | decode tok/s | speedup | batch 64 tok/s | link share at 64 | prefill tok/s | sequences that fit |\n|---:|---:|---:|---:|---:|---:|---:|\n",
                hw.link_name.c_str());
    for (const auto& r : j["tensor_parallel"])
      std::printf("| %.0f | %.1f | %.2fx | %.0f | %.0f%% | %.0f | %lld |\n", r["gpus"].get<double>(),
                  r["decode_tok_s"].get<double>(), r["speedup"].get<double>(), r["batch64_tok_s"].get<double>(),
                  100 * r["link_share_batch64"].get<double>(), r["prefill_tok_s"].get<double>(),
                  static_cast<long long>(r["max_batch_at_ctx"].get<int64_t>()));
  }
  if (a.has("--per-op")) {
    auto table = [&](const json& ops, double overhead_ms) {
      std::printf("| op | bytes | GFLOP | ms | bound |\n|---|---:|---:|---:|---|\n");
      for (const auto& r : ops)
        std::printf("| %s | %s | %.3f | %.3f | %s |\n", r["op"].get<std::string>().c_str(),
                    human_bytes(r["bytes"].get<double>()).c_str(), r["flops"].get<double>() / 1e9, r["ms"].get<double>(),
                    r["bound"].get<std::string>().c_str());
      std::printf("| fixed costs (ops, step, sampling) | | | %.3f | |\n", overhead_ms);
    };
    std::printf("\none decode step (batch 1, context %lld), by op class\n", static_cast<long long>(ctx));
    table(j["per_op"], j["overhead_ms"].get<double>());
    std::printf("\nthe prompt's first step (%d tokens from position 0), by op class\n", first);
    table(j["per_op_prefill"], j["prefill_chunk"]["overhead_ms"].get<double>());
  }
  if (a.has("--plot")) std::fprintf(stderr, "kestrel perf: wrote %s\n", a.str("--plot").c_str());
  return 0;
}

}  // namespace kestrel::cli
