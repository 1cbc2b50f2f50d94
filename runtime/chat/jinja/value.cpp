// Python semantics of jinja::Value: truth, str/repr, equality, ordering, iteration, UTF-8.
#include "chat/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

namespace kestrel::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Syntax: return "TemplateSyntaxError";
    case ErrorKind::Undefined: return "UndefinedError";
    case ErrorKind::Security: return "SecurityError";
    case ErrorKind::Type: return "TypeError";
    case ErrorKind::Value: return "ValueError";
    case ErrorKind::Runtime: return "TemplateRuntimeError";
    case ErrorKind::Raised: return "TemplateError";
    case ErrorKind::Limit: return "LimitError";
  }
  return "Error";
}

// ---- construction and the budget ------------------------------------------------------------
int value_depth(const Value& v) {
  switch (v.kind) {
    case Kind::List: case Kind::Tuple: return static_cast<const ListData*>(v.p.get())->depth;
    case Kind::Dict: return v.dict_data().depth();
    case Kind::Iterator: return v.iter_data().depth;
    case Kind::Object: return std::max(v.obj_data().depth, v.obj_data().attrs.depth());
    case Kind::Function: return v.fn_data().depth;
    default: return 0;
  }
}

int max_depth_of(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& item : items) d = std::max(d, value_depth(item));
  return d;
}

Value Value::string(std::string x, bool safe) {
  Value v;
  v.kind = Kind::String;
  v.safe = safe;
  if (x.size() >= 64) {
    check_alloc(x.size());  // a backstop: the builders check before they allocate
    count_text_work(x.size());
  }
  auto d = std::make_shared<StringData>();
  d->charge.add(static_cast<int64_t>(x.size()) + kValueOverhead);
  d->text = std::move(x);
  v.p = std::move(d);
  return v;
}

Value Value::undefined(std::string message, bool security) {
  Value v;
  if (!message.empty() || security) v.p = std::make_shared<UndefinedData>(UndefinedData{std::move(message), security});
  return v;
}

Value Value::undefined_name(std::string_view name) { return undefined(py_str_repr(name) + " is undefined"); }

// Jinja2's object_type_repr: "None" for None, "dict object" for builtins, the qualified name otherwise.
static std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.kind == Kind::Object) return "jinja2.utils." + v.obj_data().type_name + " object";
  return std::string(type_name(v)) + " object";
}

Value Value::undefined_attr(const Value& obj, std::string_view attr) {
  return undefined(py_str_repr(object_type_repr(obj)) + " has no attribute " + py_str_repr(attr));
}

Value Value::undefined_item(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attr(obj, key.str());
  return undefined(object_type_repr(obj) + " has no element " + repr(key));
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind = Kind::List;
  count_work(items.size());
  auto d = std::make_shared<ListData>();
  d->depth = 1 + max_depth_of(items);
  check_value_depth(d->depth);
  d->charge.add(static_cast<int64_t>(items.size() * sizeof(Value)) + kValueOverhead);
  d->items = std::move(items);
  v.p = std::move(d);
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind = Kind::Tuple;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind = Kind::Dict;
  v.p = std::make_shared<DictData>();
  return v;
}
Value Value::iterator(std::string type_name, std::vector<Value> items, bool single_pass, bool has_len) {
  Value v;
  v.kind = Kind::Iterator;
  auto d = std::make_shared<IteratorData>();
  d->type_name = std::move(type_name);
  d->depth = 1 + max_depth_of(items);
  check_value_depth(d->depth);
  d->items = std::move(items);
  d->single_pass = single_pass;
  d->has_len = has_len;
  v.p = std::move(d);
  return v;
}
Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::Function;
  v.p = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}
Value Value::object(std::shared_ptr<ObjectData> data) {
  Value v;
  v.kind = Kind::Object;
  v.p = std::move(data);
  return v;
}

// ---- dict ------------------------------------------------------------------------------------
const Value* DictData::find(std::string_view key) const {
  auto it = str_index_.find(key);
  return it == str_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  if (key.kind == Kind::List || key.kind == Kind::Dict) fail(ErrorKind::Type, std::string("unhashable type: '") + type_name(key) + "'");
  count_work(items_.size());  // non-string keys are found by a scan
  for (const auto& [k, v] : items_)
    if (!k.is_string() && py_equal(k, key)) return &v;
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  count_work(1);
  if (const Value* existing = find(key)) {
    const int depth = 1 + value_depth(value);
    check_value_depth(depth);
    depth_ = std::max(depth_, depth);
    *const_cast<Value*>(existing) = std::move(value);
    return;
  }
  const int depth = 1 + std::max(value_depth(key), value_depth(value));
  check_value_depth(depth);
  depth_ = std::max(depth_, depth);
  charge_.add(static_cast<int64_t>(sizeof(items_[0])) + (key.is_string() ? static_cast<int64_t>(key.str().size()) + kValueOverhead : 0));
  if (key.is_string()) str_index_.emplace(key.str(), items_.size());
  Value k = key;
  k.safe = false;
  items_.emplace_back(std::move(k), std::move(value));
}

void DictData::clear() {
  // Move the items out first: destroying them may run code that looks at this dict.
  std::vector<std::pair<Value, Value>> items = std::move(items_);
  items_.clear();
  str_index_.clear();
  depth_ = 1;
  charge_.release();
}

int64_t float_to_int(double d) {
  if (std::isnan(d)) fail(ErrorKind::Value, "cannot convert float NaN to integer");
  // 2^63 is exactly representable; everything below it in magnitude converts.
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
    fail(ErrorKind::Value, "integer overflow (Kestrel's integers are 64-bit)");
  return static_cast<int64_t>(d);
}

// ---- truth, names ----------------------------------------------------------------------------
bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return v.b;
    case Kind::Int: return v.i != 0;
    case Kind::Float: return v.f != 0;
    case Kind::String: return !v.str().empty();
    case Kind::List: case Kind::Tuple: return !v.items().empty();
    case Kind::Dict: return v.dict_data().size() != 0;
    case Kind::Iterator: return !v.iter_data().has_len || !v.iter_data().items.empty();
    case Kind::Object: case Kind::Function: return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return v.safe ? "Markup" : "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Iterator: return v.iter_data().type_name.c_str();
    case Kind::Object: return v.obj_data().type_name.c_str();
    case Kind::Function: return "function";
  }
  return "object";
}

[[noreturn]] void fail_undefined(const Value& v) {
  const UndefinedData* d = v.undef_data();
  if (d && d->security) fail(ErrorKind::Security, d->message);
  fail(ErrorKind::Undefined, d && !d->message.empty() ? d->message : "undefined value");
}

// ---- str / repr ------------------------------------------------------------------------------
std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string out = s[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (s[k] >= '0' && s[k] <= '9') digits += s[k];
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp >= 0) {
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  out += "0.";
  out.append(static_cast<size_t>(-exp - 1), '0');
  return out + digits;
}

// Python's str.isprintable() for one code point (approximate beyond the common ranges).
static bool is_printable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f)) return false;
  if (c == 0x1680 || c == 0x180e || c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f) return false;
  if ((c >= 0xd800 && c <= 0xf8ff) || c >= 0xf0000 || (c >= 0xe0000 && c <= 0xe007f)) return false;
  return true;
}

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  const uint64_t cap = output_cap();
  for (uint32_t c : utf8_decode(s)) {
    if (out.size() > cap) fail_output_limit();  // up to 10 bytes per code point
    char buf[16];
    if (c == static_cast<uint32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else {
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
      out += buf;
    }
  }
  return out + q;
}

namespace {

// Printing recurses into containers; a namespace can be made to nest deeper than its recorded
// depth (it is mutable), so printing counts its own depth too.
thread_local int t_print_depth = 0;
struct PrintDepth {
  PrintDepth() {
    check_value_depth(t_print_depth + 1);
    ++t_print_depth;
  }
  ~PrintDepth() { --t_print_depth; }
  PrintDepth(const PrintDepth&) = delete;
  PrintDepth& operator=(const PrintDepth&) = delete;
};

void join_repr(std::string& out, const std::vector<Value>& items) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) append_checked(out, ", ");
    append_checked(out, repr(items[k]));
  }
}

void dict_repr(std::string& out, const DictData& d) {
  bool first = true;
  for (const auto& [k, val] : d.items()) {
    if (!first) append_checked(out, ", ");
    first = false;
    append_checked(out, repr(k));
    append_checked(out, ": ");
    append_checked(out, repr(val));
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.b ? "True" : "False";
    case Kind::Int: return std::to_string(v.i);
    case Kind::Float: return format_float(v.f);
    case Kind::String: return v.str();
    case Kind::List: {
      PrintDepth guard;
      std::string out = "[";
      join_repr(out, v.items());
      return out + "]";
    }
    case Kind::Tuple: {
      PrintDepth guard;
      std::string out = "(";
      join_repr(out, v.items());
      return out + (v.items().size() == 1 ? ",)" : ")");
    }
    case Kind::Dict: {
      PrintDepth guard;
      std::string out = "{";
      dict_repr(out, v.dict_data());
      return out + "}";
    }
    case Kind::Iterator: {
      const IteratorData& d = v.iter_data();
      if (d.single_pass) return "<" + d.type_name + " object>";
      PrintDepth guard;
      std::string out = d.type_name + "([";
      join_repr(out, d.items);
      return out + "])";
    }
    case Kind::Object: {
      const ObjectData& o = v.obj_data();
      if (o.type_name != "Namespace") return "<" + o.type_name + " object>";
      PrintDepth guard;
      std::string out = "<Namespace {";
      dict_repr(out, o.attrs);
      return out + "}>";
    }
    case Kind::Function: return "<function " + v.fn_data().name + ">";
  }
  return "";
}

std::string repr(const Value& v) {
  if (v.kind == Kind::String) return v.safe ? "Markup(" + py_str_repr(v.str()) + ")" : py_str_repr(v.str());
  if (v.kind == Kind::Undefined) return "Undefined";
  return to_str(v);
}

// ---- equality and ordering -------------------------------------------------------------------
bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::Undefined: case Kind::None: return true;
    case Kind::String:
      count_text_work(std::min(a.str().size(), b.str().size()));
      return a.str() == b.str();
    case Kind::List: case Kind::Tuple: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      count_work(x.size());
      for (size_t k = 0; k < x.size(); ++k)
        if (!py_equal(x[k], y[k])) return false;
      return true;
    }
    case Kind::Dict: {
      const DictData &x = a.dict_data(), &y = b.dict_data();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    default: return a.p == b.p;
  }
}

int py_compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.kind == Kind::Float || b.kind == Kind::Float) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as equal here; never seen in templates
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    count_text_work(std::min(a.str().size(), b.str().size()));
    const int c = a.str().compare(b.str());  // UTF-8 order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind == b.kind && a.is_seq()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (py_equal(x[k], y[k])) continue;
      return py_compare(x[k], y[k], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(ErrorKind::Type, std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// ---- iteration -------------------------------------------------------------------------------
std::vector<Value> iterate(const Value& v) {
  count_work(1 + (v.is_seq() ? v.items().size() : v.kind == Kind::String ? v.str().size() : 0));
  // The copy is a list of its own while the caller holds it.
  const size_t n = v.is_seq() ? v.items().size() : v.is_dict() ? v.dict_data().size() : v.kind == Kind::Iterator ? v.iter_data().items.size() : 0;
  check_alloc(sat_mul(n, sizeof(Value)));
  switch (v.kind) {
    case Kind::Undefined: return {};
    case Kind::List: case Kind::Tuple: return v.items();
    case Kind::String: {
      std::vector<Value> out;
      check_alloc(sat_mul(utf8_length(v.str()), sizeof(Value) + sizeof(StringData)));  // one value per character
      out.reserve(static_cast<size_t>(utf8_length(v.str())));
      for (uint32_t c : utf8_decode(v.str())) {
        std::string ch;
        append_utf8(ch, c);
        out.push_back(Value::string(std::move(ch), v.safe));
      }
      return out;
    }
    case Kind::Dict: {
      count_work(v.dict_data().size());
      std::vector<Value> out;
      out.reserve(v.dict_data().size());
      for (const auto& kv : v.dict_data().items()) out.push_back(kv.first);
      return out;
    }
    case Kind::Iterator: {
      IteratorData& d = v.iter_data();
      if (!d.error.empty()) fail(ErrorKind::Type, d.error);
      if (d.single_pass && d.consumed) return {};
      count_work(d.items.size());
      d.consumed = true;
      return d.items;
    }
    default: fail(ErrorKind::Type, std::string("'") + type_name(v) + "' object is not iterable");
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined: return 0;
    case Kind::String: return utf8_length(v.str());
    case Kind::List: case Kind::Tuple: return static_cast<int64_t>(v.items().size());
    case Kind::Dict: return static_cast<int64_t>(v.dict_data().size());
    case Kind::Iterator:
      if (v.iter_data().has_len) return static_cast<int64_t>(v.iter_data().items.size());
      [[fallthrough]];
    default: fail(ErrorKind::Type, std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

// ---- UTF-8 -----------------------------------------------------------------------------------
void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const unsigned char c = s[k];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || k + len > s.size()) {
      out += U'\uFFFD';
      ++k;
      continue;
    }
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    bool ok = true;
    for (int j = 1; j < len; ++j) {
      const unsigned char cc = s[k + j];
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++k;
      continue;
    }
    out += static_cast<char32_t>(cp);
    k += len;
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

static uint32_t lower_cp(uint32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3AB && c != 0x3A2) ||
      (c >= 0x410 && c <= 0x42F))
    return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c & 1) : !(c & 1)) return c + 1;
  }
  return c;
}
static uint32_t upper_cp(uint32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) ||
      (c >= 0x430 && c <= 0x44F))
    return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? !(c & 1) : (c & 1)) return c - 1;
  }
  return c;
}

std::string str_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    return out;
  }
  for (uint32_t c : utf8_decode(s)) append_utf8(out, lower_cp(c));
  return out;
}

std::string str_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
    return out;
  }
  for (uint32_t c : utf8_decode(s)) {
    if (c == 0xDF) {
      out += "SS";
      continue;
    }
    append_utf8(out, upper_cp(c));
  }
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const uint64_t cap = output_cap();
  for (char c : s) {
    if (out.size() > cap) fail_output_limit();  // up to 5 bytes per byte
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace kestrel::jinja
