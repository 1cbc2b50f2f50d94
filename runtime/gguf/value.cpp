// gguf::Value helpers: type names, numeric views and constructors.
#include <limits>

#include "gguf/gguf.h"

namespace kestrel::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

static bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

std::optional<int64_t> Value::as_int() const {
  if (type == ValueType::BOOL) return u != 0 ? 1 : 0;
  if (!is_integer()) return std::nullopt;
  if (is_signed(type)) return i;
  // A uint64 above INT64_MAX has no int64 value; refuse rather than wrap to a negative.
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

std::optional<double> Value::as_float() const {
  if (is_float()) return f;
  if (!is_integer()) return std::nullopt;
  return is_signed(type) ? static_cast<double>(i) : static_cast<double>(u);
}

Value Value::make_u32(uint32_t v) {
  Value r;
  r.type = ValueType::UINT32;
  r.u = v;
  return r;
}

Value Value::make_i32(int32_t v) {
  Value r;
  r.type = ValueType::INT32;
  r.i = v;
  return r;
}

Value Value::make_u64(uint64_t v) {
  Value r;
  r.type = ValueType::UINT64;
  r.u = v;
  return r;
}

Value Value::make_f32(float v) {
  Value r;
  r.type = ValueType::FLOAT32;
  r.f = v;
  return r;
}

Value Value::make_bool(bool v) {
  Value r;
  r.type = ValueType::BOOL;
  r.u = v ? 1 : 0;
  return r;
}

Value Value::make_string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.str = std::move(v);
  return r;
}

Value Value::make_array(ValueType elem, std::vector<Value> elems) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = elem;
  r.array = std::move(elems);
  return r;
}

Value Value::make_string_array(const std::vector<std::string>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(make_string(s));
  return make_array(ValueType::STRING, std::move(elems));
}

Value Value::make_f32_array(const std::vector<float>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(make_f32(x));
  return make_array(ValueType::FLOAT32, std::move(elems));
}

Value Value::make_i32_array(const std::vector<int32_t>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(make_i32(x));
  return make_array(ValueType::INT32, std::move(elems));
}

}  // namespace kestrel::gguf
