// The quantization driver: plan every tensor's type, convert the data in parallel row chunks
// (each thread converts its rows to F32 in a small scratch buffer, then quantizes them), and write
// the result with the GGUF writer.
#include "quantize/quantize.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <numeric>

#include "tensor/quants/quants.h"
#include "core/thread_pool.h"
#include "quantize/tensor_types.h"

namespace kestrel::quant {
namespace {

// The reference quantizer for a type: the type table's, else the K-quants' (kept here so the
// table in runtime/tensor need not know about them).
FromFloatFn quantizer_for(DType t) {
  if (FromFloatFn f = dtype_info(t).from_float) return f;
  switch (t) {
    case DType::Q2_K: return quants::quantize_q2_k;
    case DType::Q3_K: return quants::quantize_q3_k;
    case DType::Q4_K: return quants::quantize_q4_k;
    case DType::Q5_K: return quants::quantize_q5_k;
    case DType::Q6_K: return quants::quantize_q6_k;
    default: return nullptr;
  }
}

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

int64_t rows_of(const gguf::TensorInfo& t) { return t.ne[1] * t.ne[2] * t.ne[3]; }

// Why tensor t cannot become type `to`, or "" if it can.
std::string conversion_problem(const gguf::TensorInfo& t, DType to, bool allow_requantize) {
  const DTypeInfo& fi = dtype_info(t.type);
  if (!quantizer_for(to))
    return std::string("no quantizer for type ") + dtype_name(to);
  if (!fi.to_float)
    return std::string("type ") + fi.name + " cannot be converted to " + dtype_name(to);
  if (!is_float_type(t.type) && !allow_requantize)
    return std::string("type ") + fi.name +
           " is already quantized; requantizing loses accuracy (allow it with --allow-requantize)";
  return "";
}

// Converts rows [0, n_rows) with the pool: chunks of rows handed out through an atomic counter.
void convert_with_pool(ThreadPool& pool, DType from, const void* src, DType to, void* dst,
                       int64_t n_rows, int64_t n_per_row) {
  const size_t in_row = dtype_row_size(from, n_per_row), out_row = dtype_row_size(to, n_per_row);
  if (from == to) {
    std::memcpy(dst, src, in_row * static_cast<size_t>(n_rows));
    return;
  }
  const ToFloatFn to_float = dtype_info(from).to_float;
  const FromFloatFn quantize = quantizer_for(to);
  // About 64K values per chunk: small enough to balance threads, big enough to amortize.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n_per_row));
  const int64_t n_chunks = (n_rows + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    std::vector<float> scratch;
    for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
      const int64_t r0 = c * chunk, nr = std::min(chunk, n_rows - r0);
      const auto* in = static_cast<const uint8_t*>(src) + static_cast<size_t>(r0) * in_row;
      auto* out = static_cast<uint8_t*>(dst) + static_cast<size_t>(r0) * out_row;
      const float* f32 = reinterpret_cast<const float*>(in);
      if (from != DType::F32 || reinterpret_cast<uintptr_t>(in) % alignof(float) != 0) {
        scratch.resize(static_cast<size_t>(nr * n_per_row));
        to_float(in, scratch.data(), nr * n_per_row);
        f32 = scratch.data();
      }
      // Row by row: every quantizer works on whole blocks and rows are whole blocks.
      for (int64_t r = 0; r < nr; ++r) quantize(f32 + r * n_per_row, out + r * out_row, n_per_row);
    }
  });
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

Expected<std::vector<TensorPlan>> plan_quantization(const gguf::File& in, const QuantizeOptions& opt) {
  const FileTypeName* ft = nullptr;
  for (const FileTypeName& f : file_type_names())
    if (f.ftype == opt.ftype) ft = &f;
  if (!ft)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "file type " + std::to_string(static_cast<uint32_t>(opt.ftype)) + " is not supported");
  if (in.get_int("split.count").value_or(1) > 1)
    return Error(KESTREL_ERR_UNSUPPORTED, in.path() + ": split GGUF files are not supported; merge them first");

  const auto& tensors = in.tensors();
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensor_order_less(tensors[a].name, tensors[b].name);
  });
  TypeChooser chooser(read_model_facts(in), opt.ftype, ft->default_type, opt.pure);
  std::vector<TensorPlan> plan(tensors.size());
  for (size_t idx : order) {
    const gguf::TensorInfo& t = tensors[idx];
    TensorPlan& p = plan[idx];
    p.name = t.name;
    p.from = t.type;
    auto to = chooser.choose(t, &p.fallback);
    if (!to.ok()) return to.status();
    p.to = to.value();
    if (p.to != p.from) {
      const std::string why = conversion_problem(t, p.to, opt.allow_requantize);
      if (!why.empty()) return Error(KESTREL_ERR_UNSUPPORTED, "tensor '" + t.name + "': " + why);
    }
    p.out_bytes = dtype_row_size(p.to, t.ne[0]) * static_cast<size_t>(rows_of(t));
  }
  return plan;
}

Status convert_rows(DType from, const void* src, DType to, void* dst, int64_t n_rows,
                    int64_t n_per_row, int n_threads) {
  const DTypeInfo* fi = dtype_info(static_cast<uint32_t>(from));
  const DTypeInfo* ti = dtype_info(static_cast<uint32_t>(to));
  if (!fi || !ti || n_rows < 0 || n_per_row <= 0 || n_per_row % fi->block_size != 0 ||
      n_per_row % ti->block_size != 0)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "convert_rows: bad types or row length");
  if (from != to && (!fi->to_float || !quantizer_for(to)))
    return Error(KESTREL_ERR_UNSUPPORTED, std::string("cannot convert ") + fi->name + " to " + ti->name);
  ThreadPool pool(n_threads > 0 ? n_threads : default_thread_count());
  convert_with_pool(pool, from, src, to, dst, n_rows, n_per_row);
  return {};
}

Expected<QuantizeReport> quantize_file(const std::string& in_path, const std::string& out_path,
                                       const QuantizeOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  if (same_file(in_path, out_path))
    return Error(KESTREL_ERR_INVALID_ARGUMENT, out_path + ": the output would overwrite the input");
  auto file = gguf::File::open(in_path);
  if (!file.ok()) return file.status();
  const gguf::File& in = *file.value();
  auto plan = plan_quantization(in, opt);
  if (!plan.ok()) return plan.status();

  gguf::Writer w;
  for (const gguf::KeyValue& kv : in.metadata()) {
    // Re-set at the end below (llama-quantize moves them there); split keys do not apply.
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version" ||
        kv.key.rfind("split.", 0) == 0)
      continue;
    w.set(kv.key, kv.value);
  }
  w.set("general.quantization_version", gguf::Value::make_u32(2));
  w.set("general.file_type", gguf::Value::make_u32(static_cast<uint32_t>(opt.ftype)));

  ThreadPool pool(opt.n_threads > 0 ? opt.n_threads : default_thread_count());
  uint64_t total_in = 0, done_in = 0;
  for (const gguf::TensorInfo& t : in.tensors()) total_in += t.nbytes;
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const gguf::TensorInfo& t = in.tensors()[i];
    const TensorPlan& p = plan.value()[i];
    try {
      buf.resize(p.out_bytes);
    } catch (const std::bad_alloc&) {
      return Error(KESTREL_ERR_OUT_OF_MEMORY, "tensor '" + t.name + "': out of memory");
    }
    convert_with_pool(pool, t.type, in.tensor_data(t), p.to, buf.data(), rows_of(t), t.ne[0]);
    std::vector<int64_t> ne(t.ne, t.ne + std::max<uint32_t>(1, t.n_dims));
    KS_RETURN_IF_ERROR(w.add_tensor(t.name, p.to, ne, buf.data(), buf.size()));
    done_in += t.nbytes;
    if (opt.progress && !opt.progress(total_in ? static_cast<float>(done_in) / total_in : 1.0f))
      return Error(KESTREL_ERR_CANCELLED, "quantization cancelled");
  }
  std::vector<uint8_t>().swap(buf);

  const std::string part = out_path + ".part";
  if (Status st = w.write(part); !st.ok()) {
    std::remove(part.c_str());
    return st;
  }
  if (std::rename(part.c_str(), out_path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(part.c_str());
    return Error(KESTREL_ERR_IO, out_path + ": cannot rename " + part + " to it: " + err);
  }
  QuantizeReport r;
  r.tensors = std::move(plan.value());
  r.in_file_bytes = in.file_size();
  r.out_file_bytes = file_size(out_path);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kestrel::quant
