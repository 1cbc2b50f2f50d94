// Jinja's builtin tests (`x is defined`, `x is string`, ...), with Python's type rules: bool is
// an integer and a number; strings and dicts are sequences; undefined is iterable.
#include <cmath>

#include "chat/jinja/builtins.h"
#include "chat/jinja/parser.h"

namespace kestrel::jinja {
namespace {

const Value& arg(const char* name, CallArgs& a) {
  Params p(name, a, {"other"});
  if (!p.has(0)) fail(ErrorKind::Type, std::string("test_") + name + "() missing 1 required positional argument");
  return p.get(0);
}
void no_args(const char* name, CallArgs& a) { Params p(name, a, {}); }

bool t_defined(Interpreter&, const Value& v, CallArgs& a) { return no_args("defined", a), !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) { return no_args("undefined", a), v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs& a) { return no_args("none", a), v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) { return no_args("boolean", a), v.kind == Kind::Bool; }
bool t_false(Interpreter&, const Value& v, CallArgs& a) { return no_args("false", a), v.kind == Kind::Bool && !v.b; }
bool t_true(Interpreter&, const Value& v, CallArgs& a) { return no_args("true", a), v.kind == Kind::Bool && v.b; }
bool t_integer(Interpreter&, const Value& v, CallArgs& a) { return no_args("integer", a), v.kind == Kind::Int; }
bool t_float(Interpreter&, const Value& v, CallArgs& a) { return no_args("float", a), v.kind == Kind::Float; }
bool t_number(Interpreter&, const Value& v, CallArgs& a) { return no_args("number", a), v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs& a) { return no_args("string", a), v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) { return no_args("mapping", a), v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_undefined() || v.is_string() || v.is_seq() || v.is_dict() || v.kind == Kind::Iterator;
}
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_undefined() || v.is_string() || v.is_seq() || v.is_dict() ||
         (v.kind == Kind::Iterator && v.iter_data().type_name == "range");
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.kind == Kind::Function || (v.kind == Kind::Object && v.obj_data().callable);
}
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) { return no_args("escaped", a), v.is_string() && v.safe; }
bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  const std::string s = to_str(v);
  return str_lower(s) == s && str_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  const std::string s = to_str(v);
  return str_upper(s) == s && str_lower(s) != s;
}
int64_t int_of(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int()) return v.as_int();
  if (v.kind == Kind::Float && std::floor(v.f) == v.f) return float_to_int(v.f);
  fail(ErrorKind::Type, std::string("test '") + test + "' needs an integer, not '" + type_name(v) + "'");
}
bool t_odd(Interpreter&, const Value& v, CallArgs& a) { return no_args("odd", a), int_of(v, "odd") % 2 != 0; }
bool t_even(Interpreter&, const Value& v, CallArgs& a) { return no_args("even", a), int_of(v, "even") % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  const int64_t d = int_of(arg("divisibleby", a), "divisibleby");
  if (d == 0) fail(ErrorKind::Value, "integer division or modulo by zero");
  if (d == -1) return true;  // INT64_MIN % -1 overflows in C++
  return int_of(v, "divisibleby") % d == 0;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return py_equal(v, arg("eq", a)); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !py_equal(v, arg("ne", a)); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, arg("lt", a), "<") < 0; }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, arg("le", a), "<=") <= 0; }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, arg("gt", a), ">") > 0; }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return py_compare(v, arg("ge", a), ">=") >= 0; }
bool t_in(Interpreter&, const Value& v, CallArgs& a) { return py_contains(arg("in", a), v); }
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = arg("sameas", a);
  if (v.kind != o.kind) return false;
  switch (v.kind) {
    case Kind::None: case Kind::Undefined: return true;
    case Kind::Bool: return v.b == o.b;
    case Kind::Int: return v.i == o.i && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
    case Kind::Float: case Kind::String: return false;
    default: return v.p == o.p;
  }
}
bool t_filter(Interpreter&, const Value& v, CallArgs& a) { return no_args("filter", a), v.is_string() && find_filter(v.str()); }
bool t_test(Interpreter&, const Value& v, CallArgs& a) { return no_args("test", a), v.is_string() && find_test(v.str()); }

struct Entry {
  const char* name;
  TestFn fn;
};
const Entry kTests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"false", t_false}, {"true", t_true}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
    {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
    {"callable", t_callable}, {"escaped", t_escaped}, {"lower", t_lower}, {"upper", t_upper}, {"odd", t_odd},
    {"even", t_even}, {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
    {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in},
    {"sameas", t_sameas}, {"filter", t_filter}, {"test", t_test},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const Entry& e : kTests)
    if (name == e.name) return e.fn;
  return nullptr;
}

bool is_known_test(std::string_view name) { return find_test(name) != nullptr; }

}  // namespace kestrel::jinja
