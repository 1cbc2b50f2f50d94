// The Jinja parser: tokens -> a statement tree, following Jinja2 3.1's grammar and operator
// precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < filters/tests <
// postfix). Tags: if/elif/else, for (else, if-filter, recursive, loop controls), set (and block
// set), macro, call, filter, with, block, generation (HF), autoescape.
#pragma once
#include <string_view>

#include "chat/jinja/ast.h"

namespace kestrel::jinja {

// Throws TemplateError(Syntax) with the line and column of the offending token.
Body parse_template(std::string_view source);

// Known filter and test names (filters.cpp, tests.cpp): an unknown one outside an if-branch or
// conditional expression is a syntax error, as in Jinja2; inside, it fails only when evaluated.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace kestrel::jinja
