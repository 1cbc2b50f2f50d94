// GGUF reader: maps or reads a file, then validates every count, length, type, shape and offset
// against the file size before trusting it. Layout (v2 and v3 are identical on disk):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, n_dims x i64 ne, u32 type, u64 offset },
//   padding to general.alignment, data section.
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <unordered_map>

#include "gguf/gguf.h"

namespace kestrel::gguf {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMaxDepth = 8;  // array nesting levels
// kvs + tensors + metadata array elements together. Each costs ~100 bytes of memory per item of
// at least 1 file byte, so this bounds what a hostile file can make us allocate (~1.6 GB); real
// files hold well under a million (the largest vocabularies are ~250k tokens + merges).
constexpr uint64_t kMaxItems = uint64_t{1} << 24;
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;               // empty key, type, uint8 value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset
constexpr size_t kBufferAlignment = 64;  // of our own buffers, so tensor data suits SIMD loads

struct AlignedFree {
  void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t(kBufferAlignment)); }
};

// Bytes the smallest value of type t occupies (0: not a valid type id).
uint64_t min_value_bytes(uint32_t t) {
  switch (static_cast<ValueType>(t)) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 4 + 8;
  }
  return 0;
}

// GGML type ids that are valid in GGUF files but which Kestrel has no kernels for.
const char* ggml_type_we_lack(uint32_t id) {
  switch (id) {
    case 16: return "iq2_xxs";
    case 17: return "iq2_xs";
    case 18: return "iq3_xxs";
    case 19: return "iq1_s";
    case 21: return "iq3_s";
    case 22: return "iq2_s";
    case 23: return "iq4_xs";
    case 29: return "iq1_m";
    case 34: return "tq1_0";
    case 35: return "tq2_0";
    default: return nullptr;
  }
}

// A file-supplied name made safe to print: control and non-ASCII bytes as \xNN, cut at 80.
std::string printable(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string r;
  for (size_t k = 0; k < s.size() && k < 80; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      r += static_cast<char>(c);
    } else {
      r += "\\x";
      r += kHex[c >> 4];
      r += kHex[c & 15];
    }
  }
  if (s.size() > 80) r += "...";
  return r;
}

std::string shape_str(const int64_t* ne, uint32_t n) {
  std::string r = "[";
  for (uint32_t d = 0; d < n; ++d) r += (d ? ", " : "") + std::to_string(ne[d]);
  return r + "]";
}

using std::to_string;

}  // namespace

struct File::Impl {
  void* map = nullptr;
  size_t map_len = 0;
  std::unique_ptr<uint8_t, AlignedFree> buf;  // read() fallback or a realigned from_bytes copy
  std::vector<uint8_t> vec;                   // from_bytes buffer kept as given
  // Views into File::kvs_ / tensors_ (stable: both are final once parsing succeeds).
  std::unordered_map<std::string_view, size_t> kv_index;
  std::unordered_map<std::string_view, size_t> tensor_index;
  ~Impl() {
    if (map) munmap(map, map_len);
  }
};

bool File::mapped() const { return impl_->map != nullptr; }

uint8_t* File::owned_tensor_data(const TensorInfo& t) {
  return mapped() ? nullptr : const_cast<uint8_t*>(tensor_data(t));
}

// Parses base[0, size) into a File. Every read goes through need(), so no byte outside the
// buffer is touched, and every count is checked against the bytes left before it is used.
struct Parser {
  const std::string& name;
  const uint8_t* base;
  uint64_t size;
  uint64_t pos = 0;
  uint64_t items = 0;

  Status fail(kestrel_status code, const std::string& msg) const {
    return Error(code, name + ": " + msg);
  }
  Status format(const std::string& msg) const { return fail(KESTREL_ERR_FORMAT, msg); }

  Status need(uint64_t n, std::string_view ctx, std::string_view what) const {
    if (n <= size - pos) return {};
    return format(std::string(ctx) + ": " + std::string(what) + " at offset " + to_string(pos) +
                  " needs " + to_string(n) + " bytes, past end of file (size " + to_string(size) +
                  ")");
  }
  template <class T>
  Status read(T* out, std::string_view ctx, std::string_view what) {
    KS_RETURN_IF_ERROR(need(sizeof(T), ctx, what));
    std::memcpy(out, base + pos, sizeof(T));
    pos += sizeof(T);
    return {};
  }
  // Reads a T and widens it into *field.
  template <class T, class F>
  Status scalar(F* field, std::string_view ctx, std::string_view what) {
    T x{};
    KS_RETURN_IF_ERROR(read(&x, ctx, what));
    *field = static_cast<F>(x);
    return {};
  }
  Status read_string(std::string* out, std::string_view ctx, std::string_view what) {
    uint64_t len = 0;
    KS_RETURN_IF_ERROR(need(8, ctx, what));
    std::memcpy(&len, base + pos, 8);
    pos += 8;
    if (len > size - pos)
      return format(std::string(ctx) + ": " + std::string(what) + " of length " + to_string(len) +
                    " at offset " + to_string(pos - 8) + " runs past end of file (size " +
                    to_string(size) + ")");
    out->assign(reinterpret_cast<const char*>(base + pos), len);
    pos += len;
    return {};
  }
  Status add_items(uint64_t n) {
    if (n > kMaxItems - items)
      return format("more than " + to_string(kMaxItems) +
                    " kvs, tensors and array elements in all (limit)");
    items += n;
    return {};
  }

  Status read_value(uint32_t type, uint32_t depth, Value* v, const std::string& ctx);
  Status parse_header(File& f, uint64_t* n_tensors, uint64_t* n_kvs);
  Status parse_kvs(File& f, uint64_t n_kvs);
  Status parse_alignment(File& f);
  Status parse_tensor_info(TensorInfo* t, uint64_t index);
  Status parse(File& f);
  static Status run(File& f) {
    Parser p{f.path(), f.base_, f.size_};
    return p.parse(f);
  }
};

Status Parser::read_value(uint32_t type, uint32_t depth, Value* v, const std::string& ctx) {
  v->type = static_cast<ValueType>(type);
  switch (v->type) {
    case ValueType::UINT8: return scalar<uint8_t>(&v->u, ctx, "uint8");
    case ValueType::UINT16: return scalar<uint16_t>(&v->u, ctx, "uint16");
    case ValueType::UINT32: return scalar<uint32_t>(&v->u, ctx, "uint32");
    case ValueType::UINT64: return scalar<uint64_t>(&v->u, ctx, "uint64");
    case ValueType::INT8: return scalar<int8_t>(&v->i, ctx, "int8");
    case ValueType::INT16: return scalar<int16_t>(&v->i, ctx, "int16");
    case ValueType::INT32: return scalar<int32_t>(&v->i, ctx, "int32");
    case ValueType::INT64: return scalar<int64_t>(&v->i, ctx, "int64");
    case ValueType::FLOAT32: return scalar<float>(&v->f, ctx, "float32");
    case ValueType::FLOAT64: return scalar<double>(&v->f, ctx, "float64");
    case ValueType::BOOL: {
      uint8_t x = 0;
      KS_RETURN_IF_ERROR(read(&x, ctx, "bool"));
      if (x > 1)
        return format(ctx + ": bool value " + to_string(x) + " at offset " + to_string(pos - 1) +
                      " is not 0 or 1");
      v->u = x;
      break;
    }
    case ValueType::STRING:
      return read_string(&v->str, ctx, "string");
    case ValueType::ARRAY: {
      const uint64_t at = pos;
      if (depth >= kMaxDepth)
        return format(ctx + ": arrays nested more than " + to_string(kMaxDepth) +
                      " deep at offset " + to_string(at));
      uint32_t elem = 0;
      uint64_t count = 0;
      KS_RETURN_IF_ERROR(read(&elem, ctx, "array element type"));
      const uint64_t min_bytes = min_value_bytes(elem);
      if (min_bytes == 0)
        return format(ctx + ": unknown array element type " + to_string(elem) + " at offset " +
                      to_string(at));
      KS_RETURN_IF_ERROR(read(&count, ctx, "array length"));
      if (count > (size - pos) / min_bytes)
        return format(ctx + ": array of " + to_string(count) + " " +
                      value_type_name(static_cast<ValueType>(elem)) + " at offset " +
                      to_string(at) + " runs past end of file (size " + to_string(size) + ")");
      KS_RETURN_IF_ERROR(add_items(count));
      v->elem_type = static_cast<ValueType>(elem);
      v->array.resize(count);  // bounded by the bytes left and by kMaxItems
      for (Value& e : v->array) KS_RETURN_IF_ERROR(read_value(elem, depth + 1, &e, ctx));
      break;
    }
    default:
      return format(ctx + ": unknown value type " + to_string(type) + " at offset " +
                    to_string(pos - 4));
  }
  return {};
}

Status Parser::parse_header(File& f, uint64_t* n_tensors, uint64_t* n_kvs) {
  char magic[4];
  KS_RETURN_IF_ERROR(read(&magic, "header", "magic"));
  if (std::memcmp(magic, kMagic, 4) != 0)
    return format("bad magic '" + printable(std::string_view(magic, 4)) +
                  "' at offset 0 (expected 'GGUF'): not a GGUF file");
  uint32_t version = 0;
  KS_RETURN_IF_ERROR(read(&version, "header", "version"));
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3)
      return fail(KESTREL_ERR_UNSUPPORTED, "big-endian GGUF (version " + to_string(swapped) +
                                               ") is not supported; only little-endian files");
    return fail(KESTREL_ERR_UNSUPPORTED,
                "GGUF version " + to_string(version) + " is not supported (only 2 and 3)");
  }
  f.version_ = version;
  KS_RETURN_IF_ERROR(read(n_tensors, "header", "tensor count"));
  KS_RETURN_IF_ERROR(read(n_kvs, "header", "kv count"));
  // Cheap plausibility before any allocation: each record needs a minimum number of bytes.
  const uint64_t left = size - pos;
  if (*n_kvs > left / kMinKvBytes)
    return format("kv count " + to_string(*n_kvs) + " (offset 16) cannot fit in the " +
                  to_string(left) + " bytes that follow");
  if (*n_tensors > (left - *n_kvs * kMinKvBytes) / kMinTensorBytes)
    return format("tensor count " + to_string(*n_tensors) + " (offset 8) cannot fit in the " +
                  to_string(left) + " bytes that follow");
  KS_RETURN_IF_ERROR(add_items(*n_kvs));
  return add_items(*n_tensors);
}

Status Parser::parse_kvs(File& f, uint64_t n_kvs) {
  std::vector<uint64_t> offsets;  // for duplicate-key messages
  f.kvs_.reserve(std::min<uint64_t>(n_kvs, 1024));
  for (uint64_t k = 0; k < n_kvs; ++k) {
    offsets.push_back(pos);
    KeyValue kv;
    KS_RETURN_IF_ERROR(read_string(&kv.key, "kv #" + to_string(k), "key"));
    const std::string ctx = "key '" + printable(kv.key) + "'";
    uint32_t type = 0;
    KS_RETURN_IF_ERROR(read(&type, ctx, "value type"));
    if (min_value_bytes(type) == 0)
      return format(ctx + ": unknown value type " + to_string(type) + " at offset " +
                    to_string(pos - 4));
    KS_RETURN_IF_ERROR(read_value(type, 0, &kv.value, ctx));
    f.kvs_.push_back(std::move(kv));
  }
  auto& index = f.impl_->kv_index;
  for (size_t k = 0; k < f.kvs_.size(); ++k) {
    auto [it, fresh] = index.emplace(f.kvs_[k].key, k);
    if (!fresh)
      return format("duplicate key '" + printable(f.kvs_[k].key) + "' (kv #" + to_string(k) +
                    " at offset " + to_string(offsets[k]) + "; first at offset " +
                    to_string(offsets[it->second]) + ")");
  }
  return {};
}

Status Parser::parse_alignment(File& f) {
  f.alignment_ = 32;
  const Value* v = f.find("general.alignment");
  if (!v) return {};
  if (!v->is_integer())
    return format("key 'general.alignment' has type " +
                  std::string(value_type_name(v->type)) + ", expected uint32");
  const std::optional<int64_t> a = v->as_int();
  if (!a || *a <= 0 || (*a & (*a - 1)) != 0)
    return format("key 'general.alignment' = " +
                  (a ? to_string(*a) : to_string(v->u)) + " is not a nonzero power of two");
  f.alignment_ = static_cast<uint64_t>(*a);
  return {};
}

Status Parser::parse_tensor_info(TensorInfo* t, uint64_t index) {
  const uint64_t at = pos;
  KS_RETURN_IF_ERROR(read_string(&t->name, "tensor #" + to_string(index), "name"));
  if (t->name.empty())
    return format("tensor #" + to_string(index) + " at offset " + to_string(at) +
                  " has an empty name");
  const std::string ctx = "tensor '" + printable(t->name) + "'";
  KS_RETURN_IF_ERROR(read(&t->n_dims, ctx, "n_dims"));
  if (t->n_dims < 1 || t->n_dims > 4)
    return format(ctx + ": n_dims " + to_string(t->n_dims) + " at offset " + to_string(pos - 4) +
                  " is not in 1..4");
  for (uint32_t d = 0; d < t->n_dims; ++d) {
    KS_RETURN_IF_ERROR(read(&t->ne[d], ctx, "ne"));
    if (t->ne[d] < 0)
      return format(ctx + ": ne[" + to_string(d) + "] = " + to_string(t->ne[d]) +
                    " at offset " + to_string(pos - 8) + " is negative");
  }
  uint32_t type_id = 0;
  KS_RETURN_IF_ERROR(read(&type_id, ctx, "type"));
  const DTypeInfo* ti = dtype_info(type_id);
  if (!ti) {
    if (const char* lacked = ggml_type_we_lack(type_id))
      return fail(KESTREL_ERR_UNSUPPORTED, ctx + ": type " + lacked + " (id " +
                                               to_string(type_id) + ") is not supported");
    return format(ctx + ": unknown type id " + to_string(type_id) + " at offset " +
                  to_string(pos - 4));
  }
  if (ti->type == DType::F8_E4M3)
    return fail(KESTREL_ERR_UNSUPPORTED, ctx + ": type f8_e4m3 (id " + to_string(type_id) +
                                             ") is Kestrel's KV cache type, not a weight type");
  t->type = ti->type;
  KS_RETURN_IF_ERROR(read(&t->offset, ctx, "data offset"));

  const std::string shape = shape_str(t->ne, t->n_dims) + " " + ti->name;
  if (t->ne[0] % ti->block_size != 0)
    return format(ctx + ": ne[0] = " + to_string(t->ne[0]) + " is not a multiple of the " +
                  ti->name + " block size " + to_string(ti->block_size));
  // Same order as TensorInfo::n_elements(), so that never overflows either.
  int64_t n = 1, rows = 1;
  for (int64_t e : t->ne)
    if (__builtin_mul_overflow(n, e, &n))
      return format(ctx + ": shape " + shape + " has more elements than int64 can count");
  for (int d = 1; d < 4; ++d)
    if (__builtin_mul_overflow(rows, t->ne[d], &rows))
      return format(ctx + ": shape " + shape + " has more rows than int64 can count");
  uint64_t nbytes = 0;
  const uint64_t blocks = static_cast<uint64_t>(t->ne[0] / ti->block_size);
  if (__builtin_mul_overflow(blocks, uint64_t{ti->type_size}, &nbytes) ||
      __builtin_mul_overflow(nbytes, static_cast<uint64_t>(rows), &nbytes) || nbytes > SIZE_MAX)
    return format(ctx + ": byte size of shape " + shape + " overflows uint64");
  t->nbytes = static_cast<size_t>(nbytes);
  return {};
}

Status Parser::parse(File& f) {
  uint64_t n_tensors = 0, n_kvs = 0;
  KS_RETURN_IF_ERROR(parse_header(f, &n_tensors, &n_kvs));
  KS_RETURN_IF_ERROR(parse_kvs(f, n_kvs));
  KS_RETURN_IF_ERROR(parse_alignment(f));

  f.tensors_.reserve(std::min<uint64_t>(n_tensors, 1024));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    KS_RETURN_IF_ERROR(parse_tensor_info(&t, k));
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (alignment <= 2^62 and
  // pos <= size, so this cannot overflow). A file without tensors may omit the padding.
  const uint64_t a = f.alignment_;
  const uint64_t data_start = pos % a ? pos + (a - pos % a) : pos;
  if (data_start > size) {
    if (n_tensors > 0)
      return format("data section would start at offset " + to_string(data_start) +
                    " (tensor infos end at " + to_string(pos) + ", alignment " + to_string(a) +
                    "), past end of file (size " + to_string(size) + ")");
    f.data_ = base + size;
    f.data_size_ = 0;
  } else {
    f.data_ = base + data_start;
    f.data_size_ = size - data_start;
  }

  auto& index = f.impl_->tensor_index;
  for (size_t k = 0; k < f.tensors_.size(); ++k) {
    const TensorInfo& t = f.tensors_[k];
    const std::string ctx = "tensor '" + printable(t.name) + "'";
    if (t.offset % a != 0)
      return format(ctx + ": data offset " + to_string(t.offset) +
                    " is not a multiple of the alignment " + to_string(a));
    if (t.offset > f.data_size_ || t.nbytes > f.data_size_ - t.offset) {
      // Absolute positions, unless they would not fit in 64 bits.
      if (t.offset <= UINT64_MAX - data_start && t.nbytes <= UINT64_MAX - data_start - t.offset)
        return format(ctx + ": data [" + to_string(data_start + t.offset) + ", " +
                      to_string(data_start + t.offset + t.nbytes) + ") past end of file (size " +
                      to_string(size) + ")");
      return format(ctx + ": data offset " + to_string(t.offset) + " + " + to_string(t.nbytes) +
                    " bytes past end of file (size " + to_string(size) + ")");
    }
    auto [it, fresh] = index.emplace(t.name, k);
    if (!fresh)
      return format("duplicate tensor name '" + printable(t.name) + "' (tensors #" +
                    to_string(it->second) + " and #" + to_string(k) + ")");
  }
  return {};
}

namespace {

// Runs the parser over f's bytes; converts an allocation failure into a Status.
Expected<std::unique_ptr<File>> finish(std::unique_ptr<File> f, Status (*run)(File&)) {
  try {
    Status st = run(*f);
    if (!st.ok()) return st;
  } catch (const std::bad_alloc&) {
    return Error(KESTREL_ERR_OUT_OF_MEMORY, f->path() + ": out of memory while parsing");
  } catch (const std::exception& e) {
    return Error(KESTREL_ERR_INTERNAL, f->path() + ": " + e.what());
  }
  return Expected<std::unique_ptr<File>>(std::move(f));
}

}  // namespace

Expected<std::unique_ptr<File>> File::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  std::unique_ptr<File> f(new File());
  f->impl_ = std::make_unique<Impl>();
  f->path_ = std::move(name);
  f->size_ = bytes.size();
  if (reinterpret_cast<uintptr_t>(bytes.data()) % kBufferAlignment == 0 || bytes.empty()) {
    f->impl_->vec = std::move(bytes);
    f->base_ = f->impl_->vec.data();
  } else {
    auto* p = static_cast<uint8_t*>(
        ::operator new(bytes.size(), std::align_val_t(kBufferAlignment), std::nothrow));
    if (!p) return Error(KESTREL_ERR_OUT_OF_MEMORY, f->path_ + ": out of memory");
    std::memcpy(p, bytes.data(), bytes.size());
    f->impl_->buf.reset(p);
    f->base_ = p;
  }
  return finish(std::move(f), Parser::run);
}

Expected<std::unique_ptr<File>> File::open(const std::string& path, bool use_mmap) {
  auto io_error = [&](const std::string& what) {
    return Error(KESTREL_ERR_IO, path + ": " + what + ": " + std::strerror(errno));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open");
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return io_error("cannot stat");
  if (!S_ISREG(st.st_mode)) return Error(KESTREL_ERR_IO, path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > SIZE_MAX) return Error(KESTREL_ERR_IO, path + ": file too large to map");

  std::unique_ptr<File> f(new File());
  f->impl_ = std::make_unique<Impl>();
  f->path_ = path;
  f->size_ = size;
  if (size == 0) {
    f->base_ = nullptr;  // nothing to map; the parser reports the truncation
  } else if (use_mmap) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return io_error("mmap failed");
    f->impl_->map = m;
    f->impl_->map_len = size;
    f->base_ = static_cast<const uint8_t*>(m);
  } else {
    auto* p = static_cast<uint8_t*>(
        ::operator new(size, std::align_val_t(kBufferAlignment), std::nothrow));
    if (!p) return Error(KESTREL_ERR_OUT_OF_MEMORY, path + ": out of memory reading the file");
    f->impl_->buf.reset(p);
    for (uint64_t done = 0; done < size;) {
      const ssize_t r = ::pread(fd, p + done, size - done, static_cast<off_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return io_error("read failed at offset " + to_string(done));
      if (r == 0)
        return Error(KESTREL_ERR_IO, path + ": file shrank while reading (at offset " +
                                         to_string(done) + ")");
      done += static_cast<uint64_t>(r);
    }
    f->base_ = p;
  }
  return finish(std::move(f), Parser::run);
}

File::~File() = default;

const Value* File::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &kvs_[it->second].value;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  return v && v->is_integer() ? v->as_int() : std::nullopt;
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::BOOL) return std::nullopt;
  return v->u != 0;
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v || v->type != ValueType::STRING) return std::nullopt;
  return v->str;
}

const std::vector<Value>* File::get_array(std::string_view key) const {
  const Value* v = find(key);
  return v && v->type == ValueType::ARRAY ? &v->array : nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kestrel::gguf
