// Step graphs (step_graphs.h): a signature per run of nodes, captured on its second sight,
// replayed after that.
#include "backends/cuda/step_graphs.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <variant>

#include "core/log.h"

namespace kestrel::cuda {

bool step_graphs_enabled_by_env() {
  const char* v = std::getenv("KESTREL_CUDA_GRAPHS");
  return !v || std::strcmp(v, "0") != 0;
}

namespace {
std::shared_mutex g_capture_mutex;

uint64_t mix(uint64_t h, uint64_t v) {  // order-dependent, for a quick first comparison
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}
}  // namespace

std::shared_lock<std::shared_mutex> device_work_lock() { return std::shared_lock<std::shared_mutex>(g_capture_mutex); }

StepGraphs::~StepGraphs() {
  for (Entry& e : entries_)
    if (e.exec) cudaGraphExecDestroy(e.exec);
}

// A tensor's number in the run (in order of first use), so that "the same tensor" is part of
// the signature (fusion checks it); its fields follow only at its first use.
uint64_t StepGraphs::tensor_id(const Tensor* t, bool* first) {
  const size_t mask = ids_.size() - 1;
  size_t i = (reinterpret_cast<uintptr_t>(t) >> 4) * 0x9E3779B97F4A7C15ull >> 20 & mask;
  for (;; i = (i + 1) & mask) {
    if (ids_[i].first == t) {
      *first = false;
      return ids_[i].second;
    }
    if (!ids_[i].first) break;
  }
  ids_[i] = {t, n_ids_};
  *first = true;
  return n_ids_++;
}

void StepGraphs::sign(const std::vector<Node>& nodes, size_t begin, size_t end, const Stream& s) {
  sig_.clear();
  hash_ = 0;
  size_t want = 64;  // twice the tensor references at most, a power of two
  while (want < 2 * (end - begin) * (Node::kMaxSrc + 1)) want *= 2;
  ids_.assign(want, {nullptr, 0});
  n_ids_ = 0;
  auto put = [&](uint64_t v) {
    sig_.push_back(v);
    hash_ = mix(hash_, v);
  };
  auto put_bytes = [&](const void* p, size_t n) {  // zero-padded to whole words
    for (size_t o = 0; o < n; o += 8) {
      uint64_t w = 0;
      std::memcpy(&w, static_cast<const uint8_t*>(p) + o, std::min<size_t>(8, n - o));
      put(w);
    }
  };
  auto put_tensor = [&](const Tensor* t) {
    if (!t) return put(~uint64_t{0});
    bool first = false;
    put(tensor_id(t, &first));
    if (!first) return;
    put(static_cast<uint64_t>(t->type) << 32 | t->layout);
    put_bytes(t->ne, sizeof t->ne);
    put_bytes(t->nb, sizeof t->nb);
    put(reinterpret_cast<uintptr_t>(t->data));
  };
  put(reinterpret_cast<uintptr_t>(s.scratch_data()));
  put(s.scratch_size());
  put(reinterpret_cast<uintptr_t>(s.counters_data()));
  put(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const Node& n = nodes[i];
    put(static_cast<uint64_t>(n.op) << 32 | n.params.index());
    std::visit(
        [&](const auto& p) {  // op_params.h: no implicit padding; an empty struct has no bytes
          if constexpr (!std::is_empty_v<std::decay_t<decltype(p)>>) put_bytes(&p, sizeof p);
        },
        n.params);
    put_tensor(n.dst);
    for (const Tensor* t : n.src) put_tensor(t);
  }
}

StepGraphs::Entry* StepGraphs::find() {
  for (Entry& e : entries_)
    if (e.hash == hash_ && e.sig == sig_) return &e;
  return nullptr;
}

StepGraphs::Entry& StepGraphs::insert() {
  if (entries_.size() == kMaxGraphs) {  // the least recently used makes room
    size_t lru = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].last_use < entries_[lru].last_use) lru = i;
    if (entries_[lru].exec) cudaGraphExecDestroy(entries_[lru].exec);
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(lru));
  }
  Entry& e = entries_.emplace_back();
  e.sig = sig_;
  e.hash = hash_;
  return e;
}

Status StepGraphs::replay(const Entry& e, Stream& s) {
  const cudaError_t err = cudaGraphLaunch(e.exec, s.stream);
  if (err == cudaSuccess) return Status::Ok();
  std::string why = cudaGetErrorString(err);
#ifdef KESTREL_CUDA_EMULATE
  if (!cuda_emu::graph_launch_error().empty()) why += ": " + cuda_emu::graph_launch_error();
#endif
  return Error(KESTREL_ERR_BACKEND, "cuda: replaying a step's graph: " + why);
}

// Captures run_nodes()'s launches into e.exec. A failure leaves e.exec null and is no error: the
// caller launches instead (and reports the nodes' own errors that way).
Status StepGraphs::capture(Entry& e, Stream& s, const std::function<Status()>& run_nodes) {
  cudaGraph_t graph = nullptr;
  std::string why;
  {
    std::unique_lock<std::shared_mutex> lock(g_capture_mutex);
    cudaError_t err = cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal);
    if (err == cudaSuccess) {
      s.capturing = true;
      const Status st = run_nodes();
      s.capturing = false;
      err = cudaStreamEndCapture(s.stream, &graph);
      if (!st.ok()) why = st.message();
    }
    if (why.empty() && err != cudaSuccess) why = cudaGetErrorString(err);
  }
  if (why.empty()) {
    const cudaError_t err = cudaGraphInstantiate(&e.exec, graph, 0);
    if (err != cudaSuccess) why = std::string("instantiating: ") + cudaGetErrorString(err), e.exec = nullptr;
  }
  if (graph) cudaGraphDestroy(graph);
  if (!why.empty()) {
    e.failed = true;
    ++stats_.graph_capture_failures;
    cudaGetLastError();  // a failed capture's error is not the next launch's
    KS_LOG_DEBUG("cuda: a step of %zu words of signature is launched, not captured: %s", e.sig.size(), why.c_str());
    return Error(KESTREL_ERR_BACKEND, why);
  }
  ++stats_.graph_captures;
  return Status::Ok();
}

Status StepGraphs::run(const std::vector<Node>& nodes, size_t begin, size_t end, Stream& s,
                       const std::function<Status()>& run_nodes) {
  if (!enabled_ || end - begin < kMinNodes) return run_nodes();
  ++stats_.graph_runs;
  sign(nodes, begin, end, s);
  Entry* e = find();
  if (!e) {
    insert().last_use = ++clock_;
    return run_nodes();
  }
  e->last_use = ++clock_;
  if (e->failed) return run_nodes();
  if (!e->exec && !capture(*e, s, run_nodes).ok()) return run_nodes();
  KS_RETURN_IF_ERROR(replay(*e, s));
  ++stats_.graph_replays;
  return Status::Ok();
}

}  // namespace kestrel::cuda
