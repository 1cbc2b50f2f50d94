// The global functions a Hugging Face chat template sees: Jinja2's range (sandbox-limited),
// dict, namespace, cycler and joiner, plus HF's raise_exception and strftime_now.
#include <cstdio>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja2's sandbox MAX_RANGE

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.kw.empty()) fail(ErrorKind::Type, "range() takes no keyword arguments");
  if (a.pos.empty() || a.pos.size() > 3) fail(ErrorKind::Type, "range expected at most 3 arguments, got " + std::to_string(a.pos.size()));
  for (const Value& v : a.pos)
    if (!v.is_int()) fail(ErrorKind::Type, std::string("'") + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (a.pos.size() == 1) {
    stop = a.pos[0].as_int();
  } else {
    start = a.pos[0].as_int();
    stop = a.pos[1].as_int();
    if (a.pos.size() == 3) step = a.pos[2].as_int();
  }
  if (step == 0) fail(ErrorKind::Value, "range() arg 3 must not be zero");
  // Count without overflow: ceil((stop - start) / step) when positive.
  const __int128 span = static_cast<__int128>(stop) - start;
  __int128 count = 0;
  if ((step > 0 && span > 0) || (step < 0 && span < 0)) count = (span + (step > 0 ? step - 1 : step + 1)) / step;
  if (count > kMaxRange)
    fail(ErrorKind::Value, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  in.tick(static_cast<uint64_t>(count));  // building the items is work too
  std::vector<Value> out;
  for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) out.push_back(Value::integer(start + k * step));
  return Value::iterator("range", std::move(out), false, true);
}

Value g_dict(Interpreter&, CallArgs& a) {
  Value d = Value::dict();
  if (a.pos.size() > 1) fail(ErrorKind::Type, "dict expected at most 1 argument");
  if (!a.pos.empty()) {
    const Value& src = a.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict_data().items()) d.dict_data().set(k, v);
    } else {
      for (const Value& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) fail(ErrorKind::Value, "dictionary update sequence element has the wrong length");
        d.dict_data().set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kw) d.dict_data().set(Value::string(k), v);
  return d;
}

Value g_namespace(Interpreter& in, CallArgs& a) {
  Value init = g_dict(in, a);
  auto ns = std::make_shared<ObjectData>();
  ns->type_name = "Namespace";
  ns->assignable = true;
  for (const auto& [k, v] : init.dict_data().items()) ns->attrs.set(k, v);
  in.track_namespace(ns);
  return Value::object(std::move(ns));
}

Value g_cycler(Interpreter&, CallArgs& a) {
  if (a.pos.empty()) fail(ErrorKind::Runtime, "at least one item has to be provided");
  auto obj = std::make_shared<ObjectData>();
  obj->type_name = "Cycler";
  obj->depth = 1 + max_depth_of(a.pos);
  check_value_depth(obj->depth);
  auto items = std::make_shared<std::vector<Value>>(a.pos);
  auto pos = std::make_shared<size_t>(0);
  ObjectData* raw = obj.get();
  auto refresh = [raw, items, pos]() { raw->attrs.set(Value::string("current"), (*items)[*pos]); };
  refresh();
  Value next = Value::function("next", [items, pos, refresh](Interpreter&, CallArgs&) {
    Value v = (*items)[*pos];
    *pos = (*pos + 1) % items->size();
    refresh();
    return v;
  });
  Value reset = Value::function("reset", [pos, refresh](Interpreter&, CallArgs&) {
    *pos = 0;
    refresh();
    return Value::none();
  });
  next.fn_data().depth = reset.fn_data().depth = obj->depth;  // they hold the items too
  raw->attrs.set(Value::string("next"), next);
  raw->attrs.set(Value::string("reset"), reset);
  return Value::object(std::move(obj));
}

Value g_joiner(Interpreter&, CallArgs& a) {
  Params p("joiner", a, {"sep"});
  const std::string sep = p.get_str(0, ", ");
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  Params p("raise_exception", a, {"message"});
  fail(ErrorKind::Raised, p.get_str(0, ""));
}

// datetime.strftime in the C locale for the directives templates use.
std::string strftime_c(const std::tm& t, const std::string& fmt) {
  static const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  static const char* kMonths[] = {"January", "February", "March", "April", "May", "June", "July",
                                  "August", "September", "October", "November", "December"};
  std::string out;
  char buf[64];
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%' || k + 1 >= fmt.size()) {
      out += fmt[k];
      continue;
    }
    char c = fmt[++k];
    bool no_pad = false;
    if (c == '-' && k + 1 < fmt.size()) no_pad = true, c = fmt[++k];
    auto num = [&](int v, int width) {
      if (no_pad) std::snprintf(buf, sizeof buf, "%d", v);
      else std::snprintf(buf, sizeof buf, "%0*d", width, v);
      out += buf;
    };
    const int wday = ((t.tm_wday % 7) + 7) % 7, mon = ((t.tm_mon % 12) + 12) % 12;
    switch (c) {
      case 'Y': out += std::to_string(t.tm_year + 1900); break;
      case 'y': num((t.tm_year + 1900) % 100, 2); break;
      case 'm': num(t.tm_mon + 1, 2); break;
      case 'd': num(t.tm_mday, 2); break;
      case 'e': std::snprintf(buf, sizeof buf, "%2d", t.tm_mday), out += buf; break;
      case 'H': num(t.tm_hour, 2); break;
      case 'I': num(t.tm_hour % 12 == 0 ? 12 : t.tm_hour % 12, 2); break;
      case 'M': num(t.tm_min, 2); break;
      case 'S': num(t.tm_sec, 2); break;
      case 'f': out += "000000"; break;
      case 'j': num(t.tm_yday + 1, 3); break;
      case 'p': out += t.tm_hour < 12 ? "AM" : "PM"; break;
      case 'a': out += std::string(kDays[wday]).substr(0, 3); break;
      case 'A': out += kDays[wday]; break;
      case 'b': case 'h': out += std::string(kMonths[mon]).substr(0, 3); break;
      case 'B': out += kMonths[mon]; break;
      case 'w': out += std::to_string(wday); break;
      case 'u': out += std::to_string(wday == 0 ? 7 : wday); break;
      case 'z': case 'Z': break;  // naive datetime: empty
      case '%': out += '%'; break;
      case 'D': out += strftime_c(t, "%m/%d/%y"); break;
      case 'F': out += strftime_c(t, "%Y-%m-%d"); break;
      case 'T': out += strftime_c(t, "%H:%M:%S"); break;
      case 'R': out += strftime_c(t, "%H:%M"); break;
      case 'c': out += strftime_c(t, "%a %b %e %H:%M:%S %Y"); break;
      case 'x': out += strftime_c(t, "%m/%d/%y"); break;
      case 'X': out += strftime_c(t, "%H:%M:%S"); break;
      default: {
        const char f[3] = {'%', c, 0};
        const size_t n = std::strftime(buf, sizeof buf, f, &t);
        out.append(buf, n);
      }
    }
  }
  return out;
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  Params p("strftime_now", a, {"format"});
  return Value::string(strftime_c(in.now(), p.get_str(0, "")));
}

}  // namespace

void add_builtin_globals(DictData& g) {
  g.set(Value::string("range"), Value::function("range", g_range));
  g.set(Value::string("dict"), Value::function("dict", g_dict));
  g.set(Value::string("namespace"), Value::function("namespace", g_namespace));
  g.set(Value::string("cycler"), Value::function("cycler", g_cycler));
  g.set(Value::string("joiner"), Value::function("joiner", g_joiner));
  g.set(Value::string("raise_exception"), Value::function("raise_exception", g_raise_exception));
  g.set(Value::string("strftime_now"), Value::function("strftime_now", g_strftime_now));
}

}  // namespace kestrel::jinja
