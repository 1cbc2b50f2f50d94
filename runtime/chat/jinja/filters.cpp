// Jinja2's builtin filters with their Python behaviour, plus Hugging Face's tojson. Filters that
// return generators in Python (map, select, unique, items, ...) return single-pass iterators, so
// `|tojson` on them fails and `|list` materializes them, as in Python.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja/builtins.h"
#include "chat/jinja/parser.h"

namespace kestrel::jinja {
namespace {

// soft_str: strings (and Markup) unchanged, anything else through str().
Value soft_str(const Value& v) { return v.is_string() ? v : Value::string(to_str(v)); }

Value f_upper(Interpreter&, const Value& v, CallArgs& a) {
  Params p("upper", a, {});
  Value s = soft_str(v);
  return Value::string(str_upper(s.str()), s.safe);
}
Value f_lower(Interpreter&, const Value& v, CallArgs& a) {
  Params p("lower", a, {});
  Value s = soft_str(v);
  return Value::string(str_lower(s.str()), s.safe);
}
Value f_capitalize(Interpreter&, const Value& v, CallArgs& a) {
  Params p("capitalize", a, {});
  Value s = soft_str(v);
  std::u32string cps = utf8_decode(s.str());
  if (cps.empty()) return s;
  return Value::string(str_upper(utf8_encode(cps.substr(0, 1))) + str_lower(utf8_encode(cps.substr(1))), s.safe);
}
Value f_title(Interpreter&, const Value& v, CallArgs& a) {
  Params p("title", a, {});
  Value s = soft_str(v);
  // Words start after runs of "-", whitespace, "(", "{", "[", "<" (Jinja2's do_title).
  std::string out;
  bool at_start = true;
  for (uint32_t c : utf8_decode(s.str())) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    std::string ch;
    append_utf8(ch, c);
    out += sep ? ch : at_start ? str_upper(ch) : str_lower(ch);
    at_start = sep;
  }
  return Value::string(std::move(out), s.safe);
}
Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  Params p("trim", a, {"chars"});
  Value s = soft_str(v);
  return Value::string(py_strip(s.str(), p.get(0), true, true), s.safe);
}
Value f_string(Interpreter&, const Value& v, CallArgs& a) {
  Params p("string", a, {});
  return soft_str(v);
}
Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  Params p("safe", a, {});
  return Value::string(to_str(v), true);
}
Value f_escape(Interpreter&, const Value& v, CallArgs& a) {
  Params p("escape", a, {});
  if (v.is_string() && v.safe) return v;
  return Value::string(html_escape(to_str(v)), true);
}
Value f_forceescape(Interpreter&, const Value& v, CallArgs& a) {
  Params p("forceescape", a, {});
  return Value::string(html_escape(to_str(v)), true);
}
Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  Params p("length", a, {});
  return Value::integer(py_len(v));
}
Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  Params p("list", a, {});
  return Value::list(iterate(v));
}
Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  Params p("default", a, {"default_value", "boolean"});
  if (v.is_undefined() || (p.get_bool(1, false) && !truthy(v))) return p.get_or(0, Value::string(""));
  return v;
}
Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("join", a, {"d", "attribute"});
  const std::string sep = p.get_str(0, "");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    in.tick();
    if (!first) append_checked(out, sep);
    first = false;
    append_checked(out, to_str(p.has(1) ? attr_path(in, item, p.get(1)) : item));
  }
  return Value::string(std::move(out));
}
Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  Params p("items", a, {});
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) {  // Python raises when the generator is consumed, not here
    Value g = Value::generator({});
    g.iter_data().error = "Can only get item pairs from a mapping.";
    return g;
  }
  std::vector<Value> out;
  for (const auto& [k, val] : v.dict_data().items()) out.push_back(Value::tuple({k, val}));
  return Value::generator(std::move(out));
}
Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  Params p("first", a, {});
  if (v.is_seq()) return v.items().empty() ? Value::undefined("No first item, sequence was empty.") : v.items().front();
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  Params p("last", a, {});
  if (v.kind == Kind::Iterator && v.iter_data().single_pass)
    fail(ErrorKind::Type, "'" + v.iter_data().type_name + "' object is not reversible");
  if (v.is_seq()) return v.items().empty() ? Value::undefined("No last item, sequence was empty.") : v.items().back();
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}
Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  Params p("reverse", a, {});
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps), v.safe);
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.kind == Kind::Iterator && v.iter_data().single_pass) return Value::list(std::move(items));
  const char* name = v.kind == Kind::List ? "list_reverseiterator" : v.kind == Kind::Tuple ? "reversed"
                     : v.kind == Kind::Dict ? "dict_reversekeyiterator" : "reversed";
  return Value::iterator(name, std::move(items), true, false);
}
Value f_tojson(Interpreter&, const Value& v, CallArgs& a) {
  // Hugging Face: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.get_bool(0, false);
  const Value& indent = p.get(1);
  if (p.has(1) && !indent.is_none()) {
    o.indent_set = true;
    o.indent = indent.is_string() ? indent.str() : std::string(static_cast<size_t>(std::clamp<int64_t>(p.get_int(1, 0), 0, 64)), ' ');
    o.item_sep = ",";
  }
  const Value& seps = p.get(2);
  if (p.has(2) && !seps.is_none()) {
    std::vector<Value> parts = iterate(seps);
    if (parts.size() != 2) fail(ErrorKind::Value, "separators must be a (item_separator, key_separator) pair");
    o.item_sep = to_str(parts[0]);
    o.key_sep = to_str(parts[1]);
  }
  o.sort_keys = p.get_bool(3, false);
  return Value::string(to_json(v, o));
}
Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("indent", a, {"width", "first", "blank"});
  Value s = soft_str(v);
  const Value& w = p.get(0);
  std::string ind;
  if (w.is_string()) ind = w.str();
  else append_repeated(ind, " ", static_cast<uint64_t>(std::max<int64_t>(p.get_int(0, 4), 0)));  // checked first
  std::vector<std::string> lines = py_splitlines(s.str() + "\n");
  const bool blank = p.get_bool(2, false);
  std::string out;
  if (p.get_bool(1, false)) append_checked(out, ind);
  for (size_t k = 0; k < lines.size(); ++k) {
    in.tick();
    if (k) {
      append_checked(out, "\n");
      if (blank || !lines[k].empty()) append_checked(out, ind);
    }
    append_checked(out, lines[k]);
  }
  return Value::string(std::move(out), s.safe);
}
Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("replace", a, {"old", "new", "count"});
  const std::string s = to_str(v);
  return Value::string(py_replace(s, p.get_str(0, ""), p.get_str(1, ""), p.has(2) && !p.get(2).is_none() ? p.get_int(2, -1) : -1));
}
Value f_center(Interpreter&, const Value& v, CallArgs& a) {
  Params p("center", a, {"width"});
  Value s = soft_str(v);
  const int64_t width = p.get_int(0, 80), len = utf8_length(s.str());
  if (width <= len) return s;
  // Python's str.center puts the odd extra space on the right when the padding is odd and the
  // length is even, on the left otherwise.
  const int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
  if (sat_add(s.str().size(), static_cast<uint64_t>(marg)) > output_cap()) fail_output_limit();  // before allocating
  std::string out(static_cast<size_t>(left), ' ');
  out += s.str();
  out.append(static_cast<size_t>(marg - left), ' ');
  return Value::string(std::move(out), s.safe);
}
Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  Params p("truncate", a, {"length", "killwords", "end", "leeway"});
  const std::u32string s = utf8_decode(to_str(v));
  const int64_t length = p.get_int(0, 255), leeway = p.has(3) && !p.get(3).is_none() ? p.get_int(3, 5) : 5;
  const std::u32string end = utf8_decode(p.get_str(2, "..."));
  if (length < static_cast<int64_t>(end.size())) fail(ErrorKind::Value, "expected length >= " + std::to_string(end.size()));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::string(utf8_encode(s));
  std::u32string head = s.substr(0, static_cast<size_t>(length - static_cast<int64_t>(end.size())));
  if (!p.get_bool(1, false)) {
    const size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head.resize(sp);
  }
  return Value::string(utf8_encode(head + end));
}
Value f_wordcount(Interpreter&, const Value& v, CallArgs& a) {
  Params p("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (uint32_t c : utf8_decode(to_str(v))) {
    const bool w = c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= 0xAA && !py_isspace(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}
Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  Params p("int", a, {"default", "base"});
  const Value dflt = p.get_or(0, Value::integer(0));
  if (v.is_int()) return Value::integer(v.as_int());
  if (v.kind == Kind::Float) return std::isfinite(v.f) && std::fabs(v.f) < 9.2e18 ? Value::integer(static_cast<int64_t>(v.f)) : dflt;
  if (!v.is_string()) return dflt;
  std::string s;
  for (char c : py_strip(v.str(), Value::none(), true, true))
    if (c != '_') s += c;
  const int base = static_cast<int>(p.get_int(1, 10));
  if (!s.empty()) {
    errno = 0;
    char* end = nullptr;
    const long long r = std::strtoll(s.c_str(), &end, base);
    if (errno == 0 && end && *end == 0) return Value::integer(r);
    const double d = std::strtod(s.c_str(), &end);  // "42.23"|int is 42
    if (end && *end == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
  }
  return dflt;
}
Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  Params p("float", a, {"default"});
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), Value::none(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == 0) return Value::number(d);
  }
  return p.get_or(0, Value::number(0.0));
}
Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  Params p("abs", a, {});
  if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
  if (v.is_int()) return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  fail(ErrorKind::Type, std::string("bad operand type for abs(): '") + type_name(v) + "'");
}
Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  Params p("round", a, {"precision", "method"});
  const int64_t prec = std::clamp<int64_t>(p.get_int(0, 0), -300, 300);
  const std::string method = p.get_str(1, "common");
  if (method != "common" && method != "ceil" && method != "floor") fail(ErrorKind::Value, "method must be common, ceil or floor");
  if (!v.is_number()) fail(ErrorKind::Type, std::string("type ") + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() && prec >= 0) return Value::integer(v.as_int());
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::max<int64_t>(prec, 0)), v.as_double());
    double r = std::strtod(buf, nullptr);
    if (prec < 0) r = std::nearbyint(v.as_double() / std::pow(10.0, -prec)) * std::pow(10.0, -prec);
    return v.is_int() ? Value::integer(float_to_int(r)) : Value::number(r);
  }
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}
Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("attr", a, {"name"});
  const std::string name = p.get_str(0, "");
  if (v.is_dict()) {  // only real attributes (methods), never keys
    Value m;
    return find_method(v, name, &m) ? m : Value::undefined_attr(v, name);
  }
  return in.getattr(v, name);
}

// ---- sorting and aggregation -------------------------------------------------------------------
// The sort key of `item` for sort/min/max/unique: attribute path(s), case folding.
Value sort_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
  auto fold = [&](Value x) { return case_sensitive ? x : fold_case(x); };
  if (!attribute.is_string() || attribute.str().find(',') == std::string::npos) return fold(attr_path(in, item, attribute));
  std::vector<Value> keys;
  size_t start = 0;
  while (true) {
    const size_t comma = attribute.str().find(',', start);
    keys.push_back(fold(attr_path(in, item, Value::string(attribute.str().substr(start, comma - start)))));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return Value::list(std::move(keys));
}

void sort_values(std::vector<Value>& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return reverse ? py_compare(keys[y], keys[x], "<") < 0 : py_compare(keys[x], keys[y], "<") < 0;
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t k : order) sorted.push_back(std::move(items[k]));
  items = std::move(sorted);
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) keys.push_back(sort_key(in, item, p.get(2), p.get_bool(1, false)));
  sort_values(items, keys, p.get_bool(0, false));
  return Value::list(std::move(items));
}
Value f_dictsort(Interpreter&, const Value& v, CallArgs& a) {
  Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) fail(ErrorKind::Type, std::string("'") + type_name(v) + "' object has no attribute 'items'");
  const std::string by = p.get_str(1, "key");
  if (by != "key" && by != "value") fail(ErrorKind::Runtime, "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.dict_data().items()) {
    items.push_back(Value::tuple({k, val}));
    const Value& key = by == "key" ? k : val;
    keys.push_back(p.get_bool(0, false) ? key : fold_case(key));
  }
  sort_values(items, keys, p.get_bool(2, false));
  return Value::list(std::move(items));
}
Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("unique", a, {"case_sensitive", "attribute"});
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(in, item, p.get(1), p.get_bool(0, false));
    if (key.kind == Kind::List || key.kind == Kind::Dict) fail(ErrorKind::Type, std::string("unhashable type: '") + type_name(key) + "'");
    in.tick(1 + seen.size());  // compared with every key seen so far
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::generator(std::move(out));
}
Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool is_max) {
  Params p(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(in, items[0], p.get(1), p.get_bool(0, false));
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = sort_key(in, items[k], p.get(1), p.get_bool(0, false));
    const int c = py_compare(key, best_key, is_max ? ">" : "<");
    if (is_max ? c > 0 : c < 0) best = k, best_key = key;
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }
Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("sum", a, {"attribute", "start"});
  Value total = p.get_or(1, Value::integer(0));
  for (const Value& item : iterate(v)) total = binary_op(in, "+", total, p.has(0) ? attr_path(in, item, p.get(0)) : item);
  return total;
}
Value f_groupby(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("groupby", a, {"attribute", "default", "case_sensitive"});
  const bool cs = p.get_bool(2, false);
  auto key_of = [&](const Value& item, bool fold) {
    Value k = attr_path(in, item, p.get(0));
    if (k.is_undefined() && p.has(1) && !p.get(1).is_none()) k = p.get(1);
    return fold && !cs ? fold_case(k) : k;
  };
  std::vector<Value> items = iterate(v), keys;
  for (const Value& item : items) keys.push_back(key_of(item, true));
  sort_values(items, keys, false);
  std::vector<Value> groups;
  for (size_t k = 0; k < items.size();) {
    const Value key = key_of(items[k], true);
    std::vector<Value> members;
    size_t j = k;
    while (j < items.size() && py_equal(key_of(items[j], true), key)) members.push_back(items[j++]);
    groups.push_back(Value::tuple({key_of(items[k], false), Value::list(std::move(members))}));
    k = j;
  }
  return Value::list(std::move(groups));
}
Value f_batch(Interpreter&, const Value& v, CallArgs& a) {
  Params p("batch", a, {"linecount", "fill_with"});
  const int64_t n = p.get_int(0, 1);
  if (n <= 0) fail(ErrorKind::Value, "batch size must be positive");
  if (p.has(1) && !p.get(1).is_none()) check_alloc(sat_mul(static_cast<uint64_t>(n), sizeof(Value)));  // the filled last batch
  std::vector<Value> out, cur;
  for (const Value& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (p.has(1) && !p.get(1).is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::generator(std::move(out));
}
Value f_slice(Interpreter& in, const Value& v, CallArgs& a) {
  Params p("slice", a, {"slices", "fill_with"});
  const int64_t slices = p.get_int(0, 1);
  if (slices <= 0 || slices > 100000) fail(ErrorKind::Value, "slices must be positive");
  std::vector<Value> seq = iterate(v), out;
  in.tick(static_cast<uint64_t>(slices));
  const int64_t len = static_cast<int64_t>(seq.size()), per = len / slices, extra = len % slices;
  int64_t offset = 0;
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t start = offset + s * per;
    if (s < extra) ++offset;
    const int64_t end = offset + (s + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (p.has(1) && !p.get(1).is_none() && s >= extra) part.push_back(p.get(1));
    out.push_back(Value::list(std::move(part)));
  }
  return Value::generator(std::move(out));
}

// ---- map / select / reject ---------------------------------------------------------------------
Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::generator({});
  const Value* attribute = nullptr;
  Value dflt;
  for (const auto& [k, val] : a.kw) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") dflt = val;
  }
  if (a.pos.empty() && attribute) {
    for (const Value& item : iterate(v)) {
      Value r = attr_path(in, item, *attribute);
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return Value::generator(std::move(out));
  }
  if (a.pos.empty()) fail(ErrorKind::Runtime, "map requires a filter argument");
  const std::string name = to_str(a.pos[0]);
  for (const Value& item : iterate(v)) {
    CallArgs rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
    out.push_back(in.call_filter(name, item, rest));
  }
  return Value::generator(std::move(out));
}

Value select_or_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool by_attr) {
  if (!truthy(v)) return Value::generator({});
  size_t off = 0;
  Value attribute;
  if (by_attr) {
    if (a.pos.empty()) fail(ErrorKind::Runtime, "Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attr ? attr_path(in, item, attribute) : item;
    bool ok;
    if (a.pos.size() > off) {
      CallArgs rest{std::vector<Value>(a.pos.begin() + static_cast<long>(off) + 1, a.pos.end()), a.kw};
      ok = in.call_test(to_str(a.pos[off]), subject, rest);
    } else {
      ok = truthy(subject);
    }
    if (ok == select) out.push_back(item);
  }
  return Value::generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }

// ---- formatting ----------------------------------------------------------------------------------
Value f_format(Interpreter&, const Value& v, CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty()) fail(ErrorKind::Runtime, "can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    args = Value::dict();
    for (const auto& [k, val] : a.kw) args.dict_data().set(Value::string(k), val);
  } else {
    args = Value::tuple(a.pos);
  }
  Value s = soft_str(v);
  return Value::string(percent_format(s.str(), args), s.safe);
}
Value f_pprint(Interpreter&, const Value& v, CallArgs& a) {
  Params p("pprint", a, {});
  return Value::string(repr(v));
}
Value f_filesizeformat(Interpreter&, const Value& v, CallArgs& a) {
  Params p("filesizeformat", a, {"binary"});
  const bool binary = p.get_bool(0, false);
  const double bytes = v.is_number() ? v.as_double() : std::strtod(to_str(v).c_str(), nullptr);
  const double base = binary ? 1024 : 1000;
  static const char* kDec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* kBin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value::string("1 Byte");
  if (bytes < base) return Value::string(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
  char buf[64];
  for (int k = 0; k < 8; ++k) {
    const double unit = std::pow(base, k + 2);
    if (bytes < unit || k == 7) {
      std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, binary ? kBin[k] : kDec[k]);
      break;
    }
  }
  return Value::string(buf);
}
Value f_striptags(Interpreter&, const Value& v, CallArgs& a) {
  Params p("striptags", a, {});
  std::string s = to_str(v), out;
  bool in_tag = false;
  for (char c : s) {
    if (c == '<') in_tag = true;
    else if (c == '>' && in_tag) in_tag = false;
    else if (!in_tag) out += c;
  }
  std::string collapsed;  // runs of whitespace become one space
  for (uint32_t c : utf8_decode(out)) {
    if (py_isspace(c)) {
      if (!collapsed.empty() && collapsed.back() != ' ') collapsed += ' ';
    } else {
      append_utf8(collapsed, c);
    }
  }
  if (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
  return Value::string(py_replace(py_replace(py_replace(py_replace(collapsed, "&lt;", "<", -1), "&gt;", ">", -1), "&#34;", "\"", -1), "&amp;", "&", -1));
}
std::string url_quote(const std::string& s, bool for_query) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_query && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_query && c == ' ') {
      out += '+';
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}
Value f_urlencode(Interpreter&, const Value& v, CallArgs& a) {
  Params p("urlencode", a, {});
  if (v.is_string()) return Value::string(url_quote(v.str(), false));
  std::vector<Value> pairs;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.dict_data().items()) pairs.push_back(Value::tuple({k, val}));
  } else {
    pairs = iterate(v);
  }
  std::string out;
  for (const Value& pr : pairs) {
    std::vector<Value> kv = iterate(pr);
    if (kv.size() != 2) continue;
    out += (out.empty() ? "" : "&") + url_quote(to_str(kv[0]), true) + "=" + url_quote(to_str(kv[1]), true);
  }
  return Value::string(out);
}
Value f_xmlattr(Interpreter&, const Value& v, CallArgs& a) {
  Params p("xmlattr", a, {"autospace"});
  if (!v.is_dict()) fail(ErrorKind::Type, "xmlattr needs a mapping");
  std::string out;
  for (const auto& [k, val] : v.dict_data().items()) {
    if (val.is_none() || val.is_undefined()) continue;
    const std::string key = to_str(k);
    for (char c : key)
      if (is_ascii(std::string(1, c)) && (c == ' ' || c == '/' || c == '>' || c == '=' || (c >= '\t' && c <= '\r')))
        fail(ErrorKind::Value, "Invalid character in attribute name: " + py_str_repr(key));
    out += (out.empty() ? "" : " ") + html_escape(key) + "=\"" + html_escape(to_str(val)) + "\"";
  }
  if (!out.empty() && p.get_bool(0, true)) out = " " + out;
  return Value::string(out, true);
}
Value f_wordwrap(Interpreter& in, const Value& v, CallArgs& a) {
  // Greedy wrapping at spaces per paragraph (Python's textwrap without hyphen splitting).
  Params p("wordwrap", a, {"width", "break_long_words", "wrapstring", "break_on_hyphens"});
  const int64_t width = std::max<int64_t>(1, p.get_int(0, 79));
  const bool break_long = p.get_bool(1, true);
  const std::string wrap = p.has(2) && !p.get(2).is_none() ? to_str(p.get(2)) : "\n";
  std::string out;
  bool first_para = true;
  for (const std::string& para : py_splitlines(to_str(v))) {
    in.tick();
    if (!first_para) append_checked(out, wrap);
    first_para = false;
    // Lines go straight to `out` (a wrapstring per line break, checked as it grows).
    bool first_line = true;
    auto emit = [&](std::u32string_view line) {
      in.tick();
      if (!first_line) append_checked(out, wrap);
      first_line = false;
      append_checked(out, utf8_encode(line));
    };
    std::u32string line;
    const std::u32string text = utf8_decode(para);
    size_t k = 0;
    while (k < text.size()) {
      size_t e = text.find(U' ', k);
      if (e == std::u32string::npos) e = text.size();
      std::u32string_view word = std::u32string_view(text).substr(k, e - k);
      k = e + 1;
      if (word.empty()) continue;
      while (break_long && static_cast<int64_t>(word.size()) > width) {
        if (!line.empty()) emit(line), line.clear();
        emit(word.substr(0, static_cast<size_t>(width)));
        word = word.substr(static_cast<size_t>(width));
      }
      if (word.empty()) continue;
      if (!line.empty() && static_cast<int64_t>(line.size() + 1 + word.size()) > width) emit(line), line.clear();
      if (!line.empty()) line += U' ';
      line += word;
    }
    if (!line.empty()) emit(line);
  }
  return Value::string(out);
}

struct Entry {
  const char* name;
  FilterFn fn;
};
const Entry kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"filesizeformat", f_filesizeformat}, {"first", f_first}, {"float", f_float},
    {"forceescape", f_forceescape}, {"format", f_format}, {"groupby", f_groupby}, {"indent", f_indent},
    {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min}, {"pprint", f_pprint},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr},
    {"slice", f_slice}, {"sort", f_sort}, {"string", f_string}, {"striptags", f_striptags}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate}, {"unique", f_unique},
    {"upper", f_upper}, {"urlencode", f_urlencode}, {"wordcount", f_wordcount}, {"wordwrap", f_wordwrap},
    {"xmlattr", f_xmlattr},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const Entry& e : kFilters)
    if (name == e.name) return e.fn;
  return nullptr;
}

bool is_known_filter(std::string_view name) { return find_filter(name) != nullptr; }

}  // namespace kestrel::jinja
