// The syntax tree the parser builds and the interpreter walks. One node struct per family, with
// the fields each kind uses noted beside them (a small tree; clarity over type-level precision).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace kestrel::jinja {

enum class ExprKind {
  Literal,   // literal
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items: key, value, key, value, ...
  GetAttr,   // a.name
  GetItem,   // a[b] (b may be a Slice)
  Slice,     // items: start, stop, step (each may be null)
  Call,      // a(args, kwargs, *dyn_args, **dyn_kwargs)
  Filter,    // a|name(args...); a is null inside {% filter %} blocks
  Test,      // a is name(args...)
  Not,       // not a
  Neg,       // -a
  Pos,       // +a
  Binary,    // a <name> b for + - * / // % **
  And,       // a and b
  Or,        // a or b
  Concat,    // items joined with ~
  Compare,   // items[0] ops[0] items[1] ops[1] items[2] ...
  CondExpr,  // b if a else c (c may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0, column = 0;
  int height = 1;  // of the a/b/c chain: bounded so evaluation and destruction cannot overflow the stack
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;  // also positional call arguments
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr a, b, c;
  ExprPtr dyn_args, dyn_kwargs;
};

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches (test, body) ..., else_body
  For,          // for target in expr [if cond] [recursive]: body / else_body
  Set,          // set target = expr
  SetBlock,     // set target [| filters in expr] %} body {% endset
  Macro,        // macro name(params) body
  CallBlock,    // call[(params)] expr %} body
  FilterBlock,  // filter expr (a chain whose innermost input is null) %} body
  With,         // with params %} body
  Scope,        // block / generation / autoescape: body rendered in place
  Break,
  Continue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr, target, cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default values may be null
  bool recursive = false;
  bool new_frame = false;  // Scope: block (its own frame) vs generation/autoescape (none)
  // Macro / CallBlock: whether the body uses `caller`, `kwargs`, `varargs` (Jinja2 accepts extra
  // keyword / positional arguments only then).
  bool uses_caller = false, uses_kwargs = false, uses_varargs = false;
};

// Whether any expression in body (nested blocks included) reads the variable `name`.
bool references_name(const Body& body, std::string_view name);

}  // namespace kestrel::jinja
