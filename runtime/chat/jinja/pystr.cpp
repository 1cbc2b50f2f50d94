// Shared builtin helpers: argument binding, attribute paths, Python str operations on UTF-8,
// printf-style "%" formatting and str.format.
#include <cmath>
#include <cstdio>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {

// ---- Params ----------------------------------------------------------------------------------
Params::Params(const char* fn, const CallArgs& args, std::initializer_list<const char*> names)
    : fn_(fn), vals_(names.size(), nullptr) {
  const std::vector<const char*> nm(names);
  if (args.pos.size() > nm.size())
    fail(ErrorKind::Type, std::string(fn) + "() takes at most " + std::to_string(nm.size()) + " argument(s) (" +
                              std::to_string(args.pos.size()) + " given)");
  for (size_t k = 0; k < args.pos.size(); ++k) vals_[k] = &args.pos[k];
  for (const auto& [key, v] : args.kw) {
    size_t k = 0;
    while (k < nm.size() && key != nm[k]) ++k;
    if (k == nm.size()) fail(ErrorKind::Type, std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    if (vals_[k]) fail(ErrorKind::Type, std::string(fn) + "() got multiple values for argument '" + key + "'");
    vals_[k] = &v;
  }
}

const Value& Params::get(size_t k) const {
  static const Value kMissing;
  return vals_[k] ? *vals_[k] : kMissing;
}

int64_t Params::get_int(size_t k, int64_t dflt) const {
  if (!has(k)) return dflt;
  const Value& v = *vals_[k];
  if (v.is_int()) return v.as_int();
  if (v.kind == Kind::Float) return float_to_int(v.f);
  fail(ErrorKind::Type, std::string(fn_) + "(): '" + type_name(v) + "' object cannot be interpreted as an integer");
}

// ---- attribute paths -------------------------------------------------------------------------
Value attr_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  if (!attribute.is_string()) return in.getitem(item, attribute);
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = attribute.str().find('.', start);
    const std::string part = attribute.str().substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty();
    for (char c : part) digits = digits && c >= '0' && c <= '9';
    cur = in.getitem(cur, digits && part.size() < 18 ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value fold_case(const Value& v) { return v.is_string() ? Value::string(str_lower(v.str())) : v; }

// ---- str helpers -----------------------------------------------------------------------------
bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws && !chars.is_string()) fail(ErrorKind::Type, "strip arg must be None or str");
  const std::u32string set = ws ? std::u32string() : utf8_decode(chars.str());
  const std::u32string cps = utf8_decode(s);
  auto strip_it = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  const std::u32string cps = utf8_decode(s);
  size_t start = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    const char32_t c = cps[k];
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = k;
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
    out.push_back(utf8_encode(std::u32string_view(cps).substr(start, (keepends ? k + 1 : end) - start)));
    start = k + 1;
  }
  if (start < cps.size()) out.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `repl` before every character and at the end
    const std::u32string cps = utf8_decode(s);
    const uint64_t inserts = std::min<uint64_t>(cps.size() + 1, count < 0 ? UINT64_MAX : static_cast<uint64_t>(count));
    if (sat_add(s.size(), sat_mul(inserts, repl.size())) > output_cap()) fail_output_limit();
    int64_t n = 0;
    for (char32_t c : cps) {
      if (count < 0 || n < count) out += repl, ++n;
      append_utf8(out, c);
    }
    if (count < 0 || n < count) out += repl;
    count_text_work(out.size());
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    append_checked(out, s.substr(pos, hit - pos));
    append_checked(out, repl);
    pos = hit + old.size();
    ++n;
  }
  append_checked(out, s.substr(pos));
  return out;
}

// ---- format specs ----------------------------------------------------------------------------
namespace {

std::string pad(std::string body, int64_t width, char align, const std::string& fill) {
  const int64_t len = utf8_length(body);
  if (width <= len) return body;
  const uint64_t n = static_cast<uint64_t>(width - len);
  if (sat_add(body.size(), sat_mul(n, fill.size())) > output_cap()) fail_output_limit();  // before allocating
  const uint64_t left = align == '<' ? 0 : align == '>' ? n : align == '^' ? n / 2 : 0;
  const uint64_t right = align == '<' ? n : align == '^' ? n - n / 2 : 0;
  std::string out;
  append_repeated(out, fill, left);
  out += body;
  append_repeated(out, fill, right);
  return out;
}

// A decimal field of a format spec; saturates instead of overflowing (the size check follows).
int64_t parse_width(const std::u32string& sp, size_t& k) {
  int64_t v = 0;
  while (k < sp.size() && sp[k] >= '0' && sp[k] <= '9') {
    v = v > (INT64_MAX - 9) / 10 ? INT64_MAX : v * 10 + (sp[k] - '0');
    ++k;
  }
  return v;
}

std::string c_format(const char* spec, double v) {
  char buf[512];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

}  // namespace

std::string format_spec(const Value& v, std::string_view spec) {
  if (spec.empty()) return to_str(v);
  const std::u32string sp = utf8_decode(spec);
  size_t k = 0;
  std::string fill = " ";
  char align = 0, sign = '-';
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (sp.size() >= 2 && is_align(sp[1])) {
    fill = utf8_encode(sp.substr(0, 1));
    align = static_cast<char>(sp[1]);
    k = 2;
  } else if (!sp.empty() && is_align(sp[0])) {
    align = static_cast<char>(sp[0]);
    k = 1;
  }
  if (k < sp.size() && (sp[k] == '+' || sp[k] == '-' || sp[k] == ' ')) sign = static_cast<char>(sp[k++]);
  bool alt = false;
  if (k < sp.size() && sp[k] == '#') alt = true, ++k;
  if (k < sp.size() && sp[k] == '0') {
    if (!align) fill.assign(1, '0'), align = '=';
    ++k;
  }
  int64_t width = parse_width(sp, k), precision = -1;
  bool comma = false;
  char sep_char = ',';
  if (k < sp.size() && (sp[k] == ',' || sp[k] == '_')) comma = true, sep_char = static_cast<char>(sp[k++]);
  if (k < sp.size() && sp[k] == '.') {
    ++k;
    precision = parse_width(sp, k);
  }
  char type = k < sp.size() ? static_cast<char>(sp[k++]) : 0;
  if (k != sp.size()) fail(ErrorKind::Value, "Invalid format specifier");
  (void)alt;
  if (v.is_string() || (!v.is_number() && type == 0)) {
    if (type != 0 && type != 's') fail(ErrorKind::Value, std::string("Unknown format code '") + type + "' for object of type 'str'");
    std::string s = to_str(v);
    if (precision >= 0) s = utf8_encode(utf8_decode(s).substr(0, static_cast<size_t>(precision)));
    return pad(std::move(s), width, align ? (align == '=' ? '<' : align) : '<', fill);
  }
  if (!v.is_number()) fail(ErrorKind::Type, std::string("unsupported format string passed to ") + type_name(v) + ".__format__");
  std::string body;
  bool negative = false;
  if (type == 0 && v.kind == Kind::Bool) {
    body = v.b ? "True" : "False";
  } else if (v.is_int() && (type == 0 || type == 'd' || type == 'n' || type == 'x' || type == 'X' || type == 'o' || type == 'b' || type == 'c')) {
    int64_t i = v.as_int();
    negative = i < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
    if (type == 'c') return pad(utf8_encode(std::u32string(1, static_cast<char32_t>(i))), width, align ? align : '<', fill);
    const int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
    do {
      const int d = static_cast<int>(u % base);
      body.insert(body.begin(), static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
      u /= base;
    } while (u);
  } else {
    double d = v.as_double();
    negative = std::signbit(d) && !std::isnan(d);
    d = std::fabs(d);
    const int p = precision < 0 ? 6 : static_cast<int>(std::min<int64_t>(precision, 100));
    char fmt[16];
    switch (type) {
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
        std::snprintf(fmt, sizeof fmt, "%%.%d%c", p, type);
        body = c_format(fmt, d);
        break;
      case '%':
        std::snprintf(fmt, sizeof fmt, "%%.%df", p);
        body = c_format(fmt, d * 100) + "%";
        break;
      case 0: case 'n':
        if (precision < 0) {
          body = format_float(d);
        } else {
          std::snprintf(fmt, sizeof fmt, "%%.%dg", p == 0 ? 1 : p);
          body = c_format(fmt, d);
        }
        break;
      default: fail(ErrorKind::Value, std::string("Unknown format code '") + type + "' for object of type 'float'");
    }
  }
  if (comma) {  // thousands separators in the integer part
    const size_t end = std::min(body.find('.'), body.find_first_of("eE%"));
    const size_t int_end = end == std::string::npos ? body.size() : end;
    std::string grouped;
    for (size_t k2 = 0; k2 < int_end; ++k2) {
      if (k2 > 0 && (int_end - k2) % 3 == 0) grouped += sep_char;
      grouped += body[k2];
    }
    body = grouped + body.substr(int_end);
  }
  std::string sgn = negative ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
  if (align == '=') {
    const int64_t n = width - utf8_length(sgn) - utf8_length(body);
    std::string out = sgn;
    append_repeated(out, fill, n > 0 ? static_cast<uint64_t>(n) : 0);
    append_checked(out, body);
    return out;
  }
  return pad(sgn + body, width, align ? align : '>', fill);
}

// ---- "%" formatting --------------------------------------------------------------------------
std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> pos;
  const bool mapping = args.is_dict();
  if (args.kind == Kind::Tuple) pos = args.items();
  else if (!mapping) pos.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      const size_t lit = std::min(fmt.find('%', k), fmt.size());
      append_checked(out, std::string_view(fmt).substr(k, lit - k));
      k = lit - 1;
      continue;
    }
    if (++k >= fmt.size()) fail(ErrorKind::Value, "incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[k] == '(') {
      const size_t close = fmt.find(')', k);
      if (close == std::string::npos) fail(ErrorKind::Value, "incomplete format key");
      if (!mapping) fail(ErrorKind::Type, "format requires a mapping");
      const Value* v = args.dict_data().find(std::string_view(fmt).substr(k + 1, close - k - 1));
      if (!v) fail(ErrorKind::Type, "KeyError: " + fmt.substr(k + 1, close - k - 1));
      arg = *v;
      have_arg = used_mapping = true;
      k = close + 1;
    }
    std::string flags;
    while (k < fmt.size() && std::string_view("-+ #0").find(fmt[k]) != std::string_view::npos) flags += fmt[k++];
    auto take = [&]() -> Value {
      if (next >= pos.size()) fail(ErrorKind::Type, "not enough arguments for format string");
      return pos[next++];
    };
    auto number = [&](int64_t* out_n) {
      if (k < fmt.size() && fmt[k] == '*') {
        Value w = take();
        if (!w.is_int()) fail(ErrorKind::Type, "* wants int");
        *out_n = w.as_int();
        ++k;
        return;
      }
      while (k < fmt.size() && fmt[k] >= '0' && fmt[k] <= '9') {  // saturating: the size check follows
        *out_n = *out_n > (INT64_MAX - 9) / 10 ? INT64_MAX : *out_n * 10 + (fmt[k] - '0');
        ++k;
      }
    };
    int64_t width = 0, precision = -1;
    number(&width);
    if (k < fmt.size() && fmt[k] == '.') {
      ++k;
      precision = 0;
      number(&precision);
    }
    while (k < fmt.size() && (fmt[k] == 'h' || fmt[k] == 'l' || fmt[k] == 'L')) ++k;
    if (k >= fmt.size()) fail(ErrorKind::Value, "incomplete format");
    const char conv = fmt[k];
    if (conv == '%') {
      append_checked(out, "%");
      continue;
    }
    if (!have_arg) arg = mapping && !used_mapping && pos.empty() ? args : take();
    const bool left = flags.find('-') != std::string::npos;
    std::string body;
    switch (conv) {
      case 's': case 'r': case 'a':
        body = conv == 's' ? to_str(arg) : repr(arg);
        if (precision >= 0) body = utf8_encode(utf8_decode(body).substr(0, static_cast<size_t>(precision)));
        break;
      case 'c':
        if (arg.is_string()) body = arg.str();
        else body = utf8_encode(std::u32string(1, static_cast<char32_t>(arg.as_int())));
        break;
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
      case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
        if (!arg.is_number())
          fail(ErrorKind::Type, std::string("%") + conv + " format: a real number is required, not " + type_name(arg));
        std::string spec = "%" + flags;
        if (width > 0) spec += std::to_string(std::min<int64_t>(width, 256));
        if (precision >= 0) spec += "." + std::to_string(std::min<int64_t>(precision, 100));
        char buf[512];
        if (std::string_view("diuxXo").find(conv) != std::string_view::npos) {
          const long long iv = arg.kind == Kind::Float ? float_to_int(arg.f) : arg.as_int();
          spec += "ll";
          spec += conv == 'i' || conv == 'u' ? 'd' : conv;
          std::snprintf(buf, sizeof buf, spec.c_str(), iv);
        } else {
          spec += conv;
          std::snprintf(buf, sizeof buf, spec.c_str(), arg.as_double());
        }
        body = buf;
        break;
      }
      default: fail(ErrorKind::Value, std::string("unsupported format character '") + conv + "'");
    }
    // Python's '%*d' takes a negative width as left alignment.
    const bool left_aligned = left || width < 0;
    const uint64_t w = width < 0 ? (width == INT64_MIN ? UINT64_MAX : static_cast<uint64_t>(-width)) : static_cast<uint64_t>(width);
    const uint64_t len = static_cast<uint64_t>(utf8_length(body));
    const uint64_t pad_n = w > len ? w - len : 0;
    const bool zero_padded = flags.find('0') != std::string::npos && conv != 's' && conv != 'r';
    if (left_aligned) {
      append_checked(out, body);
      append_repeated(out, " ", pad_n);  // checked against the output limit before allocating
    } else {
      if (!zero_padded) append_repeated(out, " ", pad_n);
      append_checked(out, body);
    }
  }
  if (!mapping && next < pos.size()) fail(ErrorKind::Type, "not all arguments converted during string formatting");
  return out;
}

// ---- str.format ------------------------------------------------------------------------------
namespace {

// A replacement field's spec may hold replacement fields itself, one level deep as in Python
// ("Max string recursion exceeded" beyond).
std::string brace_format_at(Interpreter& in, const std::string& fmt, const CallArgs& args, int level, size_t& auto_index) {
  if (level > 2) fail(ErrorKind::Value, "Max string recursion exceeded");
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}') {
        append_checked(out, "}");
        ++k;
        continue;
      }
      fail(ErrorKind::Value, "Single '}' encountered in format string");
    }
    if (c != '{') {
      append_checked(out, std::string_view(&fmt[k], 1));
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      append_checked(out, "{");
      ++k;
      continue;
    }
    // {field[!conv][:spec]}; the spec may hold nested {fields} ("{:>{width}}")
    size_t close = k + 1;
    for (int depth = 1; close < fmt.size(); ++close) {
      if (fmt[close] == '{') ++depth;
      if (fmt[close] == '}' && --depth == 0) break;
    }
    if (close >= fmt.size()) fail(ErrorKind::Value, "expected '}' before end of string");
    std::string field = fmt.substr(k + 1, close - k - 1);
    k = close;
    std::string spec;
    char conv = 0;
    if (size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    size_t end = 0;
    while (end < field.size() && field[end] != '.' && field[end] != '[') ++end;
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty() || (head[0] >= '0' && head[0] <= '9')) {
      size_t idx = auto_index++;
      if (!head.empty()) {
        if (head.size() > 9 || head.find_first_not_of("0123456789") != std::string::npos) fail(ErrorKind::Value, "invalid format field '" + head + "'");
        idx = static_cast<size_t>(std::stoul(head));
      }
      if (idx >= args.pos.size()) fail(ErrorKind::Value, "Replacement index " + std::to_string(idx) + " out of range for positional args tuple");
      v = args.pos[idx];
    } else {
      bool found = false;
      for (const auto& [key, val] : args.kw)
        if (key == head) v = val, found = true;
      if (!found) fail(ErrorKind::Value, "KeyError: '" + head + "'");
    }
    while (end < field.size()) {  // .attr and [key] accessors
      if (field[end] == '.') {
        size_t e = end + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[') ++e;
        v = in.getattr(v, field.substr(end + 1, e - end - 1));
        end = e;
      } else {
        const size_t e = field.find(']', end);
        if (e == std::string::npos) fail(ErrorKind::Value, "Missing ']' in format string");
        const std::string key = field.substr(end + 1, e - end - 1);
        bool digits = !key.empty() && key.size() < 18;
        for (char d : key) digits = digits && d >= '0' && d <= '9';
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        end = e + 1;
      }
    }
    if (v.is_undefined()) fail_undefined(v);
    // Fields nested in the spec number on after this one ("{:^{}}".format(s, width)).
    if (spec.find('{') != std::string::npos) spec = brace_format_at(in, spec, args, level + 1, auto_index);
    if (conv == 'r' || conv == 'a') v = Value::string(repr(v));
    else if (conv == 's') v = Value::string(to_str(v));
    append_checked(out, format_spec(v, spec));  // format_spec checks its own width first
  }
  return out;
}

}  // namespace

std::string brace_format(Interpreter& in, const std::string& fmt, const CallArgs& args) {
  size_t auto_index = 0;
  return brace_format_at(in, fmt, args, 1, auto_index);
}

}  // namespace kestrel::jinja
