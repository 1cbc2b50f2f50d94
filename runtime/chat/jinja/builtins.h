// Helpers shared by the builtin filters, tests, methods and globals.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/interpreter.h"

namespace kestrel::jinja {

// Binds Python-style call arguments to named parameters: positionals first, then keywords.
// Unknown keywords, duplicates and too many positionals are TypeErrors, as in Python.
class Params {
 public:
  Params(const char* fn, const CallArgs& args, std::initializer_list<const char*> names);
  bool has(size_t k) const { return vals_[k] != nullptr; }
  const Value& get(size_t k) const;  // an undefined value when not given
  Value get_or(size_t k, const Value& dflt) const { return has(k) ? *vals_[k] : dflt; }
  int64_t get_int(size_t k, int64_t dflt) const;
  bool get_bool(size_t k, bool dflt) const { return has(k) ? truthy(*vals_[k]) : dflt; }
  std::string get_str(size_t k, const std::string& dflt) const { return has(k) ? to_str(*vals_[k]) : dflt; }

 private:
  const char* fn_;
  std::vector<const Value*> vals_;
};

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0, with getitem semantics.
Value attr_path(Interpreter& in, const Value& item, const Value& attribute);
// ignore_case: strings lowered, anything else unchanged.
Value fold_case(const Value& v);

// Python str helpers on UTF-8.
bool py_isspace(uint32_t cp);
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends = false);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
// "fmt" % args (printf-style); args is a tuple, a dict (for %(name)s) or a single value.
std::string percent_format(const std::string& fmt, const Value& args);
// str.format(*args, **kwargs) with {}, {0}, {name}, {name.attr}, {name[key]} and format specs.
std::string brace_format(Interpreter& in, const std::string& fmt, const CallArgs& args);
// format(value, spec) for the common specs: [[fill]align][sign][0][width][.precision][type].
std::string format_spec(const Value& v, std::string_view spec);

// json.dumps as Hugging Face's tojson calls it.
struct JsonOptions {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent;             // per level when indent_set
  std::string item_sep = ", ";    // "," when indenting and no separators are given
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace kestrel::jinja
