#include "chat/jinja/template.h"

#include "chat/jinja/parser.h"

namespace kestrel::jinja {

std::shared_ptr<const Template> Template::parse(std::string_view source, TemplateError* error) {
  try {
    auto t = std::make_shared<Template>();
    t->body_ = parse_template(source);
    return t;
  } catch (const TemplateError& e) {
    *error = e;
  } catch (const std::bad_alloc&) {
    *error = TemplateError(ErrorKind::Limit, "out of memory while parsing the template");
  } catch (const std::exception& e) {
    *error = TemplateError(ErrorKind::Runtime, std::string("internal error: ") + e.what());
  }
  return nullptr;
}

bool Template::render(const DictData& vars, const RenderOptions& opts, std::string* out, TemplateError* error) const {
  try {
    DictData globals;
    add_builtin_globals(globals);
    for (const auto& [k, v] : vars.items()) globals.set(k, v);
    Interpreter interp(globals, opts.limits, opts.now);
    *out = interp.render(body_);
    return true;
  } catch (const TemplateError& e) {
    *error = e;
  } catch (const std::bad_alloc&) {
    *error = TemplateError(ErrorKind::Limit, "out of memory while rendering the template");
  } catch (const std::exception& e) {
    *error = TemplateError(ErrorKind::Runtime, std::string("internal error: ") + e.what());
  }
  return false;
}

}  // namespace kestrel::jinja
