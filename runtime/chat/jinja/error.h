// Errors of the Jinja interpreter. Inside runtime/chat/jinja/ a failure travels as a
// TemplateError exception (a template can fail at any depth of any expression, and threading a
// status through every evaluation would triple the code); Template::parse and Template::render
// catch it, so it never leaves this folder.
#pragma once
#include <exception>
#include <string>

namespace kestrel::jinja {

enum class ErrorKind {
  Syntax,     // TemplateSyntaxError / TemplateAssertionError: the template text is malformed
  Undefined,  // UndefinedError: attribute or item access on an undefined value, ...
  Security,   // SecurityError: the sandbox refused (e.g. list.append)
  Type,       // Python TypeError (e.g. str + dict, |items on a string)
  Value,      // Python ValueError / ZeroDivisionError / OverflowError
  Runtime,    // TemplateRuntimeError (e.g. an unknown filter found at render time)
  Raised,     // raise_exception(message) called by the template
  Limit,      // a Kestrel resource limit (depth, output size, steps)
};

// The Python exception name for a kind ("UndefinedError", "TypeError", ...).
const char* error_kind_name(ErrorKind kind);

struct TemplateError : std::exception {
  TemplateError(ErrorKind k, std::string msg) : kind(k), message(std::move(msg)) {}
  const char* what() const noexcept override { return message.c_str(); }
  ErrorKind kind;
  std::string message;
  int line = 0, column = 0;  // 0 = not yet known (the innermost node that sees it fills it in)
};

[[noreturn]] inline void fail(ErrorKind kind, std::string message) { throw TemplateError(kind, std::move(message)); }

}  // namespace kestrel::jinja
