// The backend interface, in two lifetimes. A Device lives as long as a model: it owns the memory
// the backend's kernels read (the placed weights) and moves bytes between the host and itself. An
// Executor lives as long as a context: it runs whole ranges of a graph (so a device backend can
// capture and fuse) with its own threads or streams. Several contexts of one model share the
// model's Device, and so one copy of the placed weights.
//
// What runtime/ may include from backends/: this file only (tools/dev/check_layers.py).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/graph.h"

namespace kestrel {

struct BackendInfo {
  std::string name;    // "cpu", "ref", "cuda"
  std::string device;  // human-readable device description
  bool host_memory = true;  // its memory is host memory (the KV cache is checked against RAM)
  // Device memory in bytes when host_memory is false (free when the device was opened).
  uint64_t memory_total = 0;
  uint64_t memory_free = 0;
};

// What Device::place_weights did (`kestrel info`'s memory.weights_bytes_placed / _regrouped).
struct PlacedWeights {
  uint64_t placed_bytes = 0;     // copied into memory the device owns
  uint64_t regrouped_bytes = 0;  // of those, in a layout private to the backend (Tensor::layout)
};

class Executor;

// What an executor did besides running nodes (device backends; zeros elsewhere).
struct ExecutorStats {
  int64_t graph_runs = 0;              // runs long enough for a CUDA graph
  int64_t graph_captures = 0;          // graphs captured
  int64_t graph_replays = 0;           // runs that replayed a captured graph
  int64_t graph_capture_failures = 0;  // captures abandoned (those runs launched instead)
  int64_t library_gemms = 0;           // products issued to a vendor library (cuBLAS); a replay issues none
};

// Model lifetime; shared by every context of the model, so its functions are thread-safe.
class Device {
 public:
  virtual ~Device() = default;
  virtual const BackendInfo& info() const = 0;

  // Memory. A device error is KESTREL_ERR_BACKEND (or OUT_OF_MEMORY) with the device's own text.
  virtual Expected<void*> alloc(size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual Status write(void* dst, const void* src, size_t bytes) = 0;  // host -> device
  virtual Status read(void* dst, const void* src, size_t bytes) = 0;   // device -> host
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;   // device -> device

  // Puts the weights where this backend's kernels want them: for each tensor of f named in
  // `tensors` (entries point into f's data), may copy it into device memory, regroup it (setting
  // Tensor::layout) and repoint the entry. Tensors in `gather_only` are only read a row at a time
  // (GET_ROWS of an untied embedding). Called once, at model load; the memory lives as long as
  // the device.
  virtual Status place_weights(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors,
                               const std::unordered_set<std::string>& gather_only) = 0;
  virtual PlacedWeights placed() const { return {}; }

  // True when this backend has a kernel for the node (its op, types and layouts). Contexts check
  // every node of a graph when they are made and refuse naming the first that is not. There is
  // no per-node fallback to another backend yet: that needs tensors to record which memory they
  // live in.
  virtual bool supports(const Node& node) const = 0;
  // Names of the kernels this backend has (for `kestrel info` and tests); by default every op.
  virtual std::vector<std::string> kernels() const {
    std::vector<std::string> k;
    for (int i = 0; i < static_cast<int>(Op::COUNT); ++i) k.push_back(op_name(static_cast<Op>(i)));
    return k;
  }

  // Device-to-device copy bandwidth in GB/s, counting the bytes read and written, best of a few
  // copies of `bytes`: a device backend's roofline (`kestrel bench`). Host backends: UNSUPPORTED
  // (bench probes host reads itself).
  virtual Expected<double> copy_bandwidth(size_t bytes) {
    (void)bytes;
    return Error(KESTREL_ERR_UNSUPPORTED, info().name + ": no device copy bandwidth probe");
  }

  // A context's executor; n_threads is the CPU's worker count (ignored by device backends).
  virtual Expected<std::unique_ptr<Executor>> create_executor(int n_threads) = 0;
};

// Context lifetime; one thread at a time.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual Device& device() = 0;
  // Executes nodes [begin, end) of g in order (the graph's tensors in the device's memory).
  virtual Status run(Graph& g, size_t begin, size_t end) = 0;
  // Waits for the work run() queued (a no-op for host backends).
  virtual Status sync() { return Status::Ok(); }
  // Copies ordered with this executor's work (a device backend queues them on its stream; read
  // returns once the bytes are on the host). Default: the device's copies.
  virtual Status write(void* dst, const void* src, size_t bytes) { return device().write(dst, src, bytes); }
  virtual Status read(void* dst, const void* src, size_t bytes) { return device().read(dst, src, bytes); }
  virtual ExecutorStats stats() const { return {}; }
};

// backends/registry.cpp: "auto" picks the best available; "cpu"; "ref" (the scalar oracle);
// "cuda" (when compiled and a device exists).
Expected<std::unique_ptr<Device>> create_device(const std::string& name);
std::vector<std::string> compiled_backends();
// KESTREL_NO_REPACK set (not "0"): place_weights keeps the file's layouts, on every backend.
bool repack_disabled_by_env();

}  // namespace kestrel
