// json.dumps with Python's exact output: ", " and ": " separators (or "," with indent), floats as
// float.__repr__, ensure_ascii off by default, keys in insertion order unless sort_keys.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {
namespace {

constexpr int kMaxDepth = 500;

void escape_string(std::string& out, std::string_view s, bool ensure_ascii) {
  const uint64_t cap = output_cap();  // up to 12 bytes per code point: checked per character
  count_text_work(s.size());
  out += '"';
  char buf[16];
  auto emit_u = [&](uint32_t c) {
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += buf;
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      if (out.size() > cap) fail_output_limit();
      const unsigned char c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) emit_u(c);
          else out += ch;
      }
    }
  } else {
    for (uint32_t c : utf8_decode(s)) {
      if (out.size() > cap) fail_output_limit();
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (c > 0x7e && c < 0x10000)) {
            emit_u(c);
          } else if (c >= 0x10000) {
            const uint32_t v = c - 0x10000;
            emit_u(0xD800 | (v >> 10));
            emit_u(0xDC00 | (v & 0x3FF));
          } else {
            out += static_cast<char>(c);
          }
      }
    }
  }
  out += '"';
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return format_float(d);
}

[[noreturn]] void not_serializable(const Value& v) {
  fail(ErrorKind::Type, std::string("Object of type ") + type_name(v) + " is not JSON serializable");
}

// A dict key as json.dumps converts it.
std::string key_string(const Value& k) {
  switch (k.kind) {
    case Kind::String: return k.str();
    case Kind::Int: return std::to_string(k.i);
    case Kind::Bool: return k.b ? "true" : "false";
    case Kind::Float: return float_json(k.f);
    case Kind::None: return "null";
    default: fail(ErrorKind::Type, std::string("keys must be str, int, float, bool or None, not ") + type_name(k));
  }
}

class Writer {
 public:
  explicit Writer(const JsonOptions& o) : o_(o) {}
  std::string out;

  void write(const Value& v, int depth) {
    if (depth > kMaxDepth) fail(ErrorKind::Value, "maximum recursion depth exceeded while encoding a JSON object");
    switch (v.kind) {
      case Kind::None: out += "null"; return;
      case Kind::Bool: out += v.b ? "true" : "false"; return;
      case Kind::Int: append_checked(out, std::to_string(v.i)); return;
      case Kind::Float: out += float_json(v.f); return;
      case Kind::String: escape_string(out, v.str(), o_.ensure_ascii); return;
      case Kind::List: case Kind::Tuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) append_checked(out, o_.item_sep);
          newline(depth + 1);
          write(items[k], depth + 1);
        }
        newline(depth);
        out += ']';
        return;
      }
      case Kind::Dict: {
        const auto& items = v.dict_data().items();
        if (items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<Value, Value>*> order;
        for (const auto& kv : items) order.push_back(&kv);
        if (o_.sort_keys)
          std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return py_compare(a->first, b->first, "<") < 0; });
        out += '{';
        bool first = true;
        for (const auto* kv : order) {
          if (!first) append_checked(out, o_.item_sep);
          first = false;
          newline(depth + 1);
          escape_string(out, key_string(kv->first), o_.ensure_ascii);
          append_checked(out, o_.key_sep);
          write(kv->second, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
      }
      default: not_serializable(v);
    }
  }

 private:
  const JsonOptions& o_;
  void newline(int depth) {
    if (!o_.indent_set) return;
    append_checked(out, "\n");
    append_repeated(out, o_.indent, static_cast<uint64_t>(depth));  // checked before allocating
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  Writer w(opts);
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace kestrel::jinja
