#include "bench_roofline.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "core/thread_pool.h"

namespace kestrel::cli {

ModelCost model_cost(const nlohmann::json& d) {
  ModelCost c;
  c.n_params = d.value("n_params", 0.0);
  const auto& hp = d["hparams"];
  double embd_bytes = 0, embd_row = 0;
  bool has_output = false;
  double most = 0;
  for (const auto& [type, bytes] : d["tensor_types"].items())
    if (bytes.get<double>() > most) most = bytes.get<double>(), c.type_label = type;
  for (const auto& t : d["tensors"]) {
    const double bytes = t["bytes"].get<double>();
    const auto& shape = t["shape"];
    const std::string name = t["name"].get<std::string>();
    c.weight_bytes += bytes;
    double elems = 1;
    for (const auto& s : shape) elems *= s.get<double>();
    if (name == "token_embd.weight") {
      embd_bytes = bytes;
      embd_row = shape.size() >= 2 ? bytes / shape[1].get<double>() : bytes;
      continue;
    }
    if (name == "output.weight") has_output = true;
    // Routed experts (3-D *_exps tensors): a token reads only the n_expert_used it was sent to.
    double share = 1;
    if (shape.size() == 3 && name.find("_exps") != std::string::npos && hp.contains("moe")) {
      const double used = hp["moe"].value("n_expert_used", 0.0), total = hp["moe"].value("n_expert", 0.0);
      if (used > 0 && total > 0) share = used / total;
    }
    c.bytes_per_token += share * bytes;
    if (shape.size() >= 2) c.flops_per_token += 2 * elems * share;
  }
  c.bytes_per_token += embd_row;
  if (!has_output) {  // tied embeddings: the output head reads the whole embedding matrix
    c.bytes_per_token += embd_bytes;
    c.flops_per_token += 2 * (embd_row > 0 ? embd_bytes / embd_row : 0) * hp.value("n_embd", 0.0);
  }
  const double n_layer = hp.value("n_layer", 0.0), n_head = hp.value("n_head", 0.0);
  c.attn_flops_per_ctx = 2 * n_layer * n_head * (hp.value("head_dim_k", 0.0) + hp.value("head_dim_v", 0.0));
  c.kv_bytes_per_token = d.contains("memory") ? d["memory"].value("kv_bytes_per_token", 0.0) : 0.0;
  return c;
}

ReadProbe::ReadProbe(int n_threads) : n_threads_(std::max(1, n_threads)) {
  const size_t bytes = size_t{512} << 20;  // well past any L3 here
  n_ = bytes / sizeof(uint64_t);
  // Huge pages where the kernel grants them, as the CPU backend places weights (backends/cpu/weights_cpu.h):
  // on 4 KiB pages this loop measured TLB walks as much as DRAM (a VM's two-level page tables).
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  madvise(m, bytes, MADV_HUGEPAGE);
  buf_ = static_cast<uint64_t*>(m);
  // Touch every page from the threads that will read it (first-touch placement).
  std::vector<std::thread> th;
  for (int t = 0; t < n_threads_; ++t)
    th.emplace_back([&, t] {
      const size_t b = n_ * t / n_threads_, e = n_ * (t + 1) / n_threads_;
      for (size_t i = b; i < e; ++i) buf_[i] = i;
    });
  for (auto& x : th) x.join();
}

ReadProbe::~ReadProbe() { munmap(buf_, n_ * sizeof(uint64_t)); }

double ReadProbe::measure(int passes) const {
  double best = 0;
  std::vector<uint64_t> sink(n_threads_);
  std::vector<std::thread> th;
  for (int pass = 0; pass < passes; ++pass) {
    th.clear();
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < n_threads_; ++t)
      th.emplace_back([&, t] {
        const size_t b = n_ * t / n_threads_, e = n_ * (t + 1) / n_threads_;
        // Four independent sums so the loop is bound by loads, not by one addition chain.
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        size_t i = b;
        for (; i + 4 <= e; i += 4) s0 += buf_[i], s1 += buf_[i + 1], s2 += buf_[i + 2], s3 += buf_[i + 3];
        for (; i < e; ++i) s0 += buf_[i];
        sink[t] = s0 + s1 + s2 + s3;
      });
    for (auto& x : th) x.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n_ * sizeof(uint64_t)) / s / 1e9);
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  return best;
}

double measure_read_bandwidth(int n_threads) { return ReadProbe(n_threads).measure(4); }

DeviceBandwidth measure_device_bandwidth(const std::string& backend) {
  DeviceBandwidth r;
  if (backend == "cpu" || backend == "ref") {
    r.why = backend + " is a host backend";
    return r;
  }
  auto dev = create_device(backend);
  if (!dev.ok()) {
    r.why = dev.status().message();
    return r;
  }
  const BackendInfo& info = dev.value()->info();
  r.device = info.device;
  if (info.host_memory) {
    r.why = backend + " runs in host memory";
    return r;
  }
  const bool emulated = info.device.find("[emulated]") != std::string::npos;
  size_t bytes = emulated ? size_t{64} << 20 : size_t{1} << 30;
  // Two buffers of `bytes` next to the model's weights and KV cache: at most half of what is free.
  if (info.memory_free > 0) bytes = std::min<size_t>(bytes, info.memory_free / 4 / (size_t{1} << 20) * (size_t{1} << 20));
  if (bytes < (size_t{16} << 20)) {
    r.why = "too little device memory free for two 16 MiB buffers";
    return r;
  }
  auto bw = dev.value()->copy_bandwidth(bytes);
  if (!bw.ok() || bw.value() <= 0) {
    r.why = bw.ok() ? "the copy took no time" : bw.status().message();
    return r;
  }
  r.ok = true;
  r.gbs = bw.value();
  r.bytes = bytes;
  return r;
}

DeviceMemory open_device_memory(const std::string& backend) {
  DeviceMemory m;
  auto dev = create_device(backend);
  if (!dev.ok()) {
    m.why = dev.status().message();
    return m;
  }
  const BackendInfo& info = dev.value()->info();
  m.ok = true;
  m.name = info.name;
  m.device = info.device;
  m.host_memory = info.host_memory;
  m.total = info.memory_total;
  m.free = info.memory_free;
  return m;
}

double measure_pool_sync_us(int n_threads) {
  ThreadPool pool(std::max(1, n_threads));
  std::vector<double> us;
  std::atomic<int> sink{0};
  for (int rep = 0; rep < 21; ++rep) {
    const int n = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) pool.run([&](int ith, int) { sink.fetch_add(ith, std::memory_order_relaxed); });
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n);
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

}  // namespace kestrel::cli
