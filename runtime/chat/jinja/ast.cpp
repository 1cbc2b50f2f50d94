// Tree queries the parser needs.
#include "chat/jinja/ast.h"

namespace kestrel::jinja {
namespace {

bool in_expr(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == ExprKind::Name && e->name == name) return true;
  for (const auto& item : e->items)
    if (in_expr(item.get(), name)) return true;
  for (const auto& kv : e->kwargs)
    if (in_expr(kv.second.get(), name)) return true;
  return in_expr(e->a.get(), name) || in_expr(e->b.get(), name) || in_expr(e->c.get(), name) ||
         in_expr(e->dyn_args.get(), name) || in_expr(e->dyn_kwargs.get(), name);
}

}  // namespace

bool references_name(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    if (in_expr(s->expr.get(), name) || in_expr(s->target.get(), name) || in_expr(s->cond.get(), name)) return true;
    for (const auto& [test, branch] : s->branches)
      if (in_expr(test.get(), name) || references_name(branch, name)) return true;
    for (const auto& p : s->params)
      if (in_expr(p.second.get(), name)) return true;
    if (references_name(s->body, name) || references_name(s->else_body, name)) return true;
  }
  return false;
}

}  // namespace kestrel::jinja
