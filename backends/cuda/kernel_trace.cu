#include "backends/cuda/kernel_trace.h"

#include "core/trace.h"

#if !defined(KESTREL_CUDA_EMULATE) && __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define KESTREL_NVTX 1
#endif

namespace kestrel::cuda {
namespace {

Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Error(KESTREL_ERR_BACKEND, std::string("cuda: tracing: ") + what + ": " + cudaGetErrorString(err));
}

void nvtx_push(const std::string& label) {
#ifdef KESTREL_NVTX
  nvtxRangePushA(label.c_str());
#else
  (void)label;
#endif
}

void nvtx_pop() {
#ifdef KESTREL_NVTX
  nvtxRangePop();
#endif
}

}  // namespace

std::string trace_label(const std::vector<Node>& nodes, size_t i, size_t count) {
  std::string label;
  for (size_t k = i; k < i + count && k < nodes.size(); ++k) {
    if (k > i) label += " + ";
    label += op_label(nodes[k]);
  }
  return label;
}

KernelTrace::~KernelTrace() {
  if (nvtx_open_) nvtx_pop();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

Status KernelTrace::mark() {
  cudaEvent_t e = nullptr;
  KS_RETURN_IF_ERROR(check(cudaEventCreate(&e), "creating an event"));
  events_.push_back(e);
  return check(cudaEventRecord(e, stream_), "recording an event");
}

Status KernelTrace::begin() {
  KS_RETURN_IF_ERROR(check(cudaStreamSynchronize(stream_), "synchronizing the stream"));
  KS_RETURN_IF_ERROR(mark());  // runs at once on an idle stream: the host's clock now
  host_t0_us_ = trace::now_us();
  return Status::Ok();
}

Status KernelTrace::unit(std::string label) {
  if (nvtx_open_) nvtx_pop();
  nvtx_push(label);
  nvtx_open_ = true;
  if (labels_.size() + 1 != events_.size()) KS_RETURN_IF_ERROR(mark());  // the first unit starts at begin()'s
  labels_.push_back(std::move(label));
  return Status::Ok();
}

Status KernelTrace::finish() {
  if (nvtx_open_) nvtx_pop(), nvtx_open_ = false;
  KS_RETURN_IF_ERROR(mark());
  KS_RETURN_IF_ERROR(check(cudaEventSynchronize(events_.back()), "waiting for the last event"));
  // Every time from the first event, so that a unit ends exactly where the next one starts.
  std::vector<float> ms(events_.size(), 0.0f);
  for (size_t i = 1; i < events_.size(); ++i)
    KS_RETURN_IF_ERROR(check(cudaEventElapsedTime(&ms[i], events_[0], events_[i]), "reading an event"));
  for (size_t i = 0; i < labels_.size(); ++i)
    trace::device_span("cuda stream", "kernel", labels_[i], host_t0_us_ + 1e3 * ms[i], 1e3 * (ms[i + 1] - ms[i]));
  return Status::Ok();
}

}  // namespace kestrel::cuda
