// The roofline side of `kestrel bench`: what one token costs (bytes of weights read, FLOPs) from
// the model's description, and the bandwidth it is compared with: the DRAM read bandwidth
// measured on this machine (host backends), or a device backend's own copy bandwidth.
#pragma once
#include <nlohmann/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kestrel::cli {

struct ModelCost {
  double weight_bytes = 0;     // file bytes of all tensors
  double bytes_per_token = 0;  // weights read per generated token (embedding: one row; experts: the used share)
  double flops_per_token = 0;  // 2 x multiply-adds of the weight matrices (attention excluded)
  double attn_flops_per_ctx = 0;  // extra FLOPs per token per cached position (q.k and p.v)
  double kv_bytes_per_token = 0;  // KV cache bytes per cached position
  std::string type_label;      // the dominant tensor type, e.g. "q4_0"
  double n_params = 0;
};

ModelCost model_cost(const nlohmann::json& describe);
// Read bandwidth in GB/s over a buffer much larger than the caches, read by n_threads threads
// (best of a few passes). The buffer is kept so that bench can probe again right next to each
// generation run: this machine's bandwidth drifts by 2x within minutes.
class ReadProbe {
 public:
  explicit ReadProbe(int n_threads);
  ~ReadProbe();
  double measure(int passes) const;

 private:
  int n_threads_;
  size_t n_;
  uint64_t* buf_;
};
double measure_read_bandwidth(int n_threads);
// A device backend's roofline bandwidth: Device::copy_bandwidth of a second device opened by
// name (the model's shares its memory), over two buffers of `bytes` each (bytes read + written).
struct DeviceBandwidth {
  bool ok = false;
  double gbs = 0;
  size_t bytes = 0;    // size of each of the two buffers copied
  std::string device;  // BackendInfo::device, e.g. "NVIDIA H100 80GB HBM3 (sm_90)"
  std::string why;     // when !ok: why there is none (the backend is a host one, the probe failed)
};
// For a backend whose memory is not host memory ("cuda"): 1 GiB buffers, fewer bytes when a
// quarter of the free device memory is less, 64 MiB on the emulator. Host backends ("cpu",
// "ref"): ok = false and nothing is opened.
DeviceBandwidth measure_device_bandwidth(const std::string& backend);

// A backend's device as create_device opens it (no model): for `kestrel info -d cuda`, which
// says whether a model fits before loading it. ok = false with why when it cannot be opened.
struct DeviceMemory {
  bool ok = false;
  std::string why;
  std::string name, device;  // BackendInfo::name / device
  bool host_memory = true;
  uint64_t total = 0, free = 0;  // bytes (device backends; free when opened)
};
DeviceMemory open_device_memory(const std::string& backend);

// Microseconds one parallel op costs the thread pool beyond its work: the median over many
// empty jobs on a pool of n_threads (decode runs hundreds of ops per token).
double measure_pool_sync_us(int n_threads);

}  // namespace kestrel::cli
