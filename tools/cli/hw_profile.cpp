#include "hw_profile.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "args.h"

namespace kestrel::cli {
namespace {

double positive(const nlohmann::json& j, const char* key, const std::string& origin, bool required) {
  if (!j.contains(key)) {
    if (required) throw UsageError("hardware profile " + origin + ": '" + key + "' is missing");
    return 0;
  }
  if (!j[key].is_number() || j[key].get<double>() < 0)
    throw UsageError("hardware profile " + origin + ": '" + key + "' must be a number >= 0");
  return j[key].get<double>();
}

// j[key] = {"N": value > 0, ...} keyed by a count (threads, a head width, a batch); errors name it
// as `shown` (default: key).
std::map<int, double> by_count(const nlohmann::json& j, const std::string& key, const std::string& origin,
                               const char* what = "threads", std::string shown = {}) {
  std::map<int, double> m;
  if (shown.empty()) shown = key;
  if (!j.contains(key)) return m;
  if (!j[key].is_object()) throw UsageError("hardware profile " + origin + ": '" + shown + "' must be an object");
  for (const auto& [k, v] : j[key].items()) {
    char* end = nullptr;
    const long t = std::strtol(k.c_str(), &end, 10);
    if (*end || t < 1 || !v.is_number() || v.get<double>() <= 0)
      throw UsageError("hardware profile " + origin + ": '" + shown + "' wants {\"" + what + "\": value > 0}");
    m[static_cast<int>(t)] = v.get<double>();
  }
  return m;
}

// {"name": value > 0, ...}
std::map<std::string, double> by_name(const nlohmann::json& j, const char* key, const std::string& origin) {
  std::map<std::string, double> m;
  if (!j.contains(key)) return m;
  if (!j[key].is_object()) throw UsageError("hardware profile " + origin + ": '" + key + "' must be an object");
  for (const auto& [k, v] : j[key].items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      throw UsageError("hardware profile " + origin + ": '" + key + "." + k + "' must be a number > 0");
    m[k] = v.get<double>();
  }
  return m;
}

// The entry of the largest thread count <= threads (else the smallest).
double at_threads(const std::map<int, double>& m, int threads) {
  auto it = m.upper_bound(threads);
  return it == m.begin() ? it->second : std::prev(it)->second;
}

}  // namespace

double HwProfile::bandwidth(int threads) const {
  if (!is_cpu()) return bandwidth_gbs;
  if (!bandwidth_by_threads.empty()) return at_threads(bandwidth_by_threads, threads);
  return core_bandwidth_gbs > 0 ? std::min(bandwidth_gbs, core_bandwidth_gbs * std::max(1, threads)) : bandwidth_gbs;
}

namespace {

// A format the hardware has no unit for runs on the next wider one; a type measured by name first.
double rate_of(const std::map<std::string, double>& m, const std::string& format) {
  static const std::vector<std::string> order = {"fp4", "int8", "fp8", "f16", "bf16", "f32"};
  if (auto it = m.find(format); it != m.end()) return it->second;
  for (auto pos = std::find(order.begin(), order.end(), format); pos != order.end(); ++pos)
    if (auto it = m.find(*pos); it != m.end()) return it->second;
  return m.empty() ? 0 : m.begin()->second;
}

}  // namespace

double HwProfile::expert_compute_gflops(const std::string& type, const std::string& format, int threads,
                                        double n_tokens) const {
  auto it = expert_gflops.find(type);
  if (it == expert_gflops.end()) return compute_gflops(gflops.count(type) ? type : format, threads, n_tokens);
  return scaled(it->second, type, threads, n_tokens);
}

double HwProfile::compute_gflops(const std::string& format, int threads, double n_tokens) const {
  return scaled(rate_of(gflops, format), format, threads, n_tokens);
}

double HwProfile::scaled(double g, const std::string& format, int threads, double n_tokens) const {
  if (!gflops_batch1.empty() && n_tokens < 64) {
    const double g1 = rate_of(gflops_batch1, format), f = std::log2(std::max(1.0, n_tokens)) / 6;
    g = g1 + (g - g1) * f;
  }
  return is_cpu() ? g * std::max(1, std::min(threads, cores > 0 ? cores : threads)) : g;
}

namespace {
// The value of the width nearest head_dim in log2, or `otherwise` when m is empty.
double nearest_width(const std::map<int, double>& m, double head_dim, double otherwise) {
  double best = 1e30, g = otherwise;
  for (const auto& [d, v] : m)
    if (const double dist = std::fabs(std::log2(d / std::max(1.0, head_dim))); dist < best) best = dist, g = v;
  return g;
}

// A stream a CPU profile measured on all its cores, at `threads`: scaled as the bandwidth scales.
double stream_at_threads(const HwProfile& p, double gbs, int threads) {
  return p.is_cpu() && p.cores > 0 ? gbs * p.bandwidth(threads) / p.bandwidth(p.cores) : gbs;
}

// A rate a CPU profile measured on all its cores, on `threads` of them.
double rate_at_threads(const HwProfile& p, double g, int threads) {
  return p.is_cpu() && p.cores > 0 ? g * std::min(1.0, static_cast<double>(threads) / p.cores) : g;
}
}  // namespace

double HwProfile::weight_bandwidth(const std::string& type, int threads, double batch) const {
  auto it = stream_gbs.find(type);
  if (it == stream_gbs.end()) return bandwidth(threads);
  double gbs = it->second;
  if (auto b = stream_gbs_by_batch.find(type); b != stream_gbs_by_batch.end())
    for (const auto& [n, v] : b->second)
      if (n <= batch) gbs = v;  // ascending: the largest measured batch <= batch
  return stream_at_threads(*this, is_cpu() && cores > 0 ? std::min(gbs, bandwidth(cores)) : gbs, threads);
}

double HwProfile::expert_bandwidth(const std::string& type, int threads, double batch) const {
  auto it = expert_stream_gbs.find(type);
  if (it == expert_stream_gbs.end()) return weight_bandwidth(type, threads, batch);
  const double at = weight_bandwidth(type, threads, batch) / weight_bandwidth(type, threads, 1);
  return stream_at_threads(*this, std::min(it->second * at, bandwidth(cores)), threads);
}

double HwProfile::attention_rate(bool decode, double head_dim, int threads) const {
  const std::map<int, double>& m = decode ? attention_decode_by_head_dim : attention_prefill_by_head_dim;
  return rate_at_threads(*this, nearest_width(m, head_dim, attention_gflops), threads);
}

double HwProfile::attention_diag_rate(double head_dim, int threads) const {
  return rate_at_threads(*this, nearest_width(attention_prefill_diag_by_head_dim, head_dim, 0), threads);
}

double HwProfile::elementwise_bandwidth(int threads) const {
  if (elementwise_gbs <= 0) return bandwidth(threads);
  return stream_at_threads(*this, elementwise_gbs, threads);
}

double HwProfile::attention_bandwidth(double head_dim, int threads) const {
  if (attention_stream_by_head_dim.empty()) return bandwidth(threads);
  return stream_at_threads(*this, nearest_width(attention_stream_by_head_dim, head_dim, 0), threads);
}

double HwProfile::op_us(int threads) const {
  if (is_cpu() && !op_overhead_by_threads.empty()) return at_threads(op_overhead_by_threads, threads);
  return op_overhead_us;
}

HwProfile parse_hw_profile(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw UsageError("hardware profile " + origin + ": not a JSON object");
  HwProfile p;
  p.name = j.value("name", origin);
  p.description = j.value("description", p.name);
  p.kind = j.value("kind", "");
  p.kestrel_commit = j.value("kestrel_commit", "");
  if (p.kind != "cpu" && p.kind != "gpu") throw UsageError("hardware profile " + origin + ": 'kind' must be \"cpu\" or \"gpu\"");
  p.memory_bytes = positive(j, "memory_gb", origin, true) * 1e9;
  p.bandwidth_gbs = positive(j, "memory_bandwidth_gbs", origin, true);
  p.core_bandwidth_gbs = positive(j, "core_bandwidth_gbs", origin, false);
  p.bandwidth_by_threads = by_count(j, "bandwidth_by_threads_gbs", origin);
  p.cores = static_cast<int>(positive(j, "cores", origin, p.kind == "cpu"));
  const char* compute_key = p.is_cpu() ? "core_gflops" : "compute_tflops";
  if (!j.contains(compute_key) || !j[compute_key].is_object() || j[compute_key].empty())
    throw UsageError("hardware profile " + origin + ": '" + compute_key + "' is missing (an object of format: rate)");
  for (const auto& [k, v] : j[compute_key].items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      throw UsageError("hardware profile " + origin + ": '" + compute_key + "." + k + "' must be a number > 0");
    p.gflops[k] = v.get<double>() * (p.is_cpu() ? 1 : 1000);
  }
  p.gflops_batch1 = by_name(j, "core_gflops_batch1", origin);
  p.op_overhead_us = positive(j, "op_overhead_us", origin, true);
  p.op_overhead_by_threads = by_count(j, "op_overhead_by_threads_us", origin);
  p.step_overhead_us = positive(j, "step_overhead_us", origin, false);
  p.attention_gflops = positive(j, "attention_gflops", origin, false);
  p.attention_prefill_by_head_dim = by_count(j, "attention_prefill_gflops_by_head_dim", origin, "head_dim");
  p.attention_decode_by_head_dim = by_count(j, "attention_decode_gflops_by_head_dim", origin, "head_dim");
  p.attention_stream_by_head_dim = by_count(j, "attention_stream_gbs_by_head_dim", origin, "head_dim");
  p.attention_prefill_diag_by_head_dim = by_count(j, "attention_prefill_diag_gflops_by_head_dim", origin, "head_dim");
  p.elementwise_gbs = positive(j, "elementwise_gbs", origin, false);
  p.sample_ns_per_logit = positive(j, "sample_ns_per_logit", origin, false);
  p.stream_gbs = by_name(j, "stream_gbs", origin);
  if (j.contains("stream_gbs_by_batch")) {
    if (!j["stream_gbs_by_batch"].is_object())
      throw UsageError("hardware profile " + origin + ": 'stream_gbs_by_batch' must be an object");
    for (const auto& el : j["stream_gbs_by_batch"].items())
      p.stream_gbs_by_batch[el.key()] =
          by_count(j["stream_gbs_by_batch"], el.key(), origin, "batch", "stream_gbs_by_batch." + el.key());
  }
  p.expert_gflops = by_name(j, "core_gflops_experts", origin);
  p.expert_stream_gbs = by_name(j, "expert_stream_gbs", origin);
  if (j.contains("efficiency")) {
    const auto& e = j["efficiency"];
    for (auto [key, dst] : {std::pair{"memory", &p.eff_memory}, {"compute", &p.eff_compute}, {"attention", &p.eff_attention}})
      if (e.contains(key)) {
        const double v = positive(e, key, origin, true);
        if (v <= 0 || v > 1) throw UsageError("hardware profile " + origin + ": 'efficiency." + key + "' must be in (0, 1]");
        *dst = v;
      }
  }
  if (j.contains("interconnect")) {
    const auto& l = j["interconnect"];
    p.link_name = l.value("name", "");
    p.link_gbs = positive(l, "bandwidth_gbs", origin, true);
    p.link_latency_us = positive(l, "latency_us", origin, true);
  }
  if (j.contains("sources") && j["sources"].is_array())
    for (const auto& s : j["sources"])
      if (s.is_string()) p.sources.push_back(s.get<std::string>());
  return p;
}

nlohmann::json HwProfile::to_json() const {
  nlohmann::json j = {{"name", name}, {"description", description}, {"kind", kind}, {"memory_gb", memory_bytes / 1e9},
                      {"memory_bandwidth_gbs", bandwidth_gbs}, {"op_overhead_us", op_overhead_us},
                      {"step_overhead_us", step_overhead_us},
                      {"efficiency", {{"memory", eff_memory}, {"compute", eff_compute}, {"attention", eff_attention}}}};
  if (cores) j["cores"] = cores;
  if (!kestrel_commit.empty()) j["kestrel_commit"] = kestrel_commit;
  if (attention_gflops > 0) j["attention_gflops"] = attention_gflops;
  if (core_bandwidth_gbs > 0) j["core_bandwidth_gbs"] = core_bandwidth_gbs;
  nlohmann::json c = nlohmann::json::object();
  for (const auto& [k, v] : gflops) c[k] = is_cpu() ? v : v / 1000;
  j[is_cpu() ? "core_gflops" : "compute_tflops"] = c;
  if (!gflops_batch1.empty()) j["core_gflops_batch1"] = gflops_batch1;
  auto count_json = [](const std::map<int, double>& m) {  // keyed by a count (threads, a head width)
    nlohmann::json o = nlohmann::json::object();
    for (const auto& [t, v] : m) o[std::to_string(t)] = v;
    return o;
  };
  if (!bandwidth_by_threads.empty()) j["bandwidth_by_threads_gbs"] = count_json(bandwidth_by_threads);
  if (!op_overhead_by_threads.empty()) j["op_overhead_by_threads_us"] = count_json(op_overhead_by_threads);
  if (!attention_prefill_by_head_dim.empty())
    j["attention_prefill_gflops_by_head_dim"] = count_json(attention_prefill_by_head_dim);
  if (!attention_decode_by_head_dim.empty())
    j["attention_decode_gflops_by_head_dim"] = count_json(attention_decode_by_head_dim);
  if (!attention_stream_by_head_dim.empty())
    j["attention_stream_gbs_by_head_dim"] = count_json(attention_stream_by_head_dim);
  if (!attention_prefill_diag_by_head_dim.empty())
    j["attention_prefill_diag_gflops_by_head_dim"] = count_json(attention_prefill_diag_by_head_dim);
  if (elementwise_gbs > 0) j["elementwise_gbs"] = elementwise_gbs;
  if (sample_ns_per_logit > 0) j["sample_ns_per_logit"] = sample_ns_per_logit;
  if (!stream_gbs.empty()) j["stream_gbs"] = stream_gbs;
  for (const auto& [type, by_batch] : stream_gbs_by_batch) j["stream_gbs_by_batch"][type] = count_json(by_batch);
  if (!expert_gflops.empty()) j["core_gflops_experts"] = expert_gflops;
  if (!expert_stream_gbs.empty()) j["expert_stream_gbs"] = expert_stream_gbs;
  if (link_gbs > 0) j["interconnect"] = {{"name", link_name}, {"bandwidth_gbs", link_gbs}, {"latency_us", link_latency_us}};
  j["sources"] = sources;
  return j;
}

std::vector<std::string> hw_profile_names() {
  std::vector<std::string> n;
  for (const auto& [name, text] : builtin_hw_profiles()) n.push_back(name);
  return n;
}

std::string local_profile_path() {
  if (const char* p = std::getenv("KESTREL_HW_PROFILE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kestrel/hw-local.json";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/kestrel/hw-local.json";
}

bool local_profile_exists() {
  struct stat st{};
  return stat(local_profile_path().c_str(), &st) == 0;
}

std::string stale_profile_warning(const HwProfile& p, const std::string& path, const std::string& commit) {
  if (commit.empty() || commit == "unknown" || p.kestrel_commit == commit || p.kestrel_commit == "unknown") return "";
  return "the profile at " + path + " was calibrated by " +
         (p.kestrel_commit.empty() ? "an older kestrel (no commit recorded)" : "kestrel commit " + p.kestrel_commit) +
         ", this is commit " + commit + ": its kernel speeds may be out of date (kestrel bench --calibrate measures again)";
}

HwProfile load_hw_profile(const std::string& name) {
  for (const auto& [n, text] : builtin_hw_profiles())
    if (n == name) return parse_hw_profile(nlohmann::json::parse(text), n);
  const std::string path = name == "local" ? local_profile_path() : name;
  std::ifstream in(path);
  if (!in) {
    if (name == "local") throw UsageError("no calibrated profile at " + path + " (run kestrel bench --calibrate)");
    std::string names;
    for (const std::string& n : hw_profile_names()) names += (names.empty() ? "" : ", ") + n;
    throw UsageError("unknown hardware profile '" + name + "' (built in: local, " + names + "; or a JSON file)");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw UsageError("hardware profile " + path + ": not valid JSON");
  return parse_hw_profile(j, path);
}

}  // namespace kestrel::cli
