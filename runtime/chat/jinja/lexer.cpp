// The Jinja lexer (see lexer.h). It follows Jinja2 3.1's lexer rules: the root state looks for the
// next "{{", "{%" or "{#"; inside a tag, the end delimiter is only recognized while no bracket is
// open; whitespace control is applied to the data token before each tag.
#include "chat/jinja/lexer.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "chat/jinja/error.h"
#include "chat/jinja/value.h"

namespace kestrel::jinja {
namespace {

// Python's str.isspace() for ASCII (Jinja's \s and str.rstrip()).
bool is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (unsigned char)c >= 0x80; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines (\r\n, \r, \n) become \n; one trailing newline is dropped (keep_trailing_newline off).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t start = find_tag(pos_);
      if (start == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      size_t after = start + 2;
      char sign = after < n && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
      size_t raw_body = kind == '%' ? match_raw_begin(after) : std::string::npos;
      std::string_view text(src_.data() + pos_, start - pos_);
      text = strip_before_tag(text, sign, kind == '{');
      emit_data(pos_, text);
      if (raw_body != std::string::npos) {
        lex_raw(start, raw_body);
        continue;
      }
      if (sign) ++after;
      if (kind == '#') {
        lex_comment(start, after);
      } else {
        push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, start, "");
        pos_ = after;
        lex_tag(kind == '{');
      }
    }
    push(Tok::End, n, "");
    return std::move(out_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the previous match ended with a newline (or nothing came yet)

  [[noreturn]] void error_at(size_t pos, std::string msg) {
    TemplateError e(ErrorKind::Syntax, std::move(msg));
    locate(pos, &e.line, &e.column);
    throw e;
  }
  void locate(size_t pos, int* line, int* col) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      (line_starts_[mid] <= pos ? lo : hi) = mid;
    }
    *line = static_cast<int>(lo + 1);
    *col = static_cast<int>(pos - line_starts_[lo] + 1);
  }
  Token& push(Tok type, size_t pos, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    locate(pos, &t.line, &t.column);
    out_.push_back(std::move(t));
    return out_.back();
  }
  void emit_data(size_t pos, std::string_view text) {
    if (!text.empty()) push(Tok::Data, pos, std::string(text));
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` starting after "{%": the position after it, or npos.
  size_t match_raw_begin(size_t p) const {
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_ws(src_[p])) ++p;
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  // Whitespace control on the text before a tag: `-` strips all trailing whitespace; otherwise
  // lstrip_blocks removes spaces/tabs between the line start and a block or comment tag.
  std::string_view strip_before_tag(std::string_view text, char sign, bool is_var) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      return text.substr(0, e);
    }
    if (sign == '+' || is_var) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    if (l_pos >= text.size()) return text;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (!is_ws(text[i])) return text;
    return text.substr(0, l_pos);
  }

  // After a block/comment end: trim_blocks drops one newline; `-` drops all whitespace.
  void after_end(size_t p, bool strip_all, bool keep) {
    if (strip_all) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (!keep && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > 0 && src_[p - 1] == '\n';
    pos_ = p;
  }

  void lex_comment(size_t start, size_t body) {
    for (size_t p = body; p + 1 < src_.size(); ++p) {
      if (src_[p] == '#' && src_[p + 1] == '}') {
        bool minus = p > body && src_[p - 1] == '-';
        bool plus = p > body && src_[p - 1] == '+';
        after_end(p + 2, minus, plus);
        return;
      }
    }
    error_at(start, "Missing end of comment tag");
  }

  // The body of {% raw %} up to {% endraw %} (whose own whitespace control applies).
  void lex_raw(size_t start, size_t body) {
    for (size_t p = body; p + 1 < src_.size(); ++p) {
      if (src_[p] != '{' || src_[p + 1] != '%') continue;
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      bool minus = false, plus = false;
      if (src_.compare(q, 3, "-%}") == 0) minus = true, q += 3;
      else if (src_.compare(q, 3, "+%}") == 0) plus = true, q += 3;
      else if (src_.compare(q, 2, "%}") == 0) q += 2;
      else continue;
      line_starting_ = body > 0 && src_[body - 1] == '\n';
      emit_data(body, strip_before_tag(std::string_view(src_).substr(body, p - body), sign, false));
      after_end(q, minus, plus);
      return;
    }
    error_at(start, "Missing end of raw directive");
  }

  void lex_tag(bool is_var) {
    std::string stack;  // expected closing brackets
    const size_t n = src_.size();
    while (true) {
      if (pos_ >= n) error_at(pos_, is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      const char c = src_[pos_];
      if (stack.empty()) {
        if (is_var) {
          if (src_.compare(pos_, 3, "-}}") == 0) return push(Tok::VarEnd, pos_, ""), after_end(pos_ + 3, true, true);
          if (src_.compare(pos_, 2, "}}") == 0) return push(Tok::VarEnd, pos_, ""), after_var_end(pos_ + 2);
        } else {
          if (src_.compare(pos_, 3, "+%}") == 0) return push(Tok::BlockEnd, pos_, ""), after_end(pos_ + 3, false, true);
          if (src_.compare(pos_, 3, "-%}") == 0) return push(Tok::BlockEnd, pos_, ""), after_end(pos_ + 3, true, false);
          if (src_.compare(pos_, 2, "%}") == 0) return push(Tok::BlockEnd, pos_, ""), after_end(pos_ + 2, false, false);
        }
      }
      if (is_ws(c)) {
        ++pos_;
      } else if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t s = pos_;
        while (pos_ < n && is_name_char(src_[pos_])) ++pos_;
        push(Tok::Name, s, src_.substr(s, pos_ - s));
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(stack);
      }
    }
  }
  void after_var_end(size_t p) {
    line_starting_ = false;
    pos_ = p;
  }

  void lex_number() {
    const size_t s = pos_, n = src_.size();
    auto digits = [&](size_t p) {  // (\d+_)*\d+ from p; returns the end or p if none
      size_t q = p;
      while (q < n && is_digit(src_[q])) {
        while (q < n && is_digit(src_[q])) ++q;
        if (q + 1 < n && src_[q] == '_' && is_digit(src_[q + 1])) ++q;
      }
      return q;
    };
    if (src_[s] == '0' && s + 1 < n && std::string_view("xXoObB").find(src_[s + 1]) != std::string_view::npos) {
      const int base = (src_[s + 1] | 0x20) == 'x' ? 16 : (src_[s + 1] | 0x20) == 'o' ? 8 : 2;
      size_t q = s + 2;
      std::string d;
      while (q < n && (std::isxdigit((unsigned char)src_[q]) || src_[q] == '_')) {
        if (src_[q] != '_') d += src_[q];
        ++q;
      }
      errno = 0;
      char* end = nullptr;
      long long v = d.empty() ? 0 : std::strtoll(d.c_str(), &end, base);
      if (d.empty() || errno || *end) error_at(s, "invalid integer literal");
      pos_ = q;
      push(Tok::Int, s, "").ival = v;
      return;
    }
    size_t e = digits(s);
    bool is_float = false;
    // Jinja2's float rule has (?<!\.): after "x." the digits are an integer item index (x.0.1).
    const bool after_dot = s > 0 && src_[s - 1] == '.';
    if (!after_dot && e + 1 < n && src_[e] == '.' && is_digit(src_[e + 1])) e = digits(e + 1), is_float = true;
    if (!after_dot && e < n && (src_[e] | 0x20) == 'e') {
      size_t q = e + 1;
      if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < n && is_digit(src_[q])) e = digits(q), is_float = true;
    }
    std::string text;
    for (size_t i = s; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    pos_ = e;
    if (is_float) {
      push(Tok::Float, s, "").fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno) error_at(s, "integer literal too large");
      push(Tok::Int, s, "").ival = v;
    }
  }

  void lex_string() {
    const size_t s = pos_, n = src_.size();
    const char q = src_[s];
    size_t p = s + 1;
    while (p < n && src_[p] != q) p += src_[p] == '\\' ? 2 : 1;
    if (p >= n) error_at(s, std::string("unexpected char '") + q + "' at " + std::to_string(s));
    push(Tok::String, s, unescape(src_.substr(s + 1, p - s - 1), s));
    pos_ = p + 1;
  }

  // Python's "unicode-escape" decoding of a string literal's body.
  std::string unescape(const std::string& body, size_t at) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out += body[i];
        continue;
      }
      const char c = body[++i];
      auto hex = [&](int count) {
        uint32_t v = 0;
        for (int k = 0; k < count; ++k) {
          if (i + 1 >= body.size() || !std::isxdigit((unsigned char)body[i + 1])) error_at(at, "truncated escape sequence");
          const char h = body[++i];
          v = v * 16 + (is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > 0x10FFFF) error_at(at, "illegal Unicode character");
        append_utf8(out, v);
      };
      switch (c) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (c >= '0' && c <= '7') {
            uint32_t v = c - '0';
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) v = v * 8 + (body[++i] - '0');
            append_utf8(out, v);
          } else {
            out += '\\';
            out += c;
          }
      }
    }
    return out;
  }

  void lex_operator(std::string& stack) {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        push(Tok::Op, pos_, op);
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      error_at(pos_, std::string("unexpected char '") + c + "' at " + std::to_string(pos_));
    if (c == '(' || c == '[' || c == '{') {
      stack += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (stack.empty()) error_at(pos_, std::string("unexpected '") + c + "'");
      if (stack.back() != c) error_at(pos_, std::string("unexpected '") + c + "', expected '" + stack.back() + "'");
      stack.pop_back();
    }
    push(Tok::Op, pos_, std::string(1, c));
    ++pos_;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace kestrel::jinja
