// The Jinja lexer: template source -> tokens, with Jinja2's whitespace handling as configured by
// Hugging Face (trim_blocks, lstrip_blocks, keep_trailing_newline off, `-`/`+` modifiers).
// Comments disappear, {% raw %} bodies become data, string literals are unescaped.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::jinja {

enum class Tok : uint8_t {
  Data,        // template text outside tags
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifiers and keywords (the parser tells them apart)
  String,      // text = the unescaped value
  Int,         // ival
  Float,       // fval
  Op,          // text = the operator ("+", "//", "==", "(", ...)
  End,         // end of the template
};

struct Token {
  Tok type = Tok::End;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 1, column = 1;
};

// Throws TemplateError(Syntax) on malformed input (unterminated comment/raw, stray brackets, ...).
std::vector<Token> tokenize(std::string_view source);

}  // namespace kestrel::jinja
