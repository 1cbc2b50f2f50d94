// kestrel perf's model: byte and FLOP counts of each architecture against hand computations, the
// time model on profiles with round numbers, the hardware profiles, and the command (table, JSON,
// SVG).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "cli/args.h"
#include "cli/perf_model.h"
#include "cli/synth_presets.h"
#include "common/testdata.h"
#include "model/synth.h"

using namespace kestrel;
using namespace kestrel::cli;
using kestrel::test::run_cli;
using nlohmann::json;

namespace {

ModelShape preset_shape(const std::string& name, DType type) {
  const SynthShape p = find_synth_shape(name);
  SynthOptions o;
  o.n_vocab = p.n_vocab;
  o.architecture = p.architecture;
  o.weight_type = type;
  auto s = synth_shape(*p.arch, TinyConfig{name.c_str(), p.kv}, o);
  REQUIRE(s.ok());
  return std::move(s.value());
}

// A GPU-kind profile with round numbers: 1000 GB/s, `tflops` dense everywhere, no fixed costs,
// every efficiency 1.
HwProfile round_profile(double tflops, double op_us = 0) {
  return parse_hw_profile(json{{"name", "round"},
                               {"kind", "gpu"},
                               {"memory_gb", 100},
                               {"memory_bandwidth_gbs", 1000},
                               {"compute_tflops", {{"f32", tflops}}},
                               {"op_overhead_us", op_us},
                               {"efficiency", {{"memory", 1}, {"compute", 1}, {"attention", 1}}},
                               {"interconnect", {{"bandwidth_gbs", 100}, {"latency_us", 5}}}},
                          "test");
}

double op_bytes(const StepTime& s, const std::string& prefix) {
  double b = 0;
  for (const OpTime& op : s.ops)
    if (op.op.rfind(prefix, 0) == 0) b += op.bytes;
  return b;
}

}  // namespace

TEST_CASE("perf: the Llama-3.2-1B shape's bytes and FLOPs per token, by hand") {
  const ModelShape s = preset_shape("llama-3.2-1b", DType::Q4_0);
  const ModelCosts c = model_costs(s, "cpu", DType::F16, DType::F16);
  // Per layer: q and o 2048x2048, k and v 2048x512, gate/up/down 2048x8192; 16 layers; a tied
  // 128256 x 2048 embedding is the output head. Q4_0: 18 bytes per 32 weights.
  const double layer = 2.0 * 2048 * 2048 + 2.0 * 2048 * 512 + 3.0 * 2048 * 8192;
  const double embd = 128256.0 * 2048;
  const double q4 = 18.0 / 32;
  const double norms = (16 * 2 + 1) * 2048 * 4.0 + 32 * 4;  // two norms a layer, the final one, rope_freqs [32]
  const StepTime d = decode_step(c, round_profile(1000), PerfOptions{}, 1, 0);
  CHECK(op_bytes(d, "matmul q4_0") == doctest::Approx(16 * layer * q4));
  CHECK(op_bytes(d, "output q4_0") == doctest::Approx(embd * q4));
  CHECK(op_bytes(d, "embedding") == doctest::Approx(2048 * q4));  // one row
  CHECK(op_bytes(d, "vectors") == doctest::Approx(norms));
  // synth writes an untied head (output.weight, which llama binds when present) beside the embedding.
  CHECK(c.weights_bytes == doctest::Approx((16 * layer + 2 * embd) * q4 + norms));
  CHECK(c.weights_bytes_active == doctest::Approx(c.weights_bytes - (embd - 2048) * q4));  // one embedding row
  double flops = 0;
  for (const OpTime& op : d.ops)
    if (op.op != "attention") flops += op.flops;
  CHECK(flops == doctest::Approx(2 * (16 * layer + embd)));
  // KV: 8 heads x 64 x (K + V) x 16 layers of f16; q8_0 stores 34 bytes per 32 values.
  CHECK(c.kv_bytes_per_token == 16 * 2 * 512 * 2.0);
  CHECK(model_costs(s, "cpu", DType::Q8_0, DType::Q8_0).kv_bytes_per_token == 16 * 2 * 512 * 34.0 / 32);
  // Attention at context 1000: the new token attends to 1001 positions of every layer.
  const StepTime a = decode_step(c, round_profile(1000), PerfOptions{}, 1, 1000);
  CHECK(op_bytes(a, "attention") == doctest::Approx(1001 * c.kv_bytes_per_token));
}

TEST_CASE("perf: the activations the ops between the products move, by hand") {
  // Per layer: two residual adds (24 n_embd), each norm and its mul (16 n), ROPE over q and k
  // (8 (q + k)), the KV store (6 (k + v)), the FFN's activation (12 per gated row, a token's
  // experts); the output norm once (16 n_embd).
  SUBCASE("Llama-3.2-1B: 2048 wide, q 2048, k and v 512, FFN 8192, 16 layers") {
    const double layer = 24.0 * 2048 + 2 * 16.0 * 2048 + 8.0 * (2048 + 512) + 6.0 * (512 + 512) + 12.0 * 8192;
    const ModelCosts c = model_costs(preset_shape("llama-3.2-1b", DType::Q4_0), "cpu", DType::F16, DType::F16);
    CHECK(c.elementwise_bytes_per_token == doctest::Approx(16 * layer + 16.0 * 2048));
  }
  SUBCASE("Qwen3-0.6B: q/k norms of one head's width run over every head") {
    const double q = 16 * 128, k = 8 * 128;
    const double layer = 24.0 * 1024 + 2 * 16.0 * 1024 + 16.0 * (q + k) + 8.0 * (q + k) + 6.0 * (2 * k) + 12.0 * 3072;
    const ModelCosts c = model_costs(preset_shape("qwen3-0.6b", DType::Q8_0), "cpu", DType::F16, DType::F16);
    CHECK(c.elementwise_bytes_per_token == doctest::Approx(28 * layer + 16.0 * 1024));
  }
  SUBCASE("Qwen3-30B-A3B: 8 experts of 768 a token, and their sum") {
    const double q = 32 * 128, k = 4 * 128;
    const double layer = 24.0 * 2048 + 2 * 16.0 * 2048 + 16.0 * (q + k) + 8.0 * (q + k) + 6.0 * (2 * k) +
                         12.0 * 768 * 8 + 4.0 * 9 * 2048;
    const ModelCosts c = model_costs(preset_shape("qwen3-30b-a3b", DType::Q4_K), "cpu", DType::F16, DType::F16);
    CHECK(c.elementwise_bytes_per_token == doctest::Approx(48 * layer + 16.0 * 2048));
  }
}

TEST_CASE("perf: MLA's latent cache, an MoE layer's active bytes, windows and recurrent state") {
  SUBCASE("deepseek2: one latent + rope row per layer, read once for every head") {
    const ModelCosts c = model_costs(preset_shape("deepseek2", DType::F32), "gpu", DType::F16, DType::F16);
    CHECK(c.kv_bytes_per_token == 2 * (64 + 16) * 2.0);  // 2 layers x (kv_lora 64 + rope 16) x f16
    REQUIRE(c.attention.size() == 2);
    CHECK(c.attention[0].flops_per_pos == 2.0 * 4 * ((64 + 16) + 64));  // 4 heads: q.latent+rope, p.latent
  }
  SUBCASE("qwen3-30b-a3b: a calibrated expert stream prices the experts a decode step reads") {
    const ModelCosts c = model_costs(preset_shape("qwen3-30b-a3b", DType::Q4_K), "cpu", DType::F16, DType::F16);
    json j = {{"kind", "cpu"}, {"cores", 2}, {"memory_gb", 64}, {"memory_bandwidth_gbs", 40}, {"op_overhead_us", 0},
              {"core_gflops", {{"int8", 1e6}}}, {"bandwidth_by_threads_gbs", {{"2", 40}}},
              {"stream_gbs", {{"q4_K", 40}}}, {"expert_stream_gbs", {{"q4_K", 20}}},
              {"efficiency", {{"memory", 1}, {"compute", 1}, {"attention", 1}}}};
    PerfOptions o;
    o.threads = 2;
    const StepTime d = decode_step(c, parse_hw_profile(j, "experts"), o, 1, 0);
    for (const OpTime& op : d.ops) {
      CAPTURE(op.op);
      if (op.op == "experts q4_K") CHECK(op.memory_seconds == doctest::Approx(op.bytes / 20e9));
      if (op.op == "matmul q4_K") CHECK(op.memory_seconds == doctest::Approx(op.bytes / 40e9));
    }
  }
  SUBCASE("qwen3-30b-a3b: 8 of 128 experts a token") {
    const ModelShape s = preset_shape("qwen3-30b-a3b", DType::Q8_0);
    const ModelCosts c = model_costs(s, "gpu", DType::F16, DType::F16);
    const double experts = 48 * 3.0 * 2048 * 768 * 128 * 34 / 32;  // gate, up, down of every layer
    const double embd_unread = (151936.0 - 1) * 2048 * 34 / 32;  // the untied embedding's other rows
    CHECK(c.weights_bytes - c.weights_bytes_active == doctest::Approx(experts * 120 / 128 + embd_unread));
    const StepTime d1 = decode_step(c, round_profile(1000), PerfOptions{}, 1, 0);
    CHECK(op_bytes(d1, "experts q8_0") == doctest::Approx(experts * 8 / 128));
    // A batch of 4 reads the expected distinct experts: 128 (1 - (120/128)^4) of them.
    const StepTime d4 = decode_step(c, round_profile(1000), PerfOptions{}, 4, 0);
    CHECK(op_bytes(d4, "experts q8_0") == doctest::Approx(experts * (1 - std::pow(120.0 / 128, 4))));
    CHECK(expected_distinct_experts(128, 8, 1) == doctest::Approx(8));
    CHECK(expected_distinct_experts(128, 8, 2) == doctest::Approx(128 * (1 - std::pow(120.0 / 128, 2))));
    CHECK(expected_distinct_experts(128, 8, 1e6) == doctest::Approx(128));
    CHECK(expected_distinct_experts(4, 8, 1) == 4);
  }
  SUBCASE("gemma3: five local layers in six stop at their window") {
    const ModelShape s = preset_shape("gemma3", DType::F32);  // 4 layers, window 8, pattern 3
    CHECK(s.window == std::vector<int32_t>{8, 8, 0, 8});
    const ModelCosts c = model_costs(s, "cpu", DType::F16, DType::F16);
    const double per_layer = c.kv_bytes_per_token / 4;
    const StepTime d = decode_step(c, round_profile(1000), PerfOptions{}, 1, 100);
    CHECK(op_bytes(d, "attention") == doctest::Approx(per_layer * (3 * 8 + 101)));
    const ModelShape oss = preset_shape("gpt-oss", DType::F32);
    CHECK(oss.window == std::vector<int32_t>{4, 0});
  }
  SUBCASE("nemotron_h: each Mamba layer's conv window and scan state, per sequence") {
    const ModelShape s = preset_shape("nemotron_h", DType::F32);
    int ssm_layers = 0;
    std::set<std::string> names;
    for (const ShapeTensor& t : s.tensors) names.insert(t.name);
    for (int l = 0; l < s.hp.n_layer; ++l) ssm_layers += names.count("blk." + std::to_string(l) + ".ssm_in.weight");
    REQUIRE(ssm_layers > 0);
    const HParams& h = s.hp;
    const double conv = (h.ssm_d_conv - 1.0) * (h.ssm_d_inner + 2.0 * h.ssm_n_group * h.ssm_d_state);
    const double state = 1.0 * h.ssm_d_state * h.ssm_d_inner;
    CHECK(model_costs(s, "cpu", DType::F16, DType::F16).state_bytes_per_seq == ssm_layers * 4 * (conv + state));
  }
}

TEST_CASE("perf: step times on a profile of round numbers") {
  const ModelShape s = preset_shape("llama", DType::F32);
  const ModelCosts c = model_costs(s, "gpu", DType::F16, DType::F16);
  PerfOptions o;
  // Memory-bound (huge compute): a step is its bytes over 1000 GB/s.
  const StepTime m = decode_step(c, round_profile(1e6), o, 1, 10);
  CHECK(m.seconds == doctest::Approx(m.bytes / 1e12));
  CHECK(m.memory_seconds > m.compute_seconds);
  // Compute-bound (1 GFLOP/s): its FLOPs over 1e9.
  const StepTime f = decode_step(c, round_profile(1e-3), o, 8, 10);
  CHECK(f.seconds == doctest::Approx(f.flops / 1e9));
  // A fixed cost per op: every op of the step pays it once.
  int ops = c.n_other_ops;
  for (const MatmulCost& mm : c.matmuls) ops += mm.n_ops;
  CHECK(decode_step(c, round_profile(1e6, 2), o, 1, 10).seconds == doctest::Approx(m.seconds + ops * 2e-6));
  // The sampler scans each sampled row's whole vocabulary: a decode step of 8 sequences samples 8
  // rows, a prompt's last chunk one, any other chunk none.
  HwProfile sampling = round_profile(1e6);
  sampling.sample_ns_per_logit = 2;
  const double row = c.n_vocab * 2e-9;
  CHECK(c.n_vocab > 0);
  CHECK(decode_step(c, sampling, o, 8, 10).seconds == doctest::Approx(decode_step(c, round_profile(1e6), o, 8, 10).seconds + 8 * row));
  CHECK(chunk_step(c, sampling, o, 64, 0, 1).seconds == doctest::Approx(chunk_step(c, round_profile(1e6), o, 64, 0, 1).seconds + row));
  CHECK(chunk_step(c, sampling, o, 64, 0, 0).seconds == doctest::Approx(chunk_step(c, round_profile(1e6), o, 64, 0, 0).seconds));
  // Compute-bound from the batch at which the products' FLOPs outweigh their bytes: F32 weights
  // do 0.5 FLOP per byte and token, so at 1000 GB/s and 8 TFLOP/s that is batch 16.
  CHECK(compute_bound_batch(c, round_profile(8), o, 0) == 16);
  // Prefill in chunks: 1000 tokens in chunks of 512 cost the two chunk steps.
  o.n_batch = 512;
  const HwProfile hw = round_profile(10);
  CHECK(prefill_seconds(c, hw, o, 1000) ==
        doctest::Approx(chunk_step(c, hw, o, 512, 0, 0).seconds + chunk_step(c, hw, o, 488, 512, 1).seconds));
  // Two GPUs: half the bytes each, plus two ring all-reduces a layer of n_embd bf16 values:
  // 2 (N-1)/N x bytes / 100 GB/s + 2 (N-1) x 5 us each.
  PerfOptions tp2 = o;
  tp2.tp = 2;
  const StepTime t2 = decode_step(c, round_profile(1e6), tp2, 1, 10);
  const double ar = 2.0 * 1 / 2 * (64 * 2) / 100e9 + 2.0 * 5e-6;
  CHECK(t2.link_seconds == doctest::Approx(2 * s.hp.n_layer * ar));
  CHECK(t2.seconds == doctest::Approx(m.seconds / 2 + t2.link_seconds));
  // Memory: what is left after the weights, over the KV of one sequence.
  CHECK(max_batch_at_ctx(c, round_profile(1), o, 1000) ==
        static_cast<int64_t>((0.9 * 100e9 - c.weights_bytes) / (1000 * c.kv_bytes_per_token)));
}

TEST_CASE("perf: a calibrated CPU profile's streams and attention rates in a step") {
  const ModelShape shape = preset_shape("llama", DType::Q4_0);
  const ModelCosts c = model_costs(shape, "cpu", DType::F16, DType::F16);
  json j = {{"kind", "cpu"},         {"cores", 2},         {"memory_gb", 8},
            {"memory_bandwidth_gbs", 10}, {"op_overhead_us", 0}, {"core_gflops", {{"f32", 1e6}, {"int8", 1e6}}},
            {"bandwidth_by_threads_gbs", {{"1", 5}, {"2", 10}}},
            {"efficiency", {{"memory", 1}, {"compute", 1}, {"attention", 1}}}};
  PerfOptions o;
  o.threads = 2;
  const StepTime plain = decode_step(c, parse_hw_profile(j, "plain"), o, 1, 100);
  // q4_0 weights streaming at 40 GB/s instead of 10: their ops take a quarter of the time.
  j["stream_gbs"] = {{"q4_0", 40}};
  j["attention_decode_gflops_by_head_dim"] = {{std::to_string(static_cast<int>(shape.hp.head_dim_k)), 0.5}};
  j["attention_prefill_gflops_by_head_dim"] = {{std::to_string(static_cast<int>(shape.hp.head_dim_k)), 2.0}};
  const HwProfile hw = parse_hw_profile(j, "streams");
  const StepTime fast = decode_step(c, hw, o, 1, 100);
  auto op = [](const StepTime& s, const std::string& name) {
    for (const OpTime& t : s.ops)
      if (t.op == name) return t;
    FAIL("no op " << name);
    return OpTime{};
  };
  CHECK(op(fast, "matmul q4_0").seconds == doctest::Approx(op(plain, "matmul q4_0").seconds / 4));
  CHECK(op(fast, "embedding").seconds == doctest::Approx(op(plain, "embedding").seconds));  // a gather: the probe's
  // Attention: decode at 0.5 GFLOP/s, a chunk (prefill) at 2.
  const OpTime att = op(fast, "attention");
  CHECK(att.compute_seconds == doctest::Approx(att.flops / 0.5e9));
  const OpTime chunk = op(chunk_step(c, hw, o, 8, 100, 1), "attention");
  CHECK(chunk.compute_seconds == doctest::Approx(chunk.flops / 2e9));
  // Without a measured stream, a decode step's attention reads its cache at the bandwidth; with
  // one, at that stream (a one-token chunk alike), while a chunk's stays at the bandwidth.
  CHECK(att.memory_seconds == doctest::Approx(att.bytes / 10e9));
  j["attention_stream_gbs_by_head_dim"] = {{std::to_string(static_cast<int>(shape.hp.head_dim_k)), 2.5}};
  const HwProfile slow = parse_hw_profile(j, "attention stream");
  const OpTime att_slow = op(decode_step(c, slow, o, 4, 5000), "attention");
  CHECK(att_slow.memory_seconds == doctest::Approx(att_slow.bytes / 2.5e9));
  const OpTime one = op(chunk_step(c, slow, o, 1, 5000, 1), "attention");
  CHECK(one.memory_seconds == doctest::Approx(one.bytes / 2.5e9));
  const OpTime chunk_slow = op(chunk_step(c, slow, o, 8, 5000, 1), "attention");
  CHECK(chunk_slow.memory_seconds == doctest::Approx(chunk_slow.bytes / 10e9));
  // A chunk's attention to its own tokens at the diagonal's rate (1 GFLOP/s), to earlier positions
  // at the prefill rate (2): 8 tokens at position 100 do 36 positions' pairs of their own, 800
  // earlier ones.
  j["attention_prefill_diag_gflops_by_head_dim"] = {{std::to_string(static_cast<int>(shape.hp.head_dim_k)), 1.0}};
  const HwProfile diag = parse_hw_profile(j, "diagonal");
  const double per_pos = c.attention[0].flops_per_pos * static_cast<double>(c.attention.size());
  CHECK(op(chunk_step(c, diag, o, 8, 100, 1), "attention").compute_seconds ==
        doctest::Approx(36 * per_pos / 1e9 + 800 * per_pos / 2e9));
  CHECK(op(chunk_step(c, diag, o, 8, 0, 1), "attention").compute_seconds == doctest::Approx(36 * per_pos / 1e9));
  // The elementwise ops: every token's activations at the measured rate (else the bandwidth).
  CHECK(op(chunk_step(c, diag, o, 8, 100, 1), "elementwise").seconds ==
        doctest::Approx(8 * c.elementwise_bytes_per_token / 10e9));
  j["elementwise_gbs"] = 4;
  const StepTime e = chunk_step(c, parse_hw_profile(j, "elementwise"), o, 8, 100, 1);
  CHECK(op(e, "elementwise").bytes == doctest::Approx(8 * c.elementwise_bytes_per_token));
  CHECK(op(e, "elementwise").seconds == doctest::Approx(8 * c.elementwise_bytes_per_token / 4e9));
  CHECK(c.elementwise_bytes_per_token > 0);
}

TEST_CASE("perf: speculative decoding's expected tokens and speedup") {
  const ModelCosts c = model_costs(preset_shape("llama", DType::F32), "gpu", DType::F16, DType::F16);
  const HwProfile hw = round_profile(1e6);  // memory-bound: verifying 5 tokens costs about one step
  const SpecPrediction p = speculative(c, hw, PerfOptions{}, 100, 0.8, 4, 0);
  CHECK(p.tokens_per_step == doctest::Approx((1 - std::pow(0.8, 5)) / 0.2));
  const double t1 = decode_step(c, hw, PerfOptions{}, 1, 100).seconds;
  const double verify = chunk_step(c, hw, PerfOptions{}, 5, 100, 5).seconds;
  CHECK(p.speedup == doctest::Approx(p.tokens_per_step * t1 / verify));
  CHECK(speculative(c, hw, PerfOptions{}, 100, 0, 4, 0).tokens_per_step == doctest::Approx(1));
  // Drafting that costs as much as the target cannot win.
  CHECK(speculative(c, hw, PerfOptions{}, 100, 0.8, 4, 1).speedup < 1);
}

TEST_CASE("perf: hardware profiles") {
  for (const std::string& n : hw_profile_names()) {
    CAPTURE(n);
    const HwProfile p = load_hw_profile(n);
    CHECK(p.name == n);
    CHECK(p.bandwidth_gbs > 0);
    CHECK(p.memory_bytes > 0);
    CHECK(!p.sources.empty());
    CHECK(p.compute_gflops("int8", 1) > 0);
    // The JSON it writes reads back the same.
    const HwProfile q = parse_hw_profile(p.to_json(), n);
    CHECK(q.bandwidth_gbs == p.bandwidth_gbs);
    CHECK(q.compute_gflops("fp4", 4) == p.compute_gflops("fp4", 4));
  }
  const std::vector<std::string> listed = hw_profile_names();
  const std::set<std::string> names(listed.begin(), listed.end());
  for (const char* n : {"h100-sxm", "h200", "b200", "rtx-6000-ada"}) CHECK(names.count(n));
  // A CPU: one core's loads limit the bandwidth of few threads; compute scales with threads.
  const HwProfile z = load_hw_profile("ryzen-9-7950x");
  CHECK(z.bandwidth(1) == 30);
  CHECK(z.bandwidth(16) == doctest::Approx(83.2));
  CHECK(z.compute_gflops("int8", 4) == 4 * z.compute_gflops("int8", 1));
  CHECK(z.compute_gflops("f16", 1) == z.compute_gflops("f32", 1));  // no f16 unit: f32's rate
  // Hopper has no fp4 unit: fp8's rate.
  const HwProfile h = load_hw_profile("h100-sxm");
  CHECK(h.compute_gflops("fp4", 1) == h.compute_gflops("fp8", 1));
  // A measured profile: per thread count, and by batch between the batch-1 and the batch rates.
  json j = {{"kind", "cpu"}, {"cores", 2}, {"memory_gb", 8}, {"memory_bandwidth_gbs", 20}, {"op_overhead_us", 1},
            {"core_gflops", {{"f32", 10}, {"q4_0", 80}}}, {"core_gflops_batch1", {{"f32", 10}, {"q4_0", 20}}},
            {"bandwidth_by_threads_gbs", {{"1", 9}, {"2", 16}}}};
  const HwProfile m = parse_hw_profile(j, "measured");
  CHECK(m.bandwidth(1) == 9);
  CHECK(m.bandwidth(2) == 16);
  CHECK(m.bandwidth(8) == 16);
  CHECK(m.compute_gflops("q4_0", 1, 1) == doctest::Approx(20));
  CHECK(m.compute_gflops("q4_0", 1, 8) == doctest::Approx(50));  // halfway in log2 to 64
  CHECK(m.compute_gflops("q4_0", 2, 512) == doctest::Approx(160));
  // A type's measured stream (on all cores) scales with the thread count as the bandwidth does,
  // and is at most the bandwidth; a type not measured streams at the bandwidth.
  j["stream_gbs"] = {{"q4_0", 12}, {"q6_K", 24}};
  j["stream_gbs_by_batch"] = {{"q4_0", {{"2", 6}, {"8", 30}}}};
  j["core_gflops_experts"] = {{"q4_0", 40}};
  j["attention_prefill_gflops_by_head_dim"] = {{"64", 8}, {"128", 16}};
  j["attention_decode_gflops_by_head_dim"] = {{"64", 4}};
  j["attention_stream_gbs_by_head_dim"] = {{"64", 6}, {"128", 8}};
  j["attention_prefill_diag_gflops_by_head_dim"] = {{"128", 12}};
  j["elementwise_gbs"] = 32;
  j["expert_stream_gbs"] = {{"q4_0", 4}, {"q6_K", 40}};
  j["sample_ns_per_logit"] = 1.5;
  const HwProfile s = parse_hw_profile(parse_hw_profile(j, "measured").to_json(), "written");
  CHECK(s.sample_ns_per_logit == 1.5);
  // The diagonal's rate by the nearest measured width, on a share of the cores; none: 0. The
  // elementwise rate scaled to the threads as the bandwidth; none: the bandwidth.
  CHECK(s.attention_diag_rate(64, 2) == 12);
  CHECK(s.attention_diag_rate(128, 1) == 6);
  CHECK(m.attention_diag_rate(128, 2) == 0);
  // Routed experts: their own batch-1 stream, moved by the dense stream's change with the batch,
  // at most the bandwidth; a type without one streams as the dense products.
  CHECK(s.expert_bandwidth("q4_0", 2) == doctest::Approx(4));
  CHECK(s.expert_bandwidth("q4_0", 1) == doctest::Approx(4 * 9.0 / 16));
  CHECK(s.expert_bandwidth("q4_0", 2, 2) == doctest::Approx(2));   // the dense stream halves at 2
  CHECK(s.expert_bandwidth("q4_0", 2, 64) == doctest::Approx(4 * 16.0 / 12));  // the dense 12 -> 16 (capped)
  CHECK(s.expert_bandwidth("q6_K", 2) == doctest::Approx(16));  // measured 40: above the bandwidth
  CHECK(s.expert_bandwidth("q8_0", 1) == s.weight_bandwidth("q8_0", 1));
  CHECK(s.elementwise_bandwidth(2) == 32);
  CHECK(s.elementwise_bandwidth(1) == doctest::Approx(32 * 9.0 / 16));
  CHECK(m.elementwise_bandwidth(1) == 9);
  CHECK(s.weight_bandwidth("q4_0", 2) == doctest::Approx(12));
  CHECK(s.weight_bandwidth("q4_0", 1) == doctest::Approx(12 * 9.0 / 16));
  CHECK(s.weight_bandwidth("q8_0", 1) == 9);
  CHECK(s.weight_bandwidth("q6_K", 2) == doctest::Approx(16));  // measured 24: above the bandwidth
  CHECK(s.weight_bandwidth("q6_K", 1) == doctest::Approx(9));
  // By batch: the largest measured batch at or below it.
  CHECK(s.weight_bandwidth("q4_0", 2, 2) == doctest::Approx(6));
  CHECK(s.weight_bandwidth("q4_0", 2, 5) == doctest::Approx(6));
  CHECK(s.weight_bandwidth("q4_0", 2, 64) == doctest::Approx(16));  // 30, capped
  // Routed experts: their own large-batch rate, toward the batch-1 rate below 64 tokens.
  CHECK(s.expert_compute_gflops("q4_0", "int8", 2, 512) == doctest::Approx(80));
  CHECK(s.expert_compute_gflops("q4_0", "int8", 1, 8) == doctest::Approx(30));  // halfway from 20 to 40
  CHECK(s.expert_compute_gflops("q8_0", "int8", 1, 512) == doctest::Approx(s.compute_gflops("int8", 1)));
  // Attention by the nearest head width in log2, prefill or decode, on a share of the cores.
  CHECK(s.attention_rate(false, 64, 2) == 8);
  CHECK(s.attention_rate(false, 96, 2) == 16);   // 96 is nearer 128 than 64 in log2
  CHECK(s.attention_rate(false, 576, 2) == 16);  // MLA's latent row: the widest measured
  CHECK(s.attention_rate(false, 32, 1) == 4);    // 64's, on one of two cores
  CHECK(s.attention_rate(true, 128, 2) == 4);    // decode measured at 64 only
  CHECK(m.attention_rate(true, 64, 2) == 0);     // none measured: the model falls back to a format
  // A decode step's cache stream by the nearest width, scaled to the threads as the bandwidth;
  // none measured: the bandwidth.
  CHECK(s.attention_bandwidth(128, 2) == 8);
  CHECK(s.attention_bandwidth(80, 1) == doctest::Approx(6 * 9.0 / 16));
  CHECK(m.attention_bandwidth(128, 1) == 9);
  // Malformed profiles name the field.
  for (auto [field, value] :
       {std::pair<const char*, json>{"kind", "tpu"}, {"memory_bandwidth_gbs", -1}, {"core_gflops", json::object()},
        {"bandwidth_by_threads_gbs", {{"x", 1}}}, {"stream_gbs", {{"q4_0", -2}}},
        {"attention_decode_gflops_by_head_dim", {{"wide", 3}}}, {"attention_stream_gbs_by_head_dim", {{"64", 0}}},
        {"core_gflops_experts", 5},
        {"stream_gbs_by_batch", {{"q4_0", {{"0", 3}}}}}}) {
    json bad = j;
    bad[field] = value;
    CAPTURE(field);
    try {
      parse_hw_profile(bad, "bad");
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(field) != std::string::npos);
    }
  }
  CHECK_THROWS_AS(load_hw_profile("no-such-profile"), UsageError);
  // A calibrated profile names the build that measured it; another build warns that its kernel
  // speeds may be stale.
  HwProfile c = m;
  c.kestrel_commit = "0123abcd";
  CHECK(parse_hw_profile(c.to_json(), "stamped").kestrel_commit == "0123abcd");
  CHECK(stale_profile_warning(c, "/p.json", "0123abcd").empty());
  CHECK(stale_profile_warning(c, "/p.json", "unknown").empty());
  const std::string w = stale_profile_warning(c, "/p.json", "4567ef01");
  for (const char* part : {"/p.json", "0123abcd", "4567ef01", "kestrel bench --calibrate"}) {
    CAPTURE(part);
    CHECK(w.find(part) != std::string::npos);
  }
  CHECK(stale_profile_warning(m, "/p.json", "4567ef01").find("no commit recorded") != std::string::npos);
}

TEST_CASE("kestrel perf: table, JSON and the SVG plot") {
  const std::string svg = "/tmp/kestrel_perf_test.svg";
  std::remove(svg.c_str());
  auto r = run_cli("perf --preset llama-3.1-8b --hw h100-sxm --ctx 4096 --tp 1,2 --spec-accept 0.7 --plot " + svg);
  REQUIRE(r.code == 0);
  for (const char* part : {"decode by batch", "decode by context", "prefill by prompt length", "speculative decoding",
                           "tensor parallel", "sequences fit"})
    CHECK(r.out.find(part) != std::string::npos);
  std::ifstream in(svg);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  CHECK(text.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = text.find(s); p != std::string::npos; p = text.find(s, p + 1)) ++n;
    return n;
  };
  CHECK(count("<g class=\"chart\">") == 4);
  CHECK(count("<g") == count("</g>"));
  CHECK(count("<polyline") >= 4);
  CHECK(count("<circle") == 7);  // the decode steps of the seven default batch sizes on the roofline
  CHECK(text.find("nan") == std::string::npos);
  std::remove(svg.c_str());

  r = run_cli("perf --preset qwen3-30b-a3b --type q4_K --hw h100-sxm --json");
  REQUIRE(r.code == 0);
  const json j = json::parse(r.out);
  for (const char* k : {"decode_tok_s", "prefill_tok_s", "weights_bytes", "kv_bytes_per_token", "moe",
                        "decode_by_batch", "compute_bound_batch", "max_batch_at_ctx"})
    CHECK(j.contains(k));
  CHECK(j["decode_by_batch"][0]["distinct_experts"].get<double>() == doctest::Approx(8));
  CHECK(j["weights_bytes_active"].get<double>() < j["weights_bytes"].get<double>() / 5);

  // -m reads a file's header; --hw local reads the calibrated profile ($KESTREL_HW_PROFILE here).
  const std::string prof = "/tmp/kestrel_perf_test_hw.json";
  {
    std::ofstream p(prof);
    p << json{{"name", "local"}, {"kind", "cpu"}, {"cores", 2}, {"memory_gb", 8}, {"memory_bandwidth_gbs", 10},
              {"op_overhead_us", 1}, {"core_gflops", {{"f32", 10}, {"int8", 40}}}}
             .dump();
  }
  const std::string model = kestrel::test::testdata_file("models/stories260K-q8_0.gguf");
  if (!model.empty()) {
    setenv("KESTREL_HW_PROFILE", prof.c_str(), 1);
    r = run_cli("perf -m " + model + " --hw local -t 2 --ctx 64 --json");
    unsetenv("KESTREL_HW_PROFILE");
    REQUIRE(r.code == 0);
    const json s = json::parse(r.out);
    CHECK(s["hw"] == "local");
    CHECK(s["threads"] == 2);
    CHECK(s["decode_tok_s"].get<double>() > 0);
    CHECK(s["prefill_tok_s"].get<double>() > s["decode_tok_s"].get<double>());
    const json h = json::parse(run_cli("info --json -m " + model).out)["hparams"];
    CHECK(s["kv_bytes_per_token"].get<double>() ==
          h["n_layer"].get<double>() * h["n_head_kv"].get<double>() *
              (h["head_dim_k"].get<double>() + h["head_dim_v"].get<double>()) * 2);  // f16 K and V
  }
  std::remove(prof.c_str());

  CHECK(run_cli("perf --preset llama-3.1-8b --hw no-such-hw").code == 2);
  CHECK(run_cli("perf --hw h100-sxm").code == 2);  // no model
  CHECK(run_cli("perf --preset llama-3.1-8b --hw ryzen-9-7950x --tp 2").code == 2);
  // Options that would not apply are refused, not ignored.
  CHECK(run_cli("perf --preset llama-3.1-8b --hw h100-sxm -t 4").code == 2);
  CHECK(run_cli("perf --preset llama-3.1-8b --hw h100-sxm --spec-draft 3").code == 2);
  CHECK(run_cli("perf -m x.gguf --type q4_0 --hw h100-sxm").code == 2);
}

TEST_CASE("kestrel bench --calibrate saves the profile kestrel perf --hw local reads") {
  if (!kestrel::test::thorough()) return;  // seconds of measuring; the sanitizer build skips it
  const std::string prof = "/tmp/kestrel_perf_test_calibrated.json";
  std::remove(prof.c_str());
  setenv("KESTREL_HW_PROFILE", prof.c_str(), 1);
  setenv("KESTREL_CALIBRATE_STREAM_MIB", "16", 1);  // the streaming products' matrices: small, for time
  const auto cal = run_cli("bench --calibrate -t 1");
  const auto perf = run_cli("perf --preset llama --hw local --json");
  unsetenv("KESTREL_HW_PROFILE");
  unsetenv("KESTREL_CALIBRATE_STREAM_MIB");
  REQUIRE(cal.code == 0);
  const HwProfile p = load_hw_profile(prof);
  CHECK(p.is_cpu());
  CHECK(!p.kestrel_commit.empty());  // this build's: kestrel perf reads it without a warning
  CHECK(perf.err.find("calibrated by") == std::string::npos);
  CHECK(p.bandwidth(1) > 0);
  for (const char* t : {"f32", "int8", "q4_0", "q4_K", "q8_0"}) {
    CAPTURE(t);
    CHECK(p.gflops.at(t) > 0);
    CHECK(p.gflops_batch1.at(t) > 0);
    if (std::string(t) != "int8") {
      CHECK(p.stream_gbs.at(t) > 0);
      CHECK(p.expert_stream_gbs.at(t) > 0);
      CHECK(p.stream_gbs_by_batch.at(t).size() == 3);
      CHECK(p.expert_gflops.at(t) > 0);
    }
  }
  CHECK(p.op_overhead_by_threads.count(1));
  for (int head_dim : {64, 128}) {
    CAPTURE(head_dim);
    CHECK(p.attention_prefill_by_head_dim.at(head_dim) > 0);
    CHECK(p.attention_prefill_diag_by_head_dim.at(head_dim) > 0);
    CHECK(p.attention_decode_by_head_dim.at(head_dim) > 0);
    CHECK(p.attention_stream_by_head_dim.at(head_dim) > 0);
  }
  CHECK(p.elementwise_gbs > 0);
  CHECK(p.sample_ns_per_logit > 0);
  REQUIRE(perf.code == 0);
  CHECK(json::parse(perf.out)["decode_tok_s"].get<double>() > 0);

  // --calibrate-memory measures the bandwidths and streams again and keeps the rest.
  setenv("KESTREL_HW_PROFILE", prof.c_str(), 1);
  setenv("KESTREL_CALIBRATE_STREAM_MIB", "16", 1);
  const auto mem = run_cli("bench --calibrate-memory");
  const auto both = run_cli("bench --calibrate --calibrate-memory");
  const auto threads = run_cli("bench --calibrate-memory -t 1");
  unsetenv("KESTREL_CALIBRATE_STREAM_MIB");
  REQUIRE(mem.code == 0);
  const HwProfile r = load_hw_profile(prof);
  CHECK(r.gflops == p.gflops);
  CHECK(r.attention_prefill_by_head_dim == p.attention_prefill_by_head_dim);
  CHECK(r.elementwise_gbs == p.elementwise_gbs);
  CHECK(r.stream_gbs.size() == p.stream_gbs.size());
  CHECK(r.expert_stream_gbs.size() == p.expert_stream_gbs.size());
  CHECK(r.expert_stream_gbs != p.expert_stream_gbs);
  CHECK(r.stream_gbs != p.stream_gbs);  // measured again: the same to the last bit would be a copy
  for (const auto& [t, by_batch] : r.stream_gbs_by_batch) {
    CAPTURE(t);
    const double ratio = r.stream_gbs.at(t) / p.stream_gbs.at(t);
    for (const auto& [batch, gbs] : by_batch) CHECK(gbs == doctest::Approx(p.stream_gbs_by_batch.at(t).at(batch) * ratio));
  }
  CHECK(r.sources.back().find("--calibrate-memory") != std::string::npos);
  CHECK(both.code == 2);
  // With -m, only the streams that model reads: qwen3moe-f16's products and experts are F16, so
  // F16's two streams are measured again and Q8_0's keep the values planted here. The note on the
  // refresh stays one line, however many refreshes there were.
  const std::string moe = kestrel::test::testdata_file("models/qwen3moe-f16.gguf");
  if (!moe.empty()) {
    // The profile written with planted values, then `bench ARGS` run on it (small streams, for time).
    auto refresh = [&](const json& planted, const std::string& args) {
      std::ofstream(prof) << planted.dump();
      setenv("KESTREL_CALIBRATE_STREAM_MIB", "16", 1);
      const auto out = run_cli("bench " + args);
      unsetenv("KESTREL_CALIBRATE_STREAM_MIB");
      return out;
    };
    json planted = r.to_json();
    planted["stream_gbs"]["f16"] = 0.125, planted["expert_stream_gbs"]["f16"] = 0.375;
    planted["stream_gbs"]["q8_0"] = 0.25, planted["expert_stream_gbs"]["q8_0"] = 0.5;
    REQUIRE(refresh(planted, "--calibrate-memory -m " + moe).code == 0);
    const HwProfile m = load_hw_profile(prof);
    CHECK(m.stream_gbs.at("f16") != 0.125);
    CHECK(m.expert_stream_gbs.at("f16") != 0.375);
    CHECK(m.stream_gbs.at("q8_0") == 0.25);
    CHECK(m.expert_stream_gbs.at("q8_0") == 0.5);
    CHECK(std::count_if(m.sources.begin(), m.sources.end(), [](const std::string& s) {
            return s.find("--calibrate-memory") != std::string::npos;
          }) == 1);
    // --calibrate -m: the model's rates too (a prefill's side), attention's and the elementwise ops'.
    planted = m.to_json();
    planted["core_gflops"]["f16"] = 0.5, planted["core_gflops_experts"]["f16"] = 0.625;
    planted["core_gflops"]["q8_0"] = 0.75, planted["core_gflops_experts"]["q8_0"] = 0.875;
    planted["elementwise_gbs"] = 0.25, planted["attention_prefill_gflops_by_head_dim"]["64"] = 0.25;
    planted["sample_ns_per_logit"] = 1234.5;
    const auto rates_t = run_cli("bench --calibrate -m " + moe + " -t 1");  // refused before it measures
    REQUIRE(refresh(planted, "--calibrate -m " + moe).code == 0);
    const HwProfile c = load_hw_profile(prof);
    CHECK(c.gflops.at("f16") != 0.5);
    CHECK(c.expert_gflops.at("f16") != 0.625);
    CHECK(c.gflops.at("q8_0") == 0.75);
    CHECK(c.expert_gflops.at("q8_0") == 0.875);
    CHECK(c.elementwise_gbs != 0.25);
    CHECK(c.sample_ns_per_logit != 1234.5);
    CHECK(c.attention_prefill_by_head_dim.at(64) != 0.25);
    CHECK(c.stream_gbs.at("q8_0") == 0.25);
    CHECK(c.sources.back().find("--calibrate -m") != std::string::npos);
    CHECK(rates_t.code == 2);
  }
  CHECK(threads.code == 2);
  CHECK(threads.err.find("--threads") != std::string::npos);
  // A profile another build measured, or none, is measured whole instead.
  json other = r.to_json();
  other["kestrel_commit"] = "0123abcd";
  std::ofstream(prof) << other.dump();
  const auto stale = run_cli("bench --calibrate-memory");
  std::remove(prof.c_str());
  const auto none = run_cli("bench --calibrate-memory");
  unsetenv("KESTREL_HW_PROFILE");
  CHECK(stale.code == 2);
  CHECK(stale.err.find("0123abcd") != std::string::npos);
  CHECK(stale.err.find("kestrel bench --calibrate") != std::string::npos);
  CHECK(none.code == 2);
  CHECK(none.err.find("kestrel bench --calibrate") != std::string::npos);
}

TEST_CASE("kestrel run --trace writes a Perfetto trace of its ops and steps") {
  const std::string model = kestrel::test::testdata_file("models/stories260K-q8_0.gguf");
  if (model.empty()) return;
  const std::string path = "/tmp/kestrel_cli_trace.json";
  std::remove(path.c_str());
  const auto r = run_cli("run -m " + model + " -p 'Once upon a time' -n 4 --temp 0 -t 2 --trace " + path);
  REQUIRE(r.code == 0);
  std::ifstream in(path);
  REQUIRE(in);
  const json t = json::parse(in);
  size_t ops = 0, decodes = 0;
  for (const json& e : t["traceEvents"]) {
    ops += e["cat"] == "op";
    decodes += e["name"] == "decode";
  }
  CHECK(ops > 20);
  CHECK(decodes >= 4);  // the prompt, then a token at a time
  CHECK(run_cli("run -m " + model + " -p x -n 1 --trace /no/such/dir/t.json").err.find("cannot write") != std::string::npos);
  std::remove(path.c_str());
}
