// Python methods of str, dict, list and tuple as templates call them (`s.split(',')`,
// `d.get('k')`, `d.items()`). The sandbox is immutable: mutating methods (list.append, dict.pop,
// ...) resolve to an undefined value whose use raises SecurityError, as in Jinja2's
// ImmutableSandboxedEnvironment.
#include <algorithm>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {
namespace {

const char* const kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix",
    "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"};
const char* const kDictMethods[] = {"copy", "get", "items", "keys", "values"};
const char* const kDictMutating[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kListMethods[] = {"copy", "count", "index"};
const char* const kListMutating[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <size_t N>
bool contains(const char* const (&names)[N], std::string_view name) {
  return std::find_if(std::begin(names), std::end(names), [&](const char* n) { return name == n; }) != std::end(names);
}

// Code point index <-> byte offset for the find/index family.
int64_t cp_index(const std::string& s, size_t byte_pos) { return utf8_length(std::string_view(s).substr(0, byte_pos)); }
size_t byte_offset(const std::string& s, int64_t cp) {
  size_t k = 0;
  for (int64_t n = 0; k < s.size() && n < cp; ++n) {
    ++k;
    while (k < s.size() && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) ++k;
  }
  return k;
}
// Python's start/end arguments (negative from the end, clamped) as byte offsets.
void bounds(const std::string& s, const Params& p, size_t first, size_t* b, size_t* e) {
  const int64_t len = utf8_length(s);
  auto norm = [&](size_t k, int64_t dflt) {
    int64_t v = p.has(k) && !p.get(k).is_none() ? p.get_int(k, dflt) : dflt;
    if (v < 0) v = std::max<int64_t>(v + len, 0);
    return byte_offset(s, std::min(v, len));
  };
  *b = norm(first, 0);
  *e = norm(first + 1, len);
}

std::vector<Value> split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    const std::u32string cps = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) code point ranges
    for (size_t k = 0; k < cps.size();) {
      while (k < cps.size() && py_isspace(cps[k])) ++k;
      if (k == cps.size()) break;
      size_t e = k;
      while (e < cps.size() && !py_isspace(cps[e])) ++e;
      words.emplace_back(k, e);
      k = e;
    }
    const size_t n = words.size();
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= n) {
      for (auto [b, e] : words) parts.push_back(utf8_encode(std::u32string_view(cps).substr(b, e - b)));
    } else if (!from_right) {
      for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k)
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
      parts.push_back(utf8_encode(std::u32string_view(cps).substr(words[static_cast<size_t>(maxsplit)].first)));
    } else {
      const size_t keep = n - static_cast<size_t>(maxsplit);
      parts.push_back(utf8_encode(std::u32string_view(cps).substr(0, words[keep - 1].second)));
      for (size_t k = keep; k < n; ++k)
        parts.push_back(utf8_encode(std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
    }
  } else {
    if (!sep.is_string()) fail(ErrorKind::Type, std::string("must be str or None, not ") + type_name(sep));
    if (sep.str().empty()) fail(ErrorKind::Value, "empty separator");
    std::vector<size_t> hits;
    for (size_t pos = s.find(sep.str()); pos != std::string::npos; pos = s.find(sep.str(), pos + sep.str().size())) hits.push_back(pos);
    if (maxsplit >= 0 && hits.size() > static_cast<size_t>(maxsplit)) {
      if (from_right) {
        // rsplit matches from the right; recompute non-overlapping hits from the end
        hits.clear();
        for (size_t end = s.size(); hits.size() < static_cast<size_t>(maxsplit);) {
          if (end < sep.str().size()) break;
          const size_t pos = s.rfind(sep.str(), end - sep.str().size());
          if (pos == std::string::npos) break;
          hits.insert(hits.begin(), pos);
          end = pos;
        }
      } else {
        hits.resize(static_cast<size_t>(maxsplit));
      }
    }
    size_t start = 0;
    for (size_t h : hits) {
      parts.push_back(s.substr(start, h - start));
      start = h + sep.str().size();
    }
    parts.push_back(s.substr(start));
  }
  std::vector<Value> out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

bool affix(const std::string& s, const Params& p, bool prefix) {
  size_t b, e;
  bounds(s, p, 1, &b, &e);
  const std::string_view view = b <= e ? std::string_view(s).substr(b, e - b) : std::string_view();
  std::vector<Value> candidates = p.get(0).kind == Kind::Tuple ? p.get(0).items() : std::vector<Value>{p.get(0)};
  for (const Value& c : candidates) {
    if (!c.is_string()) fail(ErrorKind::Type, std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(c));
    if (c.str().size() <= view.size() && (prefix ? view.substr(0, c.str().size()) : view.substr(view.size() - c.str().size())) == c.str()) return true;
  }
  return false;
}

template <class Pred>
bool all_chars(const std::string& s, Pred pred) {
  const std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}
bool is_alpha(char32_t c) { return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= 0xC0 && !py_isspace(c) && c != 0xD7 && c != 0xF7); }
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

Value pad_to(const Value& self, const Params& p, const char* name, char how) {
  const int64_t width = p.get_int(0, 0), len = utf8_length(self.str());
  const std::string fill = p.has(1) ? to_str(p.get(1)) : " ";
  if (!p.get(1).is_undefined() && (!p.get(1).is_string() || utf8_length(fill) != 1))
    fail(ErrorKind::Type, std::string(name) + "() argument 2 must be a string of length 1");
  if (width <= len) return self;
  const uint64_t n = static_cast<uint64_t>(width - len);
  const uint64_t left = how == 'l' ? 0 : how == 'r' ? n : n / 2 + (n & static_cast<uint64_t>(width) & 1);
  std::string out;
  append_repeated(out, fill, left);  // each checks the size before allocating
  append_checked(out, self.str());
  append_repeated(out, fill, n - left);
  return Value::string(std::move(out), self.safe);
}

Value call_str(Interpreter& in, const Value& self, const std::string& name, CallArgs& a) {
  const std::string& s = self.str();
  count_text_work(s.size());  // every method walks the string (at least once)
  auto str = [&](std::string x) { return Value::string(std::move(x), self.safe); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(name.c_str(), a, {"chars"});
    return str(py_strip(s, p.get(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Params p(name.c_str(), a, {"sep", "maxsplit"});
    return Value::list(split(s, p.get(0), p.get_int(1, -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    Params p("splitlines", a, {"keepends"});
    std::vector<Value> out;
    for (auto& line : py_splitlines(s, p.get_bool(0, false))) out.push_back(Value::string(std::move(line)));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(name.c_str(), a, {"prefix", "start", "end"});
    return Value::boolean(affix(s, p, name == "startswith"));
  }
  if (name == "replace") {
    Params p("replace", a, {"old", "new", "count"});
    if (!p.get(0).is_string() || !p.get(1).is_string()) fail(ErrorKind::Type, "replace() arguments must be str");
    return str(py_replace(s, p.get(0).str(), p.get(1).str(), p.get_int(2, -1)));  // checked as it grows
  }
  if (name == "lower" || name == "casefold") return Params(name.c_str(), a, {}), str(str_lower(s));
  if (name == "upper") return Params("upper", a, {}), str(str_upper(s));
  if (name == "capitalize" || name == "title" || name == "swapcase") {
    Params p(name.c_str(), a, {});
    std::string out;
    bool prev_cased = false;
    const std::u32string cps = utf8_decode(s);
    for (size_t k = 0; k < cps.size(); ++k) {
      std::string ch = utf8_encode(cps.substr(k, 1));
      const std::string lo = str_lower(ch), up = str_upper(ch);
      const bool cased = lo != up;
      if (name == "capitalize") out += k == 0 ? up : lo;
      else if (name == "title") out += cased ? (prev_cased ? lo : up) : ch;
      else out += ch == up ? lo : up;
      prev_cased = cased;
    }
    return str(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(name.c_str(), a, {"sub", "start", "end"});
    if (!p.get(0).is_string()) fail(ErrorKind::Type, "must be str, not " + std::string(type_name(p.get(0))));
    const std::string& sub = p.get(0).str();
    size_t b, e;
    bounds(s, p, 1, &b, &e);
    if (b > e || sub.size() > e - b) {
      if (name == "count") return Value::integer(b <= e && sub.empty() ? 1 : 0);
      if (name[0] == 'i' || name[1] == 'i') fail(ErrorKind::Value, "substring not found");
      return Value::integer(-1);
    }
    const std::string_view view = std::string_view(s).substr(b, e - b);
    if (name == "count") {
      if (sub.empty()) return Value::integer(utf8_length(view) + 1);
      int64_t n = 0;
      for (size_t pos = view.find(sub); pos != std::string_view::npos; pos = view.find(sub, pos + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t hit = name[0] == 'r' ? view.rfind(sub) : view.find(sub);
    if (hit == std::string_view::npos) {
      if (name.find("index") != std::string::npos) fail(ErrorKind::Value, "substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, b + hit));
  }
  if (name == "join") {
    Params p("join", a, {"iterable"});
    std::string out;
    size_t k = 0;
    for (const Value& item : iterate(p.get(0))) {
      if (!item.is_string())
        fail(ErrorKind::Type, "sequence item " + std::to_string(k) + ": expected str instance, " + type_name(item) + " found");
      in.tick();
      if (k++) append_checked(out, s);  // checked as it grows: n items times a long separator
      append_checked(out, item.str());
    }
    return str(std::move(out));
  }
  if (name == "format") return str(brace_format(in, s, a));
  if (name == "format_map") {
    Params p("format_map", a, {"mapping"});
    if (!p.get(0).is_dict()) fail(ErrorKind::Type, "format_map() argument must be a mapping");
    CallArgs kw;
    for (const auto& [k, v] : p.get(0).dict_data().items()) kw.kw.emplace_back(to_str(k), v);
    return str(brace_format(in, s, kw));
  }
  if (name == "partition" || name == "rpartition") {
    Params p(name.c_str(), a, {"sep"});
    const std::string sep = p.get_str(0, "");
    if (sep.empty()) fail(ErrorKind::Value, "empty separator");
    const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos)
      return name == "partition" ? Value::tuple({str(s), str(""), str("")}) : Value::tuple({str(""), str(""), str(s)});
    return Value::tuple({str(s.substr(0, hit)), str(sep), str(s.substr(hit + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(name.c_str(), a, {"affix"});
    const std::string x = p.get_str(0, "");
    if (name == "removeprefix") return str(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    return str(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    Params p(name.c_str(), a, {"width", "fillchar"});
    return pad_to(self, p, name.c_str(), name == "ljust" ? 'l' : name == "rjust" ? 'r' : 'c');
  }
  if (name == "zfill") {
    Params p("zfill", a, {"width"});
    const int64_t width = p.get_int(0, 0), len = utf8_length(s);
    if (width <= len) return self;
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    std::string out = s.substr(0, sign);
    append_repeated(out, "0", static_cast<uint64_t>(width - len));  // checked before allocating
    append_checked(out, std::string_view(s).substr(sign));
    return str(std::move(out));
  }
  if (name == "expandtabs") {
    Params p("expandtabs", a, {"tabsize"});
    const int64_t tab = std::clamp<int64_t>(p.get_int(0, 8), 0, 1024);
    std::string out;
    int64_t col = 0;
    for (uint32_t c : utf8_decode(s)) {
      if (c == '\t') {
        const int64_t n = tab ? tab - col % tab : 0;
        append_repeated(out, " ", static_cast<uint64_t>(n));  // up to 1024 bytes per tab: checked
        col += n;
      } else {
        append_utf8(out, c);
        col = c == '\n' || c == '\r' ? 0 : col + 1;
      }
    }
    return str(std::move(out));
  }
  Params none(name.c_str(), a, {});
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_chars(s, is_digit));
  if (name == "isalpha") return Value::boolean(all_chars(s, is_alpha));
  if (name == "isalnum") return Value::boolean(all_chars(s, [](char32_t c) { return is_alpha(c) || is_digit(c); }));
  if (name == "isspace") return Value::boolean(all_chars(s, [](char32_t c) { return py_isspace(c); }));
  if (name == "isascii") return Value::boolean(is_ascii(s));
  if (name == "isidentifier")
    return Value::boolean(all_chars(s, [](char32_t c) { return is_alpha(c) || is_digit(c) || c == '_'; }) && !is_digit(utf8_decode(s)[0]));
  if (name == "islower" || name == "isupper") {
    const std::string lo = str_lower(s), up = str_upper(s);
    return Value::boolean(lo != up && (name == "islower" ? lo == s : up == s));
  }
  if (name == "istitle") {
    CallArgs none_args;
    return Value::boolean(str_lower(s) != str_upper(s) && call_str(in, self, "title", none_args).str() == s);
  }
  fail(ErrorKind::Runtime, "str." + name + "() is not supported");
}

Value call_dict(const Value& self, const std::string& name, CallArgs& a) {
  const DictData& d = self.dict_data();
  if (name == "get") {
    Params p("get", a, {"key", "default"});
    if (!p.has(0)) fail(ErrorKind::Type, "get expected at least 1 argument, got 0");
    const Value* v = d.find(p.get(0));
    return v ? *v : p.get_or(1, Value::none());
  }
  Params p(name.c_str(), a, {});
  std::vector<Value> out;
  for (const auto& [k, v] : d.items()) {
    if (name == "items") out.push_back(Value::tuple({k, v}));
    else out.push_back(name == "keys" ? k : v);
  }
  if (name == "copy") {
    Value copy = Value::dict();
    for (const auto& [k, v] : d.items()) copy.dict_data().set(k, v);
    return copy;
  }
  return Value::iterator("dict_" + name, std::move(out), false, true);
}

Value call_list(const Value& self, const std::string& name, CallArgs& a) {
  const auto& items = self.items();
  count_work(items.size());
  if (name == "copy") return Params("copy", a, {}), Value::list(items);
  Params p(name.c_str(), a, {"value", "start", "stop"});
  int64_t n = 0, first = -1;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!py_equal(items[k], p.get(0))) continue;
    ++n;
    if (first < 0 && static_cast<int64_t>(k) >= p.get_int(1, 0)) first = static_cast<int64_t>(k);
  }
  if (name == "count") return Value::integer(n);
  if (first < 0) fail(ErrorKind::Value, repr(p.get(0)) + " is not in " + type_name(self));
  return Value::integer(first);
}

// A bound method holds its object, one level deeper.
Value bound(const Value& obj, std::string name, NativeFn fn) {
  Value f = Value::function(std::move(name), std::move(fn));
  f.fn_data().depth = 1 + value_depth(obj);
  check_value_depth(f.fn_data().depth);
  return f;
}

}  // namespace

bool find_method(const Value& obj, std::string_view name, Value* out) {
  const char* type = type_name(obj);
  auto unsafe = [&]() {
    *out = Value::undefined("access to attribute '" + std::string(name) + "' of '" + type + "' object is unsafe.", true);
    return true;
  };
  std::string n(name);
  switch (obj.kind) {
    case Kind::String:
      if (!contains(kStrMethods, name)) return false;
      *out = bound(obj, n, [obj, n](Interpreter& in, CallArgs& a) { return call_str(in, obj, n, a); });
      return true;
    case Kind::Dict:
      if (contains(kDictMutating, name)) return unsafe();
      if (!contains(kDictMethods, name)) return false;
      *out = bound(obj, n, [obj, n](Interpreter&, CallArgs& a) { return call_dict(obj, n, a); });
      return true;
    case Kind::List: case Kind::Tuple:
      if (obj.kind == Kind::List && contains(kListMutating, name)) return unsafe();
      if (!contains(kListMethods, name) || (obj.kind == Kind::Tuple && name == "copy")) return false;
      *out = bound(obj, n, [obj, n](Interpreter&, CallArgs& a) { return call_list(obj, n, a); });
      return true;
    default: return false;
  }
}

}  // namespace kestrel::jinja
