// The roofline side of `kestrel bench`: what one token costs (bytes of weights read, FLOPs) from
// the model's description, and the DRAM read bandwidth measured on this machine.
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
// Microseconds one parallel op costs the thread pool beyond its work: the median over many
// empty jobs on a pool of n_threads (decode runs hundreds of ops per token).
double measure_pool_sync_us(int n_threads);

}  // namespace kestrel::cli
