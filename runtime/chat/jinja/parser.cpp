// The Jinja parser (see parser.h). The structure mirrors Jinja2's parser.py so that precedence,
// tuple handling, test arguments and slices behave the same.
#include "chat/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja/lexer.h"

namespace kestrel::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expression and block nesting (the C++ stack is the limit)

const char* describe(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "begin of print statement";
    case Tok::VarEnd: return "end of print statement";
    case Tok::BlockBegin: return "begin of statement block";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::End: return "end of template";
    default: return nullptr;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse() {
    std::string end;
    return parse_body({}, &end);
  }

 private:
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool soft_ = false;   // inside an if-branch or conditional expression (unknown filters are deferred)
  int loop_depth_ = 0;  // for break/continue

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }

  [[noreturn]] void error(const Token& t, std::string msg) const {
    TemplateError e(ErrorKind::Syntax, std::move(msg));
    e.line = t.line;
    e.column = t.column;
    throw e;
  }
  static std::string token_text(const Token& t) {
    if (const char* d = describe(t)) return d;
    switch (t.type) {
      case Tok::Int: return std::to_string(t.ival);
      case Tok::Float: return format_float(t.fval);
      case Tok::String: return py_str_repr(t.text);
      default: return t.text;
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(cur(), std::string("expected token '") + op + "', got '" + token_text(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) error(cur(), "expected token 'name', got '" + token_text(cur()) + "'");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) error(cur(), "expected token 'end of statement block', got '" + token_text(cur()) + "'");
    next();
  }

  ExprPtr node(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  struct DepthGuard {
    Parser* p;
    DepthGuard(Parser* parser, const Token& t) : p(parser) {
      if (++p->depth_ > kMaxNesting) p->error(t, "template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
  };

  // ---- statements ------------------------------------------------------------------------------
  // Parses until a block tag whose name is in `ends`; consumes that name and stores it in *end.
  Body parse_body(std::initializer_list<const char*> ends, std::string* end) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Data) {
        auto s = stmt(StmtKind::Text, t);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        auto s = stmt(StmtKind::Output, t);
        next();
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != Tok::VarEnd) error(cur(), "expected token 'end of print statement', got '" + token_text(cur()) + "'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name) {
          for (const char* e : ends) {
            if (cur().text == e) {
              *end = e;
              next();
              return body;
            }
          }
        }
        body.push_back(parse_statement());
      } else {  // End
        if (ends.size() == 0) return body;
        std::string want;
        for (const char* e : ends) want += std::string(want.empty() ? "" : " or ") + "'" + e + "'";
        error(t, "Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    DepthGuard guard(this, t);
    if (t.type != Tok::Name) error(t, "tag name expected");
    const std::string tag = t.text;
    next();
    if (tag == "if") return parse_if(t);
    if (tag == "for") return parse_for(t);
    if (tag == "set") return parse_set(t);
    if (tag == "macro") return parse_macro(t);
    if (tag == "call") return parse_call_block(t);
    if (tag == "filter") return parse_filter_block(t);
    if (tag == "with") return parse_with(t);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error(t, "'" + tag + "' outside of a loop");
      expect_block_end();
      return stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, t);
    }
    if (tag == "block" || tag == "generation" || tag == "autoescape") return parse_scope(t, tag);
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends")
      error(t, "'" + tag + "' is not supported: chat templates are single, self-contained templates");
    error(t, "Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if(const Token& t) {
    auto s = stmt(StmtKind::If, t);
    const bool was_soft = soft_;
    soft_ = true;
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      expect_block_end();
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"}, &end);
      }
      break;
    }
    expect_block_end();
    soft_ = was_soft;
    return s;
  }

  StmtPtr parse_for(const Token& t) {
    auto s = stmt(StmtKind::For, t);
    s->target = parse_assign_target(false, {"in"});
    if (!skip_name("in")) error(cur(), "expected token 'in', got '" + token_text(cur()) + "'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    const bool was_soft = soft_;
    if (skip_name("if")) s->cond = parse_expression(true);
    s->recursive = skip_name("recursive");
    expect_block_end();
    soft_ = false;  // the loop body is a new frame in Jinja2
    ++loop_depth_;
    std::string end;
    s->body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    soft_ = was_soft;
    if (end == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, &end);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(const Token& t) {
    ExprPtr target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = stmt(StmtKind::Set, t);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = stmt(StmtKind::SetBlock, t);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endset"}, &end);
    expect_block_end();
    return s;
  }

  // Macro and call-block parameters: (name [= default], ...)
  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr dflt;
      if (skip_op("=")) dflt = parse_expression(true);
      s.params.emplace_back(std::move(name), std::move(dflt));
    }
    expect_op(")");
  }

  static void set_uses(Stmt& s) {
    s.uses_caller = references_name(s.body, "caller");
    s.uses_kwargs = references_name(s.body, "kwargs");
    s.uses_varargs = references_name(s.body, "varargs");
  }

  StmtPtr parse_macro(const Token& t) {
    auto s = stmt(StmtKind::Macro, t);
    s->name = expect_name();
    parse_params(*s);
    expect_block_end();
    const bool was_soft = soft_;
    const int loops = loop_depth_;
    soft_ = false;
    loop_depth_ = 0;
    std::string end;
    s->body = parse_body({"endmacro"}, &end);
    set_uses(*s);
    soft_ = was_soft;
    loop_depth_ = loops;
    if (cur().type == Tok::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(const Token& t) {
    auto s = stmt(StmtKind::CallBlock, t);
    if (is_op("(")) parse_params(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) error(t, "expected call");
    expect_block_end();
    const bool was_soft = soft_;
    const int loops = loop_depth_;
    soft_ = false;
    loop_depth_ = 0;
    std::string end;
    s->body = parse_body({"endcall"}, &end);
    set_uses(*s);
    soft_ = was_soft;
    loop_depth_ = loops;
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(const Token& t) {
    auto s = stmt(StmtKind::FilterBlock, t);
    s->expr = parse_filter(nullptr, true);
    expect_block_end();
    std::string end;
    s->body = parse_body({"endfilter"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(const Token& t) {
    auto s = stmt(StmtKind::With, t);
    while (cur().type != Tok::BlockEnd) {
      if (!s->params.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->params.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end();
    std::string end;
    s->body = parse_body({"endwith"}, &end);
    expect_block_end();
    return s;
  }

  StmtPtr parse_scope(const Token& t, const std::string& tag) {
    auto s = stmt(StmtKind::Scope, t);
    s->new_frame = tag == "block";
    if (tag == "block") {
      s->name = expect_name();
      while (skip_name("scoped") || skip_name("required")) {
      }
    } else if (tag == "autoescape") {
      s->expr = parse_expression(true);
    }
    expect_block_end();
    std::string end;
    const std::string end_tag = "end" + tag;
    s->body = parse_body({end_tag.c_str()}, &end);
    if (tag == "block" && cur().type == Tok::Name) next();
    expect_block_end();
    return s;
  }

  // for/set targets: a name, a tuple of names, or (set only) namespace.attr.
  ExprPtr parse_assign_target(bool with_namespace, std::initializer_list<const char*> extra_end) {
    const Token& t = cur();
    if (with_namespace && t.type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
      auto e = node(ExprKind::GetAttr, t);
      auto ns = node(ExprKind::Name, t);
      ns->name = t.text;
      next();
      next();
      e->a = std::move(ns);
      e->name = expect_name();
      return e;
    }
    ExprPtr target = parse_tuple(true, false, extra_end, false);
    auto check = [&](const Expr& x) {
      if (x.kind != ExprKind::Name) error(t, "can't assign to '" + std::string(x.kind == ExprKind::Literal ? "const" : "expression") + "'");
    };
    if (target->kind == ExprKind::Tuple) {
      for (auto& item : target->items) check(*item);
    } else {
      check(*target);
    }
    return target;
  }

  // ---- expressions -----------------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::End) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    if (t.type == Tok::Name)
      for (const char* e : extra_end)
        if (t.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end, bool explicit_parens) {
    const Token& start = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) error(cur(), "Expected an expression, got '" + token_text(cur()) + "'");
    }
    auto e = node(ExprKind::Tuple, start);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this, cur());
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& t = cur();
      next();
      const bool was_soft = soft_;
      soft_ = true;
      auto e = node(ExprKind::CondExpr, t);
      e->a = parse_or();
      e->b = std::move(expr);
      if (skip_name("else")) e->c = parse_expression(true);
      soft_ = was_soft;
      expr = grown(std::move(e));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const Token& t, ExprPtr l, ExprPtr r, std::string op = "") {
    auto e = node(kind, t);
    e->a = std::move(l);
    e->b = std::move(r);
    e->name = std::move(op);
    return grown(std::move(e));
  }

  // Operator, filter and postfix chains are built by loops, not recursion: bound their height.
  ExprPtr grown(ExprPtr e) {
    for (const Expr* child : {e->a.get(), e->b.get(), e->c.get()})
      if (child) e->height = std::max(e->height, child->height + 1);
    if (e->height > kMaxNesting) error(toks_[pos_ > 0 ? pos_ - 1 : 0], "expression nested too deeply");
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& t = cur();
      next();
      left = binary(ExprKind::Or, t, std::move(left), parse_and());
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& t = cur();
      next();
      left = binary(ExprKind::And, t, std::move(left), parse_not());
    }
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this, cur());
      auto e = node(ExprKind::Not, cur());
      next();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& start = cur();
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      const Token& t = cur();
      if (t.type == Tok::Op && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::Compare, start);
        cmp->items.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = cur();
      next();
      left = binary(ExprKind::Binary, t, std::move(left), parse_concat(), t.text);
    }
    return left;
  }
  ExprPtr parse_concat() {
    const Token& start = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::Concat, start);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = cur();
      next();
      left = binary(ExprKind::Binary, t, std::move(left), parse_pow(), t.text);
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& t = cur();
      next();
      left = binary(ExprKind::Binary, t, std::move(left), parse_unary(true), "**");
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Token& t = cur();
    DepthGuard guard(this, t);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(t.text == "-" ? ExprKind::Neg : ExprKind::Pos, t);
      next();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    DepthGuard guard(this, t);
    ExprPtr e;
    switch (t.type) {
      case Tok::Name:
        e = node(ExprKind::Literal, t);
        if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else e->kind = ExprKind::Name, e->name = t.text;
        next();
        return e;
      case Tok::String: {
        e = node(ExprKind::Literal, t);
        std::string s;
        while (cur().type == Tok::String) s += cur().text, next();
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Tok::Int:
        e = node(ExprKind::Literal, t);
        e->literal = Value::integer(t.ival);
        next();
        return e;
      case Tok::Float:
        e = node(ExprKind::Literal, t);
        e->literal = Value::number(t.fval);
        next();
        return e;
      case Tok::Op:
        if (t.text == "(") {
          next();
          e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          e = node(ExprKind::List, t);
          next();
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          e = node(ExprKind::Dict, t);
          next();
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    error(t, "unexpected '" + token_text(t) + "'");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = grown(parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        e = grown(parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (is_name("is")) {
        e = grown(parse_test(std::move(e)));
      } else if (is_op("(")) {
        e = grown(parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const Token& t = cur();
    if (skip_op(".")) {
      const Token& attr = cur();
      if (attr.type == Tok::Name) {
        auto e = node(ExprKind::GetAttr, t);
        e->a = std::move(obj);
        e->name = attr.text;
        next();
        return e;
      }
      if (attr.type != Tok::Int) error(attr, "expected name or number");
      auto e = node(ExprKind::GetItem, t);
      e->a = std::move(obj);
      e->b = node(ExprKind::Literal, attr);
      e->b->literal = Value::integer(attr.ival);
      next();
      return e;
    }
    next();  // [
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::GetItem, t);
    e->a = std::move(obj);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = node(ExprKind::Tuple, t);
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const Token& t = cur();
    std::vector<ExprPtr> args;
    if (skip_op(":")) {
      args.push_back(nullptr);
    } else {
      ExprPtr first = parse_expression(true);
      if (!skip_op(":")) return first;
      args.push_back(std::move(first));
    }
    if (is_op(":") || is_op("]") || is_op(",")) {
      args.push_back(nullptr);
    } else {
      args.push_back(parse_expression(true));
    }
    if (skip_op(":")) {
      args.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    auto e = node(ExprKind::Slice, t);
    e->items = std::move(args);
    return e;
  }

  void parse_call_args(Expr& e) {
    const Token& open = cur();
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        if (e.dyn_args || e.dyn_kwargs) error(open, "invalid syntax for function call expression");
        e.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        if (e.dyn_kwargs) error(open, "invalid syntax for function call expression");
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        if (e.dyn_kwargs) error(open, "invalid syntax for function call expression");
        std::string key = cur().text;
        next();
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (e.dyn_args || e.dyn_kwargs || !e.kwargs.empty()) error(open, "invalid syntax for function call expression");
        e.items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::Call, cur());
    e->a = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const Token& t = cur();
      auto e = node(ExprKind::Filter, t);
      e->name = dotted_name();
      if (!soft_ && !is_known_filter(e->name)) error(t, "No filter named '" + e->name + "'.");
      if (is_op("(")) parse_call_args(*e);
      e->a = std::move(input);
      input = grown(std::move(e));
    }
    return input;
  }

  ExprPtr parse_test(ExprPtr subject) {
    const Token& is_tok = cur();
    next();  // is
    const bool negated = skip_name("not");
    const Token& t = cur();
    auto e = node(ExprKind::Test, t);
    e->name = dotted_name();
    if (!soft_ && !is_known_test(e->name)) error(t, "No test named '" + e->name + "'.");
    e->a = std::move(subject);
    const Token& c = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Int || c.type == Tok::Float ||
                (c.type == Tok::Op && (c.text == "(" || c.text == "[" || c.text == "{"))) &&
               !(c.type == Tok::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
      if (c.type == Tok::Name && c.text == "is") error(c, "You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    e = grown(std::move(e));
    if (!negated) return e;
    auto n = node(ExprKind::Not, is_tok);
    n->a = std::move(e);
    return grown(std::move(n));
  }
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace kestrel::jinja
