// The emulated CUDA runtime (cuda_runtime_emu.h): host memory and synchronous copies.
#include "backends/cuda/emu/cuda_runtime_emu.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

using Ops = std::vector<std::function<std::string()>>;
struct CUstream_st {
  std::unique_ptr<Ops> capture;  // set while capturing
  bool invalidated = false;      // something capture forbids happened meanwhile
};
struct CUgraph_st {
  Ops ops;
};
struct CUgraphExec_st {
  Ops ops;
};

namespace {
thread_local cudaError_t g_last = cudaSuccess;
thread_local std::string g_graph_error;
thread_local CUstream_st* g_capturing_here = nullptr;  // this thread's capture (thread-local mode)
std::atomic<int> g_captures{0};                         // streams capturing, all threads
std::mutex g_capturing_mutex;
std::vector<CUstream_st*> g_capturing;  // which

// The legacy stream used while streams capture: an error, and their captures end invalidated
// (every stream here is a blocking one).
cudaError_t legacy_stream_use() {
  if (g_captures.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_capturing_mutex);
  for (CUstream_st* s : g_capturing) s->invalidated = true;
  return cudaErrorStreamCaptureImplicit;
}

// What capture forbids: fails, and a capture it breaks ends invalidated.
cudaError_t forbidden_during_capture(CUstream_st* s) {
  if (s && s->capture) {
    s->invalidated = true;
    return cudaErrorStreamCaptureUnsupported;
  }
  return cudaSuccess;
}
}  // namespace

namespace kestrel::cuda_emu {
void set_last_error(cudaError_t e) { g_last = e; }
bool record_if_capturing(cudaStream_t s, std::function<std::string()> op) {
  if (!s || !s->capture) return false;
  s->capture->push_back(std::move(op));
  return true;
}
const std::string& graph_launch_error() { return g_graph_error; }
}  // namespace kestrel::cuda_emu

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
  }
  return "unknown error";
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidValue;
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "SIMT emulator (host memory, one block at a time)");
  size_t f = 0;
  cudaMemGetInfo(&f, &p->totalGlobalMem);
  p->major = 9, p->minor = 0, p->multiProcessorCount = 1, p->memoryBusWidth = 0;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  *total_bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(page);
  *free_bytes = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<size_t>(page);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (cudaError_t e = forbidden_during_capture(g_capturing_here)) return e;
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);  // never 0 bytes
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  if (cudaError_t e = forbidden_during_capture(g_capturing_here)) return e;
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (cudaError_t e = legacy_stream_use()) return e;  // the legacy stream: every stream waits for it
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
// An asynchronous operation on s: recorded while s captures, else done now.
static cudaError_t on_stream(cudaStream_t s, const std::function<void()>& op) {
  if (!s)
    if (cudaError_t e = legacy_stream_use()) return e;
  if (!kestrel::cuda_emu::record_if_capturing(s, [op] {
        op();
        return std::string();
      }))
    op();
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  return on_stream(s, [=] {
    if (bytes) std::memmove(dst, src, bytes);
  });
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  return on_stream(s, [=] {
    if (bytes) std::memset(dst, value, bytes);
  });
}
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s && s->capture) return cudaErrorStreamCaptureUnsupported;
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return forbidden_during_capture(s); }
cudaError_t cudaDeviceSynchronize() {
  if (g_capturing_here) return forbidden_during_capture(g_capturing_here);
  return g_captures.load() > 0 ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

struct CUevent_st {
  std::chrono::steady_clock::time_point t;
  bool recorded = false;
};
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidValue;
  // A GPU would capture it as a graph node; the backend never records one while capturing.
  if (cudaError_t err = forbidden_during_capture(s)) return err;
  e->t = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end || !start->recorded || !end->recorded) return cudaErrorInvalidValue;
  *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s || s->capture || g_capturing_here) return cudaErrorStreamCaptureUnsupported;
  s->capture = std::make_unique<Ops>();
  s->invalidated = false;
  g_capturing_here = s;
  std::lock_guard<std::mutex> lock(g_capturing_mutex);
  g_capturing.push_back(s);
  ++g_captures;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!s || !s->capture) return cudaErrorInvalidValue;
  std::unique_ptr<Ops> ops = std::move(s->capture);
  if (g_capturing_here == s) g_capturing_here = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_capturing_mutex);
    g_capturing.erase(std::find(g_capturing.begin(), g_capturing.end(), s));
    --g_captures;
  }
  if (s->invalidated) return cudaErrorStreamCaptureInvalidated;
  *graph = new CUgraph_st{std::move(*ops)};
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!graph) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return cudaErrorInvalidValue;
  if (s && s->capture) return forbidden_during_capture(s);  // nested capture: not modelled
  g_graph_error.clear();
  for (const auto& op : exec->ops) {
    g_graph_error = op();
    if (!g_graph_error.empty()) return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
