// A parsed Jinja template: parse once, render many times (concurrently: rendering never touches
// the tree). This is the interpreter's entry point; chat_template.h builds on it.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "chat/jinja/ast.h"
#include "chat/jinja/interpreter.h"

namespace kestrel::jinja {

struct RenderOptions {
  std::tm now{};  // what strftime_now formats
  Limits limits;
};

class Template {
 public:
  // nullptr on a syntax error, described in *error (kind Syntax, line and column set).
  static std::shared_ptr<const Template> parse(std::string_view source, TemplateError* error);
  // Renders with `vars` as the template's variables (the builtin globals are added underneath).
  // False on a render error, described in *error.
  bool render(const DictData& vars, const RenderOptions& opts, std::string* out, TemplateError* error) const;

 private:
  Body body_;
};

}  // namespace kestrel::jinja
