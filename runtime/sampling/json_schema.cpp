// JSON Schema -> GBNF (json_schema.h): a rule per schema node, the JSON primitives shared.
#include "sampling/json_schema.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "sampling/grammar.h"

namespace kestrel {

namespace {

using ojson = nlohmann::ordered_json;  // properties keep the schema's order

// Whitespace between tokens: one space, or a line break and an indent of at most 20 (bounded, so
// that spaces cannot keep a value open forever; pretty-printed JSON fits).
constexpr const char* kPrimitives = R"G(json-ws ::= ( " " | "\n" [ \t]{0,20} )?
json-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-string ::= "\"" json-char* "\""
json-digits ::= "0" | [1-9] [0-9]{0,15}
json-int ::= "-"? json-digits
json-frac-exp ::= ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
json-number ::= json-int json-frac-exp
json-bool ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null
json-object ::= "{" json-ws ( json-kv ( "," json-ws json-kv )* )? "}"
json-kv ::= json-string json-ws ":" json-ws json-value json-ws
json-array ::= "[" json-ws ( json-value json-ws ( "," json-ws json-value json-ws )* )? "]"
json-date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )
json-time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
json-hex4 ::= [0-9a-fA-F]{4}
)G";

// A GBNF string literal of raw text.
std::string lit(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_text(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::strict); }

const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",  "$schema",
                                            "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                            "$defs",    "definitions"};
const std::set<std::string> kKeywords = {"type",  "properties", "required", "additionalProperties", "enum",
                                         "const", "items",      "minItems", "maxItems",             "anyOf",
                                         "oneOf", "allOf",      "$ref",     "minLength",            "maxLength",
                                         "format", "minimum",   "exclusiveMinimum"};

class Converter {
 public:
  explicit Converter(const ojson& root, std::string prefix = "s") : root_(root), prefix_(std::move(prefix)) {}

  Expected<std::string> run() {
    auto top = gen(root_, "");
    KS_RETURN_IF_ERROR(top.status());
    return "root ::= json-ws " + top.value() + " json-ws\n" + rules_ + kPrimitives;
  }
  // The expression the schema's value matches; its rules (named prefix N) are in rules().
  Expected<std::string> top() { return gen(root_, ""); }
  const std::string& rules() const { return rules_; }

 private:
  static Status unsupported(const std::string& what, const std::string& path) {
    return Error(KESTREL_ERR_UNSUPPORTED,
                 "json_schema: " + what + " at '" + (path.empty() ? "/" : path) + "' cannot be enforced by this server");
  }
  static Status malformed(const std::string& what, const std::string& path) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "json_schema: " + what + " at '" + (path.empty() ? "/" : path) + "'");
  }
  std::string define(const std::string& body) {
    std::string name = prefix_;  // (appending: GCC 12 warns falsely on "s" + ...)
    name += std::to_string(++n_);
    rules_ += name + " ::= " + body + "\n";
    return name;
  }
  // The bounds min_key .. max_key (absent: 0 and -1, unbounded), each a count up to 1000.
  static Status bounds(const ojson& s, const char* min_key, const char* max_key, const std::string& path, int64_t* lo,
                       int64_t* hi) {
    *lo = 0;
    *hi = -1;
    for (const char* key : {min_key, max_key}) {
      if (!s.contains(key)) continue;
      const ojson& v = s.at(key);
      if (!v.is_number_integer() || v.get<int64_t>() < 0) return malformed(std::string("'") + key + "' must be a non-negative integer", path);
      if (v.get<int64_t>() > 1000) return unsupported(std::string("'") + key + "' over 1000", path);
      *(key == min_key ? lo : hi) = v.get<int64_t>();
    }
    if (*hi >= 0 && *hi < *lo) return malformed(std::string("'") + max_key + "' below '" + min_key + "'", path);
    return Status::Ok();
  }

  Expected<std::string> gen(const ojson& s, const std::string& path) {
    struct Depth {  // nesting, bounded: a hostile schema cannot exhaust the stack
      int& d;
      explicit Depth(int& x) : d(++x) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth.d > 64) return unsupported("a schema nested deeper than 64", path.substr(0, 200));
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return unsupported("the schema false (it matches nothing)", path);
    }
    if (!s.is_object()) return malformed("a schema must be an object or a boolean", path);
    for (const auto& [k, v] : s.items())
      if (!kKeywords.count(k) && !kAnnotations.count(k)) return unsupported("the keyword '" + k + "'", path);
    if (s.contains("$ref")) return gen_ref(s, path);
    if (s.contains("const")) return define(lit(json_text(s["const"])));
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) return malformed("'enum' must be a non-empty array", path);
      std::string body;
      for (const ojson& v : e) body += (body.empty() ? "" : " | ") + lit(json_text(v));
      return define(body);
    }
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(key)) continue;
      const ojson& list = s[key];
      if (!list.is_array() || list.empty()) return malformed(std::string("'") + key + "' must be a non-empty array", path);
      for (const auto& [k, v] : s.items())
        if (k != key && kKeywords.count(k)) return unsupported("'" + k + "' beside '" + key + "'", path);
      if (std::string(key) == "allOf" && list.size() != 1) return unsupported("'allOf' of more than one schema", path);
      std::string body;
      for (size_t i = 0; i < list.size(); ++i) {
        auto sub = gen(list[i], path + "/" + key + "/" + std::to_string(i));
        KS_RETURN_IF_ERROR(sub.status());
        body += (body.empty() ? "" : " | ") + sub.value();
      }
      return define(body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const ojson& x : t) {
          if (!x.is_string()) return malformed("'type' must be a string or an array of strings", path);
          types.push_back(x.get<std::string>());
        }
      else return malformed("'type' must be a string or an array of strings", path);
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types = {"string"};
    } else if (s.contains("minimum") || s.contains("exclusiveMinimum")) {
      types = {"number"};
    } else {
      return std::string("json-value");
    }
    std::string body;
    for (const std::string& t : types) {
      auto one = gen_typed(s, t, path);
      KS_RETURN_IF_ERROR(one.status());
      body += (body.empty() ? "" : " | ") + one.value();
    }
    return define(body);
  }

  Expected<std::string> gen_ref(const ojson& s, const std::string& path) {
    if (!s["$ref"].is_string()) return malformed("'$ref' must be a string", path);
    const std::string ref = s["$ref"].get<std::string>();
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && kKeywords.count(k)) return unsupported("'" + k + "' beside '$ref'", path);
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    const ojson* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (ref.compare(0, p.size(), p) != 0) continue;
        const std::string defs = p.substr(2, p.size() - 3), name = ref.substr(p.size());
        if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name)) target = &root_[defs][name];
      }
    }
    if (!target) return unsupported("'$ref' " + ref + " (only #, #/$defs/... and #/definitions/... of this schema)", path);
    const std::string name = "r" + std::to_string(refs_.size() + 1);  // named first: recursion refers to it
    refs_.emplace(ref, name);
    auto body = gen(*target, ref.substr(1));
    KS_RETURN_IF_ERROR(body.status());
    rules_ += name + " ::= " + body.value() + "\n";
    return name;
  }

  Expected<std::string> gen_typed(const ojson& s, const std::string& type, const std::string& path) {
    if (type == "string") return gen_string(s, path);
    if (type == "integer" || type == "number") return gen_number(s, type == "integer", path);
    if (type == "boolean") return std::string("json-bool");
    if (type == "null") return std::string("json-null");
    if (type == "object") return gen_object(s, path);
    if (type == "array") return gen_array(s, path);
    return malformed("unknown type '" + type + "'", path);
  }

  Expected<std::string> gen_string(const ojson& s, const std::string& path) {
    if (s.contains("format")) {
      if (s.contains("minLength") || s.contains("maxLength")) return unsupported("'format' with 'minLength' or 'maxLength'", path);
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      if (f == "date") return define("\"\\\"\" json-date \"\\\"\"");
      if (f == "time") return define("\"\\\"\" json-time \"\\\"\"");
      if (f == "date-time") return define("\"\\\"\" json-date \"T\" json-time \"\\\"\"");
      if (f == "uuid") return define("\"\\\"\" json-hex4 json-hex4 \"-\" json-hex4 \"-\" json-hex4 \"-\" json-hex4 \"-\" json-hex4 json-hex4 json-hex4 \"\\\"\"");
      return unsupported("'format': '" + f + "'", path);
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return std::string("json-string");
    int64_t lo = 0, hi = -1;
    KS_RETURN_IF_ERROR(bounds(s, "minLength", "maxLength", path, &lo, &hi));
    return define("\"\\\"\" json-char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\"");
  }

  Expected<std::string> gen_number(const ojson& s, bool integer, const std::string& path) {
    const bool has_min = s.contains("minimum"), has_xmin = s.contains("exclusiveMinimum");
    if (!has_min && !has_xmin) return std::string(integer ? "json-int" : "json-number");
    if (has_min && has_xmin) return unsupported("both 'minimum' and 'exclusiveMinimum'", path);
    const ojson& v = has_min ? s["minimum"] : s["exclusiveMinimum"];
    if (!v.is_number()) return malformed("the lower bound must be a number", path);
    const double m = v.get<double>();
    const std::string tail = integer ? "" : " json-frac-exp";
    if (has_min && m == 0) return define("json-digits" + tail);  // no minus sign
    if (integer && ((has_min && m == 1) || (has_xmin && m == 0))) return define("[1-9] [0-9]{0,15}");
    return unsupported(std::string("'") + (has_min ? "minimum" : "exclusiveMinimum") + "': " + json_text(v) +
                           " (only minimum 0, and for integers minimum 1 or exclusiveMinimum 0)",
                       path);
  }

  Expected<std::string> gen_object(const ojson& s, const std::string& path) {
    static const ojson kEmpty = ojson::object();
    const ojson& props = s.contains("properties") ? s["properties"] : kEmpty;
    if (!props.is_object()) return malformed("'properties' must be an object", path);
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return malformed("'required' must be an array of strings", path);
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) return malformed("'required' must be an array of strings", path);
        if (!props.contains(r.get<std::string>()))
          return unsupported("the required property '" + r.get<std::string>() + "' without a schema in 'properties'", path);
        required.insert(r.get<std::string>());
      }
    }
    // Other properties: any value (absent or true), those of a schema, or none (false).
    std::string extra_kv;
    const ojson* ap = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (!ap || (ap->is_boolean() && ap->get<bool>())) {
      extra_kv = "json-kv";
    } else if (!ap->is_boolean()) {
      auto v = gen(*ap, path + "/additionalProperties");
      KS_RETURN_IF_ERROR(v.status());
      extra_kv = define("json-string json-ws \":\" json-ws " + v.value() + " json-ws");
    }
    // The properties in order, each required one present and the others optional. start_i: none
    // written yet; cont_i: some written (the next needs a comma).
    const std::string id = std::to_string(++n_);
    std::vector<std::string> kv;
    std::vector<bool> req;
    for (const auto& [name, sub] : props.items()) {
      auto v = gen(sub, path + "/properties/" + name);
      KS_RETURN_IF_ERROR(v.status());
      kv.push_back(define(lit(json_text(ojson(name))) + " json-ws \":\" json-ws " + v.value() + " json-ws"));
      req.push_back(required.count(name) > 0);
    }
    const size_t n = kv.size();
    const auto start = [&](size_t i) { return prefix_ + "o" + id + "-s" + std::to_string(i); };
    const auto cont = [&](size_t i) { return prefix_ + "o" + id + "-c" + std::to_string(i); };
    rules_ += start(n) + " ::= " + (extra_kv.empty() ? "\"\"" : "( " + extra_kv + " ( \",\" json-ws " + extra_kv + " )* )?") + "\n";
    rules_ += cont(n) + " ::= " + (extra_kv.empty() ? "\"\"" : "( \",\" json-ws " + extra_kv + " )*") + "\n";
    for (size_t i = n; i-- > 0;) {
      rules_ += start(i) + " ::= " + kv[i] + " " + cont(i + 1) + (req[i] ? "" : " | " + start(i + 1)) + "\n";
      rules_ += cont(i) + " ::= \",\" json-ws " + kv[i] + " " + cont(i + 1) + (req[i] ? "" : " | " + cont(i + 1)) + "\n";
    }
    return define("\"{\" json-ws " + start(0) + " \"}\"");
  }

  Expected<std::string> gen_array(const ojson& s, const std::string& path) {
    std::string item = "json-value";
    if (s.contains("items")) {
      auto v = gen(s["items"], path + "/items");
      KS_RETURN_IF_ERROR(v.status());
      item = v.value();
    }
    int64_t lo = 0, hi = -1;
    KS_RETURN_IF_ERROR(bounds(s, "minItems", "maxItems", path, &lo, &hi));
    if (hi == 0) return define("\"[\" json-ws \"]\"");
    const std::string more = "( \",\" json-ws " + item + " json-ws ){" + std::to_string(lo > 0 ? lo - 1 : 0) + "," +
                             (hi > 0 ? std::to_string(hi - 1) : "") + "}";
    const std::string list = item + " json-ws " + more;
    return define("\"[\" json-ws " + (lo > 0 ? list : "( " + list + " )?") + " \"]\"");
  }

  const ojson& root_;
  std::string prefix_;
  std::string rules_;
  std::map<std::string, std::string> refs_;
  int n_ = 0;
  int depth_ = 0;
};

}  // namespace

Expected<std::string> json_schema_to_gbnf(std::string_view schema) {
  ojson root;
  try {
    root = ojson::parse(schema);
  } catch (const std::exception& e) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("json_schema: not valid JSON: ") + e.what());
  }
  Expected<std::string> gbnf = std::string();
  try {
    gbnf = Converter(root).run();
  } catch (const std::exception& e) {  // a value of the wrong JSON type deep in the schema
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("json_schema: ") + e.what());
  }
  KS_RETURN_IF_ERROR(gbnf.status());
  // A $ref cycle through anyOf that consumes nothing first is left recursion: refused here, as
  // the schema's problem (the grammar's own message says which rules).
  auto g = parse_grammar(gbnf.value());
  if (!g.ok()) return Error(KESTREL_ERR_UNSUPPORTED, "json_schema: a schema whose grammar cannot be matched: " + g.status().message());
  return gbnf;
}

Expected<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix,
                                        std::string* rules) {
  try {
    Converter c(schema, prefix);
    auto top = c.top();
    KS_RETURN_IF_ERROR(top.status());
    *rules += c.rules();
    return top;
  } catch (const std::exception& e) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string("json_schema: ") + e.what());
  }
}

std::string json_primitives_gbnf() { return kPrimitives; }

std::string gbnf_literal(std::string_view text) { return lit(text); }

std::string json_value_gbnf(bool object_only) {
  return std::string("root ::= json-ws ") + (object_only ? "json-object" : "json-value") + " json-ws\n" + kPrimitives;
}

}  // namespace kestrel
