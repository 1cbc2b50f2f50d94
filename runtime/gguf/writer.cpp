// GGUF v3 writer: metadata in insertion order, tensor infos, then the data section with every
// tensor starting at a multiple of general.alignment (default 32) relative to the section start.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "gguf/gguf.h"

namespace kestrel::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;

class Bytes {
 public:
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf.insert(buf.end(), b, b + n);
  }
  template <class T>
  void put(T v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  std::vector<uint8_t> buf;
};

bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

// The integer bits of v, whatever kind of scalar it holds (arrays declare one element type, so
// an element built with another helper is converted rather than written as garbage).
uint64_t int_bits(const Value& v) {
  if (is_signed_type(v.type)) return static_cast<uint64_t>(v.i);
  if (v.is_float()) return static_cast<uint64_t>(static_cast<int64_t>(v.f));
  return v.u;
}

double float_value(const Value& v) { return v.is_float() ? v.f : v.as_float().value_or(0.0); }

// Writes v as type t (t is v.type at the top level, the array's element type inside arrays).
void put_value(Bytes& out, const Value& v, ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: out.put<uint8_t>(int_bits(v)); break;
    case ValueType::UINT16: case ValueType::INT16: out.put<uint16_t>(int_bits(v)); break;
    case ValueType::UINT32: case ValueType::INT32: out.put<uint32_t>(int_bits(v)); break;
    case ValueType::UINT64: case ValueType::INT64: out.put<uint64_t>(int_bits(v)); break;
    case ValueType::BOOL: out.put<uint8_t>(int_bits(v) != 0 ? 1 : 0); break;
    case ValueType::FLOAT32: out.put<float>(static_cast<float>(float_value(v))); break;
    case ValueType::FLOAT64: out.put<double>(float_value(v)); break;
    case ValueType::STRING: out.str(v.str); break;
    case ValueType::ARRAY:
      out.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.array.size());
      for (const Value& e : v.array) put_value(out, e, v.elem_type);
      break;
  }
}

uint64_t pad_to(uint64_t x, uint64_t a) { return x % a ? a - x % a : 0; }

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string r = "[";
  for (size_t d = 0; d < ne.size(); ++d) r += (d ? ", " : "") + std::to_string(ne[d]);
  return r + "]";
}

}  // namespace

void Writer::set(const std::string& key, Value v) {
  for (KeyValue& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  }
  kvs_.push_back({key, std::move(v)});
}

Status Writer::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                          const void* data, size_t nbytes) {
  auto bad = [&](const std::string& msg) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "tensor '" + name + "': " + msg);
  };
  if (name.empty()) return Error(KESTREL_ERR_INVALID_ARGUMENT, "tensor name is empty");
  for (const PendingTensor& t : tensors_)
    if (t.name == name) return bad("added twice");
  const DTypeInfo* ti = dtype_info(static_cast<uint32_t>(type));
  if (!ti) return bad("unknown type id " + std::to_string(static_cast<uint32_t>(type)));
  if (ne.empty() || ne.size() > 4) return bad(std::to_string(ne.size()) + " dims, not 1..4");
  for (int64_t e : ne)
    if (e < 0) return bad("negative dimension in shape " + shape_str(ne));
  if (ne[0] % ti->block_size != 0)
    return bad("ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " + ti->name +
               " block size " + std::to_string(ti->block_size));
  int64_t n = 1, rows = 1;
  uint64_t expect = 0;
  for (size_t d = 0; d < ne.size(); ++d) {
    const bool overflow = __builtin_mul_overflow(n, ne[d], &n) ||
                          (d > 0 && __builtin_mul_overflow(rows, ne[d], &rows));
    if (overflow) return bad("shape " + shape_str(ne) + " has too many elements");
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(ne[0] / ti->block_size),
                             uint64_t{ti->type_size}, &expect) ||
      __builtin_mul_overflow(expect, static_cast<uint64_t>(rows), &expect) || expect > SIZE_MAX)
    return bad("byte size of shape " + shape_str(ne) + " overflows");
  if (nbytes != expect)
    return bad(std::to_string(nbytes) + " bytes given, shape " + shape_str(ne) + " " + ti->name +
               " needs " + std::to_string(expect));
  if (nbytes > 0 && !data) return bad("data is null");
  try {
    const auto* p = static_cast<const uint8_t*>(data);
    tensors_.push_back({name, type, ne, std::vector<uint8_t>(p, p + nbytes)});
  } catch (const std::bad_alloc&) {
    return Error(KESTREL_ERR_OUT_OF_MEMORY, "tensor '" + name + "': out of memory copying data");
  }
  return {};
}

template <class Sink>
void Writer::emit(Sink& sink) const {
  // The alignment key is written as given; an unusable value leaves the default layout (the
  // reader will reject such a file, which is what tests of bad alignments want).
  uint64_t align = kDefaultAlignment;
  for (const KeyValue& kv : kvs_) {
    if (kv.key != "general.alignment" || !kv.value.is_integer()) continue;
    const std::optional<int64_t> a = kv.value.as_int();
    if (a && *a > 0 && (*a & (*a - 1)) == 0) align = static_cast<uint64_t>(*a);
  }

  Bytes h;
  h.raw("GGUF", 4);
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors_.size());
  h.put<uint64_t>(kvs_.size());
  for (const KeyValue& kv : kvs_) {
    h.str(kv.key);
    h.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    put_value(h, kv.value, kv.value.type);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t e : t.ne) h.put<int64_t>(e);
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(offset);
    offset += t.data.size() + pad_to(t.data.size(), align);
  }
  static const uint8_t kZeros[4096] = {};
  auto pad = [&](uint64_t n) {
    for (; n > 0; n -= std::min<uint64_t>(n, sizeof kZeros))
      sink(kZeros, std::min<uint64_t>(n, sizeof kZeros));
  };
  sink(h.buf.data(), h.buf.size());
  pad(pad_to(h.buf.size(), align));
  for (const PendingTensor& t : tensors_) {
    sink(t.data.data(), t.data.size());
    pad(pad_to(t.data.size(), align));
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  auto sink = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  emit(sink);
  return out;
}

Status Writer::write(const std::string& path) const {
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp)
    return Error(KESTREL_ERR_IO, path + ": cannot open for writing: " + std::strerror(errno));
  bool ok = true;
  int err = 0;
  auto sink = [&](const void* p, size_t n) {
    if (ok && n > 0 && std::fwrite(p, 1, n, fp) != n) {
      ok = false;
      err = errno;
    }
  };
  try {
    emit(sink);
  } catch (const std::bad_alloc&) {
    std::fclose(fp);
    return Error(KESTREL_ERR_OUT_OF_MEMORY, path + ": out of memory building the header");
  }
  if (std::fclose(fp) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) return Error(KESTREL_ERR_IO, path + ": write failed: " + std::strerror(err));
  return {};
}

}  // namespace kestrel::gguf
