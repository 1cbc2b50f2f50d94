// The CUDA backend: a Device owning device memory and the uploaded weights (one copy per model,
// shared by its contexts), and an Executor per context with its own stream and scratch, running
// a graph node by node through the launchers of kernels.h. In the emulated build
// (KESTREL_CUDA_EMULATE) the same code runs on the SIMT emulator over host memory.
#include "backends/cuda/backend_cuda.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends/cuda/kernel_trace.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/step_graphs.h"
#include "core/log.h"
#include "core/trace.h"

namespace kestrel::cuda {

Status launch_result(const char* kernel, cudaError_t err) {
  if (err == cudaSuccess) return Status::Ok();
  return Error(KESTREL_ERR_BACKEND, std::string("cuda: launching ") + kernel + ": " + cudaGetErrorString(err));
}
Status launch_result(const char* kernel, const std::string& emu_error) {
  if (emu_error.empty()) return Status::Ok();
  return Error(KESTREL_ERR_BACKEND, std::string("cuda (emulated): kernel ") + kernel + ": " + emu_error);
}

TensorArg arg(const Tensor* t) {
  TensorArg a;
  if (!t) return a;
  a.data = static_cast<uint8_t*>(t->data);
  for (int i = 0; i < 4; ++i) a.ne[i] = t->ne[i], a.nb[i] = static_cast<int64_t>(t->nb[i]);
  return a;
}

namespace {

Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Error(err == cudaErrorMemoryAllocation ? KESTREL_ERR_OUT_OF_MEMORY : KESTREL_ERR_BACKEND,
               std::string("cuda: ") + what + ": " + cudaGetErrorString(err));
}

bool all_f32(const Node& n) {
  if (n.dst->type != DType::F32) return false;
  for (const Tensor* t : n.src)
    if (t && t->type != DType::F32) return false;
  return true;
}

}  // namespace

Status Stream::regrow(void*& buf, size_t& bytes, size_t want, const char* what) {
  if (capturing)
    return Error(KESTREL_ERR_BACKEND, std::string("cuda: the ") + what + " cannot grow while a step graph is captured");
  auto lock = device_work_lock();
  if (buf) {  // queued kernels may still use the old buffer
    KS_RETURN_IF_ERROR(check(cudaStreamSynchronize(stream), "synchronizing"));
    cudaFree(buf);
    buf = nullptr;
    bytes = 0;
  }
  KS_RETURN_IF_ERROR(check(cudaMalloc(&buf, want), ("allocating " + std::to_string(want) + " bytes of " + what).c_str()));
  bytes = want;
  return Status::Ok();
}

Expected<void*> Stream::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  forget_x();
  KS_RETURN_IF_ERROR(regrow(scratch_, scratch_bytes_, std::max<size_t>(bytes, size_t{1} << 20), "scratch"));
  return scratch_;
}

Expected<unsigned*> Stream::counters(size_t n) {
  if (n * sizeof(unsigned) > counters_bytes_) {
    KS_RETURN_IF_ERROR(regrow(counters_, counters_bytes_, std::max<size_t>(n, 4096) * sizeof(unsigned), "counters"));
    KS_RETURN_IF_ERROR(check(cudaMemsetAsync(counters_, 0, counters_bytes_, stream), "zeroing counters"));
  }
  return static_cast<unsigned*>(counters_);
}

// The bytes from t's first to one past its last element (a bound for strided views).
static std::pair<uintptr_t, uintptr_t> extent(const void* data, const int64_t* ne, const int64_t* nb, size_t elem) {
  uintptr_t end = reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(ne[0]) * elem;
  for (int i = 1; i < 4; ++i) end += static_cast<uintptr_t>(std::max<int64_t>(ne[i] - 1, 0) * nb[i]);
  return {reinterpret_cast<uintptr_t>(data), end};
}

std::pair<uintptr_t, uintptr_t> tensor_extent(const Tensor* t) {
  int64_t nb[4];
  for (int i = 0; i < 4; ++i) nb[i] = static_cast<int64_t>(t->nb[i]);
  return extent(t->data, t->ne, nb, std::max<size_t>(dtype_info(t->type).type_size, 4));
}

bool tensors_apart(const Tensor* p, const Tensor* q) {
  const auto [p0, p1] = tensor_extent(p);
  const auto [q0, q1] = tensor_extent(q);
  return p1 <= q0 || q1 <= p0;
}

void Stream::forget_x_if_written(const Tensor* t) {
  if (!x_key.data || !t) return;
  const auto [a0, a1] = extent(x_key.data, x_key.ne, x_key.nb, 4);
  const auto [b0, b1] = tensor_extent(t);
  if (a0 < b1 && b0 < a1) forget_x();
}

Expected<cublas::Handle> Stream::cublas_handle() {
  if (cublas_handle_) return cublas_handle_;
  if (!use_cublas) return Error(KESTREL_ERR_INTERNAL, "cuda: cuBLAS is not in use on this stream");
  if (capturing) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: the cuBLAS handle cannot be made while capturing");
  // A library that cannot be loaded or set up here is dropped for this stream (the tiles take its
  // products from then on), with a warning.
  const auto give_up = [&](const std::string& why) -> Status {
    static std::atomic<bool> warned{false};  // once per process, not once per context
    if (!warned.exchange(true)) KS_LOG_WARN("cuda: cuBLAS is not used, F16/BF16 batches stay on Kestrel's tiles: %s", why.c_str());
    drop_cublas();
    use_cublas = false, cublas_dequant = false;
    return Error(KESTREL_ERR_UNSUPPORTED, "cuda: " + why);
  };
  if (!cublas && !(cublas = cublas_api())) return give_up(cublas_missing_reason());
  bool allocated = false;
  {
    auto lock = device_work_lock();
    allocated = cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes) == cudaSuccess;
  }
  if (!allocated) {
    cudaGetLastError();
    cublas_workspace_ = nullptr;
    return give_up("no device memory for its workspace");
  }
  cublas::Handle h = nullptr;
  cublas::StatusT st = cublas->create(&h);
  if (st != 0) return give_up(std::string("creating a handle: ") + cublas->status_string(st));
  cublas_handle_ = h;  // destroyed by drop_cublas from here on
  if ((st = cublas->set_stream(h, stream)) == 0) st = cublas->set_workspace(h, cublas_workspace_, kCublasWorkspaceBytes);
  if (st != 0) return give_up(std::string("setting it up: ") + cublas->status_string(st));
  return h;
}

void Stream::drop_cublas() {
  auto lock = device_work_lock();
  if (cublas_handle_ && cublas) cublas->destroy(cublas_handle_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  cublas_handle_ = nullptr, cublas_workspace_ = nullptr;
}

Stream::~Stream() {
  drop_cublas();
  auto lock = device_work_lock();
  if (scratch_) cudaFree(scratch_);
  if (counters_) cudaFree(counters_);
}

namespace {

class CudaExecutor final : public Executor {
 public:
  explicit CudaExecutor(Device& d) : device_(d), graphs_(step_graphs_enabled_by_env()) {
    stream_.wgmma = wgmma_requested();
    stream_.use_cublas = cublas_wanted();
    stream_.cublas_dequant = stream_.use_cublas && cublas_dequant_requested();
    stream_.mxfp4_mma = mxfp4_mma_requested();
  }
  ~CudaExecutor() override {
    if (stream_.stream) {
      cudaStreamSynchronize(stream_.stream);
      stream_.drop_cublas();
      cudaStreamDestroy(stream_.stream);
    }
  }
  Status init() { return check(cudaStreamCreate(&stream_.stream), "creating a stream"); }
  Device& device() override { return device_; }

  // As one CUDA graph where an earlier run had the same signature (step_graphs.h); while a trace
  // records, launched unit by unit between events instead (kernel_trace.h).
  Status run(Graph& g, size_t begin, size_t end) override {
    if (trace::on()) {
      KernelTrace kt(stream_.stream);
      KS_RETURN_IF_ERROR(kt.begin());
      ktrace_ = &kt;
      const Status st = launch_nodes(g, begin, end);
      ktrace_ = nullptr;
      KS_RETURN_IF_ERROR(st);
      return kt.finish();
    }
    return graphs_.run(g.nodes(), begin, end, stream_, [&] { return launch_nodes(g, begin, end); });
  }
  Status launch_nodes(Graph& g, size_t begin, size_t end) {
    stream_.forget_x();  // the host or another backend may have written anything since
    for (size_t i = begin; i < end; ++i) {
      const Node& n = g.nodes()[i];
      if (const RopeStoreFusion rs = rope_store_fusion(g, i, end); rs.applies) {  // ROPE q, k, KV_STORE k, v
        if (ktrace_) KS_RETURN_IF_ERROR(ktrace_->unit("rope + kv_store"));
        stream_.forget_x();
        const Status st = run_rope_store(&n, rs.write_k, stream_);
        if (!st.ok())
          return Error(st.code(), "ROPE and KV_STORE (nodes " + std::to_string(i) + " to " + std::to_string(i + 3) +
                                      "): " + st.message());
        i += 3;
        continue;
      }
      const size_t fused = norm_fusion(g.nodes(), i, end);  // [ADD ->] RMS_NORM -> MUL in one kernel
      if (fused > 0) stream_.forget_x();
      const size_t taken = fused > 0 ? fused : 1;
      if (ktrace_) KS_RETURN_IF_ERROR(ktrace_->unit(trace_label(g.nodes(), i, taken)));  // "add + rms_norm + mul"
      const Node* next = i + taken < end ? &g.nodes()[i + taken] : nullptr;  // may take X's int8 form from this one
      const Status st = fused > 0 ? run_norm_fusion(&n, fused, stream_, next) : run_node(n, next);
      if (!st.ok()) return Error(st.code(), std::string(op_name(n.op)) + " (node " + std::to_string(i) + "): " + st.message());
      if (fused > 0) i += fused - 1;
    }
    return Status::Ok();
  }
  Status sync() override { return check(cudaStreamSynchronize(stream_.stream), "synchronizing the stream"); }
  Status write(void* dst, const void* src, size_t bytes) override {
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.stream), "copying to the device");
  }
  Status read(void* dst, const void* src, size_t bytes) override {
    KS_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.stream), "copying to the host"));
    return sync();
  }
  ExecutorStats stats() const override {
    ExecutorStats st = graphs_.stats();
    st.library_gemms = stream_.cublas_gemms;
    return st;
  }

 private:
  Status run_node(const Node& n, const Node* next) {
    if (n.op != Op::MATMUL && n.op != Op::MATMUL_ID) stream_.forget_x();
    switch (n.op) {
      case Op::GET_ROWS: return run_get_rows(n, stream_);
      case Op::RMS_NORM: return run_rms_norm(n, stream_);
      case Op::MUL:
      case Op::ADD:
      case Op::SILU:
      case Op::CONCAT: return run_elementwise(n, stream_);
      case Op::SWIGLU:
      case Op::GEGLU:
      case Op::SWIGLU_OAI: return run_elementwise(n, stream_, next);
      case Op::MATMUL:
      case Op::MATMUL_ID: return run_matmul(n, stream_);
      case Op::ROPE: return run_rope(n, stream_);
      case Op::SOFTMAX: return run_softmax(n, stream_);
      case Op::KV_STORE: return run_kv_store(n, stream_);
      case Op::ATTENTION: return run_attention(n, stream_);
      case Op::ROUTER: return run_router(n, stream_);
      case Op::MOE_SUM: return run_moe_sum(n, stream_);
      case Op::TOP_K: return run_top_k(n, stream_);
      case Op::RELU_SQR:
      case Op::SSM_CONV:
      case Op::SSM_SCAN: return run_ssm(n, stream_);
      case Op::COUNT: break;
    }
    return Error(KESTREL_ERR_INTERNAL, "cuda: no kernel");
  }

  Device& device_;
  Stream stream_;
  StepGraphs graphs_;
  KernelTrace* ktrace_ = nullptr;  // while run() traces
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(BackendInfo info) : info_(std::move(info)) {}
  ~CudaDevice() override {
    auto lock = device_work_lock();
    if (weights_) cudaFree(weights_);
  }
  const BackendInfo& info() const override { return info_; }

  Expected<void*> alloc(size_t bytes) override {
    void* p = nullptr;
    auto lock = device_work_lock();
    KS_RETURN_IF_ERROR(check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), ("allocating " + std::to_string(bytes) + " bytes").c_str()));
    return p;
  }
  // Device-wide (legacy stream, cudaFree's synchronization): never during another thread's capture.
  void release(void* p) override {
    auto lock = device_work_lock();
    cudaFree(p);
  }
  Status write(void* dst, const void* src, size_t n) override {
    auto lock = device_work_lock();
    return check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "copying to the device");
  }
  Status read(void* dst, const void* src, size_t n) override {
    auto lock = device_work_lock();
    return check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "copying to the host");
  }
  Status copy(void* dst, const void* src, size_t n) override {
    auto lock = device_work_lock();
    KS_RETURN_IF_ERROR(check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice), "copying on the device"));
    return check(cudaDeviceSynchronize(), "synchronizing");
  }

  // Every tensor the model reads goes to device memory, in one allocation, 256-byte aligned.
  Status place_weights(gguf::File&, std::unordered_map<std::string, Tensor>& tensors,
                       const std::unordered_set<std::string>& gather_only) override {
    if (weights_) return Error(KESTREL_ERR_INTERNAL, "cuda: weights placed twice");
    std::vector<Tensor*> todo;
    size_t total = 0;
    for (auto& [name, t] : tensors) {
      if (!t.data || t.n_bytes() == 0) continue;
      todo.push_back(&t);
      total += (t.n_bytes() + 255) / 256 * 256;
    }
    std::sort(todo.begin(), todo.end(), [](const Tensor* a, const Tensor* b) { return a->name < b->name; });
    if (total == 0) return Status::Ok();
    auto lock = device_work_lock();
    if (total > info_.memory_free)
      return Error(KESTREL_ERR_OUT_OF_MEMORY, "cuda: the weights need " + std::to_string(total) + " bytes of device memory, " +
                                                  info_.device + " has " + std::to_string(info_.memory_free) + " free of " +
                                                  std::to_string(info_.memory_total));
    Status st = check(cudaMalloc(&weights_, total), ("allocating " + std::to_string(total) + " bytes for the weights").c_str());
    if (!st.ok()) {
      weights_ = nullptr;
      return st;
    }
    size_t off = 0;
    std::vector<uint8_t> split;  // a matrix in the split-rows layout, on its way up
    const bool may_split = split_layout_enabled();
    for (Tensor* t : todo) {
      uint8_t* dst = static_cast<uint8_t*>(weights_) + off;
      const void* src = t->data;
      const bool splits = may_split && splits_rows(t->type, t->ne) && t->is_contiguous() && !gather_only.count(t->name);
      if (splits) {
        split.resize(t->n_bytes());
        split_rows(t->type, t->ne[0], t->n_rows(), static_cast<const uint8_t*>(t->data), split.data());
        src = split.data();
      }
      KS_RETURN_IF_ERROR(check(cudaMemcpy(dst, src, t->n_bytes(), cudaMemcpyHostToDevice), "uploading weights"));
      t->data = dst;
      if (splits) {
        t->layout = kLayoutSplitRows;
        placed_.regrouped_bytes += t->n_bytes();
      }
      off += (t->n_bytes() + 255) / 256 * 256;
    }
    placed_.placed_bytes = total;
    return Status::Ok();
  }
  PlacedWeights placed() const override { return placed_; }

  bool supports(const Node& n) const override {
    for (int i = 0; i < Node::kMaxSrc; ++i) {  // the split layout: only as the weights of its readers
      const Tensor* t = n.src[i];
      const bool reads_split = i == 0 && (n.op == Op::MATMUL || n.op == Op::MATMUL_ID || n.op == Op::GET_ROWS);
      if (t && t->layout != 0 && !(t->layout == kLayoutSplitRows && reads_split)) return false;
    }
    switch (n.op) {
      case Op::GET_ROWS: return weight_type_supported(n.src[0]->type) && n.dst->type == DType::F32;
      case Op::MATMUL:
      case Op::MATMUL_ID: {
        const DType t = n.src[0]->type;
        return weight_type_supported(t) && n.src[1]->type == DType::F32 && n.src[0]->ne[0] % dtype_info(t).block_size == 0 &&
               (dtype_info(t).block_size == 1 || n.src[0]->ne[0] % 32 == 0);
      }
      case Op::KV_STORE:
        return is_cache_type(n.src[0]->type) && (!is_block_cache(n.src[0]->type) || n.src[1]->ne[0] % 32 == 0);
      case Op::ATTENTION:
        return is_cache_type(n.src[1]->type) && is_cache_type(n.src[2]->type) && n.src[0]->type == DType::F32;
      case Op::ROUTER: return n.src[0]->type == DType::F32 && (2 * n.src[0]->ne[0] + 64) * 4 <= (48 << 10);
      case Op::ROPE:
        return n.src[0]->type == DType::F32 && n.dst->type == DType::F32 && n.src[1]->type == DType::I32 &&
               (!n.src[2] || n.src[2]->type == DType::F32);
      case Op::TOP_K: return top_k_supported(n);
      case Op::SSM_CONV:
      case Op::SSM_SCAN: return ssm_supported(n);
      case Op::COUNT: return false;
      default: return all_f32(n);
    }
  }
  Expected<double> copy_bandwidth(size_t bytes) override {
    auto a = alloc(bytes), b = alloc(bytes);
    if (!a.ok() || !b.ok()) {
      if (a.ok()) release(a.value());
      if (b.ok()) release(b.value());
      return Error(KESTREL_ERR_OUT_OF_MEMORY, "cuda: no room for two " + std::to_string(bytes) + "-byte buffers");
    }
    double best = 0;
    auto lock = device_work_lock();
    Status st = check(cudaMemsetAsync(a.value(), 1, bytes, nullptr), "filling");
    for (int i = 0; i < 6 && st.ok(); ++i) {  // the first copy warms up
      const auto t0 = std::chrono::steady_clock::now();
      st = check(cudaMemcpy(b.value(), a.value(), bytes, cudaMemcpyDeviceToDevice), "copying");
      if (st.ok()) st = check(cudaDeviceSynchronize(), "synchronizing");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0 && s > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
    }
    lock.unlock();
    release(a.value());
    release(b.value());
    KS_RETURN_IF_ERROR(st);
    return best;
  }
  Expected<std::unique_ptr<Executor>> create_executor(int) override {
    auto e = std::make_unique<CudaExecutor>(*this);
    KS_RETURN_IF_ERROR(e->init());
    return std::unique_ptr<Executor>(std::move(e));
  }

 private:
  BackendInfo info_;
  void* weights_ = nullptr;
  PlacedWeights placed_;
};

}  // namespace

bool emulated() {
#ifdef KESTREL_CUDA_EMULATE
  return true;
#else
  return false;
#endif
}

bool fp8_mma_available() {
  static const bool yes = [] {
    cudaDeviceProp prop{};  // device 0, as make_device selects
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
    return prop.major * 10 + prop.minor >= 89;
  }();
  return yes;
}

bool wgmma_requested() {
  static const bool sm90 = [] {
    cudaDeviceProp prop{};
    return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
  }();
  const char* v = std::getenv("KESTREL_CUDA_WGMMA");
  return sm90 && v && std::strcmp(v, "1") == 0 && !reference_kernels_only();
}

Expected<std::unique_ptr<Device>> make_device() {
  int n = 0;
  if (cudaError_t err = cudaGetDeviceCount(&n); err != cudaSuccess)
    return Error(KESTREL_ERR_UNSUPPORTED, std::string("no usable CUDA device (") + cudaGetErrorString(err) + ")");
  if (n == 0) return Error(KESTREL_ERR_UNSUPPORTED, "no CUDA devices");
  KS_RETURN_IF_ERROR(check(cudaSetDevice(0), "selecting device 0"));
  cudaDeviceProp prop{};
  KS_RETURN_IF_ERROR(check(cudaGetDeviceProperties(&prop, 0), "reading device properties"));
  size_t free_b = 0, total_b = 0;
  KS_RETURN_IF_ERROR(check(cudaMemGetInfo(&free_b, &total_b), "reading device memory"));
  BackendInfo info;
  info.name = "cuda";
  info.device = std::string(prop.name) + (emulated() ? " [emulated]" : " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")");
  info.host_memory = false;
  info.memory_total = total_b;
  info.memory_free = free_b;
  return std::unique_ptr<Device>(new CudaDevice(std::move(info)));
}

}  // namespace kestrel::cuda
