// Hardware profiles for the performance model (kestrel perf): memory size and bandwidth, dense
// compute by number format, fixed costs per op and per step, the fraction of peak each op class
// reaches, and the link between GPUs. Nominal profiles are JSON files in tools/cli/hw/ built into
// the binary (with their sources); "local" is this machine as `kestrel bench --calibrate`
// measured it; any other name is a JSON file of the same form.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kestrel::cli {

struct HwProfile {
  std::string name, description, kind;  // kind: "cpu" or "gpu"
  // Calibrated profiles: the commit of the kestrel that measured it (kernel speeds change with
  // the code, so a profile from another build may mispredict); empty when not recorded.
  std::string kestrel_commit;
  double memory_bytes = 0;
  double bandwidth_gbs = 0;       // the whole device / every core
  double core_bandwidth_gbs = 0;  // CPU: what one thread's loads sustain (0: no per-core limit)
  std::map<int, double> bandwidth_by_threads;  // CPU, measured: threads -> GB/s
  int cores = 0;
  // GFLOP/s (int8: GOP/s) by format "f32", "f16", "bf16", "fp8", "int8", "fp4": a GPU's whole
  // device, a CPU's one core.
  std::map<std::string, double> gflops;
  // Measured (calibrated CPU profiles): the same at batch 1, a matrix-vector product's rate; a
  // batch of n interpolates between the two in log n up to 64.
  std::map<std::string, double> gflops_batch1;
  double op_overhead_us = 0;                    // per op: a kernel launch, a thread-pool barrier
  std::map<int, double> op_overhead_by_threads;  // CPU, measured
  double step_overhead_us = 0;                  // per decode step beyond its ops
  double attention_gflops = 0;  // measured attention rate (all threads); 0: f32's (f16's) x eff_attention
  // Measured (calibrated CPU profiles), on all `cores` threads: attention's rate by head width, in
  // prefill (a chunk's queries against the cache) and in decode (one query per sequence).
  std::map<int, double> attention_prefill_by_head_dim, attention_decode_by_head_dim;
  // The same for a chunk's attention to its own tokens (the causal triangle: tiles the mask cuts),
  // where prefill_by_head_dim is its attention to earlier positions.
  std::map<int, double> attention_prefill_diag_by_head_dim;
  // Measured (calibrated CPU profiles), on all `cores` threads: the GB/s a decode step's attention
  // reads a cache larger than the last-level caches at, by head width.
  std::map<int, double> attention_stream_by_head_dim;
  // Measured (calibrated CPU profiles): what each weight type's matrix-vector product streams
  // from memory on all `cores` threads (GB/s), its kernel's own pace included; a type not listed
  // streams at bandwidth().
  std::map<std::string, double> stream_gbs;
  // The same at batches 2, 4, 8 (the columns each product multiplies): type -> batch -> GB/s.
  std::map<std::string, std::map<int, double>> stream_gbs_by_batch;
  // Measured (calibrated CPU profiles), per core: each weight type's routed-expert product
  // (MATMUL_ID: group by expert, gather, a product per expert, scatter) over a prefill's tokens.
  std::map<std::string, double> expert_gflops;
  // Measured (calibrated CPU profiles), on all `cores` threads: what a decode step's routed
  // experts of each type stream at (one token, k of E experts a layer: a product per expert), in
  // place of stream_gbs for them.
  std::map<std::string, double> expert_stream_gbs;
  // Measured (calibrated CPU profiles), on all `cores` threads: the GB/s at which the ops between
  // the products (norms, rope, KV stores, activations, residual adds) move a 512-token chunk's
  // activations (ModelCosts::elementwise_bytes_per_token); 0: bandwidth().
  double elementwise_gbs = 0;
  // Measured (calibrated CPU profiles): the engine's greedy sampler's nanoseconds per vocabulary
  // entry of each row it samples (a sequence's token each decode step: it copies and scans the
  // whole row); 0: not counted.
  double sample_ns_per_logit = 0;
  double eff_memory = 0.8, eff_compute = 0.6, eff_attention = 0.5;
  std::string link_name;
  double link_gbs = 0, link_latency_us = 0;  // between GPUs, one direction
  std::vector<std::string> sources;

  bool is_cpu() const { return kind == "cpu"; }
  // At `threads` CPU threads (ignored on a GPU): read bandwidth, compute of a format or of a weight
  // type measured by name ("q4_K"; else the nearest wider format the profile lists), the cost of
  // one op.
  double bandwidth(int threads) const;
  // Reading a weight of `type` (a dtype name) at `batch` columns: its measured stream (at the
  // largest measured batch <= batch), at most the memory's bandwidth (a stream measured above it
  // caught a fast minute or the caches), scaled from all cores to `threads` as bandwidth()
  // scales; else bandwidth(threads).
  double weight_bandwidth(const std::string& type, int threads, double batch = 1) const;
  // Routed experts of `type` at `batch` tokens an expert: their measured batch-1 stream, times
  // the dense stream's change from batch 1 to `batch`, at most the bandwidth; else
  // weight_bandwidth.
  double expert_bandwidth(const std::string& type, int threads, double batch = 1) const;
  // Attention's GFLOP/s for heads of `head_dim` (the nearest measured width), prefill or decode,
  // at `threads`; 0 when the profile has no measurement (the model then uses a format's rate).
  double attention_rate(bool decode, double head_dim, int threads) const;
  // A prefill chunk's attention to its own tokens: the measured diagonal rate (as attention_rate
  // finds a width and scales it), 0 when not measured.
  double attention_diag_rate(double head_dim, int threads) const;
  // The elementwise ops' rate through their activations at `threads` (GB/s): elementwise_gbs
  // scaled from all cores as bandwidth() scales, else bandwidth(threads).
  double elementwise_bandwidth(int threads) const;
  // A decode step's attention reading its cache: the measured stream of the nearest head width,
  // scaled from all cores to `threads` as bandwidth() scales; else bandwidth(threads).
  double attention_bandwidth(double head_dim, int threads) const;
  double compute_gflops(const std::string& format, int threads, double n_tokens = 1e9) const;
  // Routed experts of a weight type: its measured expert rate in place of the dense products'
  // where calibrated (else compute_gflops of `format`).
  double expert_compute_gflops(const std::string& type, const std::string& format, int threads,
                               double n_tokens) const;
  double op_us(int threads) const;
  // g, a large batch's per-core rate of `format`, at n_tokens (toward the batch-1 rate below 64)
  // on `threads`.
  double scaled(double g, const std::string& format, int threads, double n_tokens) const;
  nlohmann::json to_json() const;
};

// Throws UsageError naming `origin` and the field when a profile is malformed.
HwProfile parse_hw_profile(const nlohmann::json& j, const std::string& origin);
// A built-in name (hw_profile_names), "local" (local_profile_path; UsageError when not yet
// calibrated), or a path to a JSON file.
HwProfile load_hw_profile(const std::string& name);
std::vector<std::string> hw_profile_names();
// Where `kestrel bench --calibrate` saves this machine's profile: $KESTREL_HW_PROFILE, else
// $XDG_CACHE_HOME/kestrel/hw-local.json, else ~/.cache/kestrel/hw-local.json.
std::string local_profile_path();
bool local_profile_exists();
// A warning when a calibrated profile was measured by another build of kestrel than `commit`
// (this one's), naming both and the command that measures again; empty when it matches or
// either commit is unknown.
std::string stale_profile_warning(const HwProfile& p, const std::string& path, const std::string& commit);

// The built-in profiles' file names (without .json) and texts (generated from tools/cli/hw).
const std::vector<std::pair<std::string, std::string>>& builtin_hw_profiles();

}  // namespace kestrel::cli
