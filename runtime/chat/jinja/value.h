// A dynamic value with Python semantics, as the Jinja interpreter sees the data a template works
// on: undefined, None, bool, int, float, str (UTF-8; indexed by code point; `safe` marks a
// markupsafe.Markup), list, tuple, dict (insertion order kept), iterator (generators and dict
// views), object (namespace, loop, cycler, joiner) and function (builtins, bound methods, macros).
// Containers and strings are shared by reference (strings are immutable), as in Python.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/jinja/error.h"
#include "chat/jinja/limits.h"

namespace kestrel::jinja {

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Iterator, Object, Function };

struct Value;
class Interpreter;

// Strings and lists count their bytes against the render's budget while alive (limits.h).
struct StringData {
  std::string text;
  LiveCharge charge;
};

struct ListData {
  std::vector<Value> items;
  int depth = 1;  // containers nested: 1 + the deepest item's (bounded: freeing and printing recurse)
  LiveCharge charge;
};

// Python dict: keys compare with Python equality (1 == 1.0 == True); string keys are indexed.
class DictData {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);
  size_t size() const;  // defined below Value (clang needs Value complete for it)
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  int depth() const { return depth_; }
  void clear();  // breaks reference cycles through namespaces when a render ends

 private:
  struct Hash {
    using is_transparent = void;  // find(string_view) without a temporary std::string
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::pair<Value, Value>> items_;
  int depth_ = 1;
  LiveCharge charge_;  // entries, while alive
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> str_index_;
};

// Generators (single pass, no len) and dict views / reverse iterators (type_name tells which).
struct IteratorData {
  std::string type_name;
  std::vector<Value> items;
  bool single_pass = true;
  bool consumed = false;
  bool has_len = false;
  int depth = 1;
  std::string error;  // a TypeError raised when consumed (Python's lazy generators)
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct FunctionData {
  std::string name;  // for messages and repr
  NativeFn fn;
  int depth = 1;     // 1 + the deepest value the function holds (a bound method: its object)
};

struct ObjectData;

struct UndefinedData {
  std::string message;    // what an access or use reports ("'x' is undefined", ...)
  bool security = false;  // the sandbox's unsafe_undefined: using it raises SecurityError
};

struct Value {
  Kind kind = Kind::Undefined;
  bool safe = false;  // String only: a markupsafe.Markup
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<void> p;  // StringData, ListData, DictData, IteratorData, ObjectData, FunctionData, UndefinedData

  static Value undefined(std::string message = "", bool security = false);
  static Value undefined_name(std::string_view name);                 // "'name' is undefined"
  static Value undefined_attr(const Value& obj, std::string_view attr);  // "'dict object' has no attribute 'x'"
  static Value undefined_item(const Value& obj, const Value& key);
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(std::string x, bool safe = false);  // throws a Limit error past the budget
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();
  static Value iterator(std::string type_name, std::vector<Value> items, bool single_pass, bool has_len);
  static Value generator(std::vector<Value> items) { return iterator("generator", std::move(items), true, false); }
  static Value function(std::string name, NativeFn fn);
  static Value object(std::shared_ptr<ObjectData> data);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_int() const { return kind == Kind::Int || kind == Kind::Bool; }  // bool is an int in Python
  bool is_number() const { return kind == Kind::Int || kind == Kind::Bool || kind == Kind::Float; }
  bool is_seq() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_dict() const { return kind == Kind::Dict; }
  int64_t as_int() const { return kind == Kind::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return kind == Kind::Float ? f : static_cast<double>(as_int()); }

  const std::string& str() const { return static_cast<const StringData*>(p.get())->text; }  // String
  std::vector<Value>& items() const { return static_cast<ListData*>(p.get())->items; }  // List/Tuple
  DictData& dict_data() const { return *static_cast<DictData*>(p.get()); }
  IteratorData& iter_data() const { return *static_cast<IteratorData*>(p.get()); }
  ObjectData& obj_data() const { return *static_cast<ObjectData*>(p.get()); }
  FunctionData& fn_data() const { return *static_cast<FunctionData*>(p.get()); }
  const UndefinedData* undef_data() const { return static_cast<const UndefinedData*>(p.get()); }
};

inline size_t DictData::size() const { return items_.size(); }

// namespace(), loop, cycler, joiner: attributes by name; `callable` makes the object callable.
struct ObjectData {
  std::string type_name;
  DictData attrs;
  bool assignable = false;  // namespace: {% set ns.x = ... %} is allowed
  NativeFn callable;
  // Attributes computed on access (the loop object), consulted after `attrs`.
  std::function<bool(std::string_view, Value*)> lazy_attr;
  int depth = 1;  // 1 + the deepest value held outside `attrs` (a cycler's items, a loop's)
};

// How deeply containers nest inside v (0 for scalars); a new container checks it against the
// render's max_value_depth.
int value_depth(const Value& v);
int max_depth_of(const std::vector<Value>& items);

// ---- Python semantics ----------------------------------------------------------------------
bool truthy(const Value& v);
// int(d): ValueError for NaN, OverflowError (kind Value) beyond 64 bits; never undefined behaviour.
int64_t float_to_int(double d);
std::string to_str(const Value& v);  // str(v); undefined -> ""
std::string repr(const Value& v);    // repr(v)
std::string py_str_repr(std::string_view s);
std::string format_float(double d);  // float.__repr__
const char* type_name(const Value& v);  // "str", "int", "dict", "NoneType", ...
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b, const char* op);  // <0, 0, >0 or TypeError
// Iteration: strings give characters, dicts their keys, undefined nothing; a generator is consumed.
std::vector<Value> iterate(const Value& v);
int64_t py_len(const Value& v);  // TypeError for objects without len()
// Raises the UndefinedError (or SecurityError) an undefined value carries.
[[noreturn]] void fail_undefined(const Value& v);
// Throws if v is undefined (used where Python calls a method Undefined fails on).
inline void require_defined(const Value& v) { if (v.is_undefined()) fail_undefined(v); }

// ---- UTF-8 ---------------------------------------------------------------------------------
void append_utf8(std::string& out, uint32_t cp);
std::u32string utf8_decode(std::string_view s);  // invalid bytes decode as U+FFFD
std::string utf8_encode(std::u32string_view s);
int64_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);
// Python str.lower/upper for ASCII and the Latin-1/Greek/Cyrillic letters that map 1:1.
std::string str_lower(std::string_view s);
std::string str_upper(std::string_view s);
// markupsafe.escape of a plain string.
std::string html_escape(std::string_view s);

}  // namespace kestrel::jinja
