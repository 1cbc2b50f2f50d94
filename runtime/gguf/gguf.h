// GGUF v2/v3 reader (memory-mapped, every count, length, offset and size validated against the
// file size with overflow-safe arithmetic) and writer. A malformed file gives a Status naming the
// key, tensor or offset at fault; it never asserts, aborts or allocates without bound.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tensor/dtype.h"

namespace kestrel::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// A metadata value. Scalars live in the union members; arrays hold their element type and
// elements (arrays may nest).
struct Value {
  ValueType type = ValueType::UINT32;
  uint64_t u = 0;  // UINT8/16/32/64, BOOL
  int64_t i = 0;   // INT8/16/32/64
  double f = 0;    // FLOAT32/64
  std::string str; // STRING
  ValueType elem_type = ValueType::UINT32;  // ARRAY
  std::vector<Value> array;                 // ARRAY

  bool is_integer() const;
  bool is_float() const;
  // Integer value of any integer type (and BOOL); nullopt otherwise.
  std::optional<int64_t> as_int() const;
  // Any numeric type; nullopt otherwise.
  std::optional<double> as_float() const;

  static Value make_u32(uint32_t v);
  static Value make_i32(int32_t v);
  static Value make_u64(uint64_t v);
  static Value make_f32(float v);
  static Value make_bool(bool v);
  static Value make_string(std::string v);
  static Value make_array(ValueType elem, std::vector<Value> elems);
  static Value make_string_array(const std::vector<std::string>& v);
  static Value make_f32_array(const std::vector<float>& v);
  static Value make_i32_array(const std::vector<int32_t>& v);
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the start of the data section
  size_t nbytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class File {
 public:
  // Maps (or, with use_mmap=false, reads) and validates the whole header and tensor table.
  static Expected<std::unique_ptr<File>> open(const std::string& path, bool use_mmap = true);
  // Parses a file image held in memory (tests, fuzzing); takes ownership of bytes.
  static Expected<std::unique_ptr<File>> from_bytes(std::vector<uint8_t> bytes,
                                                    std::string name = "<memory>");
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }

  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const Value* find(std::string_view key) const;
  // Typed look-ups: nullopt when absent or of another kind (a wrong type is not silently cast
  // from string to number; integers of any width/sign are accepted by get_int).
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<Value>* get_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Start of a tensor's bytes (inside the mapping; valid while the File lives).
  const uint8_t* tensor_data(const TensorInfo& t) const { return data_ + t.offset; }
  // True when the bytes are a file mapping (else a buffer this File owns).
  bool mapped() const;
  // A writable view of a tensor's bytes when this File owns them (not mapped); nullptr otherwise.
  // For rewriting weights in place at load (the CPU backend's repack).
  uint8_t* owned_tensor_data(const TensorInfo& t);
  const uint8_t* data_section() const { return data_; }
  uint64_t data_section_size() const { return data_size_; }

 private:
  File() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the mapping or the buffer
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t size_ = 0;
  const uint8_t* base_ = nullptr;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  friend struct Parser;
};

// Builds a GGUF v3 file: metadata in insertion order (set() replaces an existing key in place),
// tensors aligned to general.alignment (default 32).
class Writer {
 public:
  void set(const std::string& key, Value v);
  // data must hold dtype_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3] bytes; it is copied.
  Status add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                    const void* data, size_t nbytes);
  std::vector<uint8_t> to_bytes() const;
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  // Serializes the file into sink(const void*, size_t) piece by piece (writer.cpp).
  template <class Sink>
  void emit(Sink& sink) const;
  std::vector<KeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kestrel::gguf
