// Python's binary operators, `in` and slicing on jinja::Value.
#include <cmath>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail(ErrorKind::Type, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() { fail(ErrorKind::Value, "integer overflow (Kestrel's integers are 64-bit)"); }
int64_t add_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  const uint64_t n = static_cast<uint64_t>(times);
  if (seq.is_string()) {
    std::string out;
    append_repeated(out, seq.str(), n);  // checks the size before allocating
    return Value::string(std::move(out), seq.safe);
  }
  const auto& items = seq.items();
  in.charge(sat_mul(sat_mul(items.size(), sizeof(Value)), n));
  std::vector<Value> out;
  out.reserve(items.size() * n);
  for (uint64_t k = 0; k < n && !items.empty(); ++k) out.insert(out.end(), items.begin(), items.end());
  return seq.kind == Kind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

Value add(Interpreter& in, const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) {
    // markupsafe: Markup + str escapes the str (and str + Markup likewise).
    const bool safe = a.safe || b.safe;
    const std::string left = safe && !a.safe ? html_escape(a.str()) : std::string();
    const std::string right = safe && !b.safe ? html_escape(b.str()) : std::string();
    const std::string& l = safe && !a.safe ? left : a.str();
    const std::string& r = safe && !b.safe ? right : b.str();
    in.charge(l.size() + r.size());
    std::string out;
    out.reserve(l.size() + r.size());
    out += l;
    out += r;
    return Value::string(std::move(out), safe);
  }
  if (a.is_string() && !a.safe) fail(ErrorKind::Type, std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
  if (a.is_seq() && a.kind == b.kind) {
    in.charge((a.items().size() + b.items().size()) * sizeof(Value));
    std::vector<Value> out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.kind == Kind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
  }
  if (a.is_seq()) fail(ErrorKind::Type, std::string("can only concatenate ") + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  unsupported("+", a, b);
}

double float_mod(double x, double y) {
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return m;
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "+" && !(a.is_number() && b.is_number())) return add(in, a, b);
  if (op == "*") {
    if ((a.is_string() || a.is_seq()) && b.is_int()) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_seq()) && a.is_int()) return repeat(in, b, a.as_int());
  }
  if (op == "%" && a.is_string()) {
    // Markup % args escapes the (non-Markup) string arguments.
    auto esc = [](const Value& v) { return v.is_string() && !v.safe ? Value::string(html_escape(v.str())) : v; };
    Value args = b;
    if (a.safe && b.kind == Kind::Tuple) {
      std::vector<Value> items;
      for (const Value& v : b.items()) items.push_back(esc(v));
      args = Value::tuple(std::move(items));
    } else if (a.safe) {
      args = esc(b);
    }
    return Value::string(percent_format(a.str(), args), a.safe);  // it checks its size as it grows
  }
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  const bool fl = a.kind == Kind::Float || b.kind == Kind::Float;
  const double x = a.as_double(), y = b.as_double();
  const int64_t i = a.as_int(), j = b.as_int();
  if (op == "+") return fl ? Value::number(x + y) : Value::integer(add_i(i, j));
  if (op == "-") return fl ? Value::number(x - y) : Value::integer(sub_i(i, j));
  if (op == "*") return fl ? Value::number(x * y) : Value::integer(mul_i(i, j));
  if (op == "/") {
    if (y == 0) fail(ErrorKind::Value, fl ? "float division by zero" : "division by zero");
    return Value::number(x / y);
  }
  if (op == "//") {
    if (y == 0) fail(ErrorKind::Value, fl ? "float floor division by zero" : "integer division or modulo by zero");
    if (fl) return Value::number(std::floor(x / y));
    if (i == INT64_MIN && j == -1) overflow();
    int64_t q = i / j;
    if ((i % j != 0) && ((i < 0) != (j < 0))) --q;
    return Value::integer(q);
  }
  if (op == "%") {
    if (y == 0) fail(ErrorKind::Value, fl ? "float modulo" : "integer modulo by zero");
    if (fl) return Value::number(float_mod(x, y));
    if (j == -1) return Value::integer(0);
    int64_t m = i % j;
    if (m != 0 && ((m < 0) != (j < 0))) m += j;
    return Value::integer(m);
  }
  if (op == "**") {
    if (fl || j < 0) {
      if (x == 0 && y < 0) fail(ErrorKind::Value, "0.0 cannot be raised to a negative power");
      return Value::number(std::pow(x, y));
    }
    int64_t base = i, result = 1, e = j;
    while (e > 0) {
      if (e & 1) result = mul_i(result, base);
      e >>= 1;
      if (e) base = mul_i(base, base);
    }
    return Value::integer(result);
  }
  unsupported(op, a, b);
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
      count_text_work(container.str().size());
      if (!item.is_string())
        fail(ErrorKind::Type, std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Kind::List: case Kind::Tuple:
      count_work(container.items().size());
      for (const Value& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Kind::Dict: return container.dict_data().find(item) != nullptr;
    case Kind::Iterator:
      for (const Value& v : iterate(container))
        if (py_equal(v, item)) return true;
      return false;
    default: fail(ErrorKind::Type, std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_int())
      fail(ErrorKind::Type, "slice indices must be integers or None or have an __index__ method");
  const int64_t st = step.is_none() ? 1 : std::max<int64_t>(step.as_int(), -INT64_MAX);
  if (st == 0) fail(ErrorKind::Value, "slice step cannot be zero");
  std::u32string cps;
  int64_t len;
  if (obj.is_string()) {
    count_text_work(obj.str().size());
    cps = utf8_decode(obj.str());
    len = static_cast<int64_t>(cps.size());
  } else if (obj.is_seq()) {
    len = static_cast<int64_t>(obj.items().size());
  } else {
    return Value::undefined(std::string(type_name(obj)) + " object has no element slice");
  }
  // CPython's PySlice_AdjustIndices.
  int64_t b, e;
  if (st > 0) {
    b = start.is_none() ? 0 : start.as_int();
    e = stop.is_none() ? len : stop.as_int();
    if (b < 0) b = std::max<int64_t>(b + len, 0);
    if (e < 0) e = std::max<int64_t>(e + len, 0);
    b = std::min(b, len);
    e = std::min(e, len);
  } else {
    b = start.is_none() ? len - 1 : start.as_int();
    e = stop.is_none() ? -1 : stop.as_int();
    if (!start.is_none() && b < 0) b = std::max<int64_t>(b + len, -1);
    if (!stop.is_none() && e < 0) e = std::max<int64_t>(e + len, -1);
    b = std::min(b, len - 1);
    e = std::min(e, len - 1);
  }
  std::vector<int64_t> idx;
  for (int64_t k = b; st > 0 ? k < e : k > e;) {  // stepping without overflow
    idx.push_back(k);
    if (st > 0 ? e - k <= st : k - e <= -st) break;
    k += st;
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t k : idx) out += cps[static_cast<size_t>(k)];
    return Value::string(utf8_encode(out), obj.safe);
  }
  std::vector<Value> out;
  for (int64_t k : idx) out.push_back(obj.items()[static_cast<size_t>(k)]);
  return obj.kind == Kind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

}  // namespace kestrel::jinja
