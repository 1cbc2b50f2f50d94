// The interpreter (see interpreter.h): statements, expressions, scoping, macros, loops, limits.
#include "chat/jinja/interpreter.h"

#include <utility>

#include "chat/jinja/builtins.h"

namespace kestrel::jinja {

// Counts one evaluation step and one level of C++ recursion; both are bounded by Limits.
struct NestGuard {
  Interpreter& in;
  explicit NestGuard(Interpreter& i) : in(i) {
    in.tick();
    if (in.nesting_ + 1 > in.limits_.max_nesting)
      fail(ErrorKind::Limit, "nesting limit of " + std::to_string(in.limits_.max_nesting) + " exceeded");
    ++in.nesting_;
  }
  ~NestGuard() { --in.nesting_; }
};

namespace {

// A loop iteration or a macro call builds a frame (and a loop object): it costs several steps,
// so that the step limit bounds time whatever a template's mix of work.
constexpr uint64_t kFrameSteps = 4;

// Makes `slot` point at a frame for the lifetime of the guard.
struct FrameSwap {
  FramePtr& slot;
  FramePtr saved;
  FrameSwap(FramePtr& s, FramePtr f) : slot(s), saved(std::exchange(s, std::move(f))) {}
  ~FrameSwap() { slot = std::move(saved); }
};

FramePtr child_frame(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

[[noreturn]] void fail_recursion(const Limits& limits) {
  fail(ErrorKind::Limit, "recursion limit of " + std::to_string(limits.max_recursion) + " exceeded (macro calls and recursive loops)");
}

void locate(TemplateError& err, int line, int column) {
  if (err.line == 0) {
    err.line = line;
    err.column = column;
  }
}

}  // namespace

Interpreter::Interpreter(const DictData& globals, const Limits& limits, const std::tm& now)
    : globals_(globals), limits_(limits), now_(now) {}

std::string Interpreter::render(const Body& body) {
  budget_ = Budget{};
  budget_.limits = limits_;
  struct BudgetScope {
    Budget* saved;
    ~BudgetScope() { set_thread_budget(saved); }
  } scope{set_thread_budget(&budget_)};
  // Values die while the budget is still installed; namespaces are emptied first, so that no
  // reference cycle through them outlives the render and no chain of them is freed recursively.
  struct Cleanup {
    FramePtr& frame;
    std::vector<std::shared_ptr<ObjectData>>& namespaces;
    ~Cleanup() {
      for (auto& ns : namespaces) ns->attrs.clear();
      namespaces.clear();
      frame.reset();
    }
  } cleanup{frame_, namespaces_};
  frame_ = std::make_shared<Frame>();
  std::string out;
  exec(body, out);
  return out;
}

void Interpreter::charge(uint64_t bytes) {
  check_alloc(bytes);
  count_text_work(bytes);
}

void Interpreter::append(std::string& out, std::string_view text) {
  if (sat_add(out.size(), text.size()) > limits_.max_output_bytes) fail_output_limit();
  count_text_work(text.size());
  out.append(text);
}

// ---- names, attributes, items ------------------------------------------------------------------
Value Interpreter::lookup(const std::string& name) const {
  for (const Frame* f = frame_.get(); f; f = f->parent.get())
    if (const Value* v = f->find_local(name)) return *v;
  if (const Value* v = globals_.find(std::string_view(name))) return *v;
  return Value::undefined_name(name);
}

Value Interpreter::getattr(const Value& obj, std::string_view name) {
  Value m;
  switch (obj.kind) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Dict:
      if (find_method(obj, name, &m)) return m;
      if (const Value* v = obj.dict_data().find(name)) return *v;
      break;
    case Kind::Object:
      if (const Value* v = obj.obj_data().attrs.find(name)) return *v;
      if (obj.obj_data().lazy_attr && obj.obj_data().lazy_attr(name, &m)) return m;
      break;
    default:
      if (find_method(obj, name, &m)) return m;
  }
  return Value::undefined_attr(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  Value m;
  switch (obj.kind) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Dict:
      if (key.kind != Kind::List && key.kind != Kind::Dict)
        if (const Value* v = obj.dict_data().find(key)) return *v;
      break;
    case Kind::List: case Kind::Tuple: case Kind::Iterator:
      if (key.is_int() && (obj.kind != Kind::Iterator || obj.iter_data().type_name == "range")) {  // range(n)[i] too
        const auto& items = obj.kind == Kind::Iterator ? obj.iter_data().items : obj.items();
        int64_t k = key.as_int();
        if (k < 0) k += static_cast<int64_t>(items.size());
        if (k >= 0 && k < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(k)];
      }
      break;
    case Kind::String:
      if (key.is_int()) {
        count_text_work(obj.str().size());
        const std::u32string cps = utf8_decode(obj.str());
        int64_t k = key.as_int();
        if (k < 0) k += static_cast<int64_t>(cps.size());
        if (k >= 0 && k < static_cast<int64_t>(cps.size())) return Value::string(utf8_encode(cps.substr(static_cast<size_t>(k), 1)), obj.safe);
      }
      break;
    case Kind::Object:
      if (key.is_string()) return getattr(obj, key.str());
      break;
    default: break;
  }
  if (key.is_string() && obj.kind != Kind::Object && find_method(obj, key.str(), &m)) return m;
  return Value::undefined_item(obj, key);
}

// ---- calls -----------------------------------------------------------------------------------
Value Interpreter::call(const Value& callee, CallArgs& args) {
  switch (callee.kind) {
    case Kind::Function: return callee.fn_data().fn(*this, args);
    case Kind::Object:
      if (callee.obj_data().callable) return callee.obj_data().callable(*this, args);
      break;
    case Kind::Undefined: fail_undefined(callee);
    default: break;
  }
  fail(ErrorKind::Type, std::string("'") + type_name(callee) + "' object is not callable");
}

// Builtins walk their input at least once: what that costs, in steps.
static void count_input_work(const Value& v) {
  switch (v.kind) {
    case Kind::String: count_text_work(v.str().size()); break;
    case Kind::List: case Kind::Tuple: count_work(v.items().size()); break;
    case Kind::Dict: count_work(v.dict_data().size()); break;
    case Kind::Iterator: count_work(v.iter_data().items.size()); break;
    default: break;
  }
}

Value Interpreter::call_filter(std::string_view name, const Value& input, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) fail(ErrorKind::Runtime, "No filter named '" + std::string(name) + "' found.");
  count_input_work(input);
  return f(*this, input, args);
}

bool Interpreter::call_test(std::string_view name, const Value& input, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) fail(ErrorKind::Runtime, "No test named '" + std::string(name) + "' found.");
  count_input_work(input);
  return t(*this, input, args);
}

void Interpreter::eval_args(const Expr& e, CallArgs& args) {
  for (const auto& item : e.items) args.pos.push_back(eval(*item));
  for (const auto& [name, expr] : e.kwargs) args.kw.emplace_back(name, eval(*expr));
  if (e.dyn_args)
    for (Value& v : iterate(eval(*e.dyn_args))) args.pos.push_back(std::move(v));
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs);
    if (!d.is_dict()) fail(ErrorKind::Type, "argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict_data().items()) {
      if (!k.is_string()) fail(ErrorKind::Type, "keywords must be strings");
      args.kw.emplace_back(k.str(), v);
    }
  }
}

Value Interpreter::eval_call(const Expr& e) {
  Value callee = eval(*e.a);
  CallArgs args;
  eval_args(e, args);
  return call(callee, args);
}

Value Interpreter::define_macro(const Stmt& s, const std::string& name, const FramePtr& closure) {
  // A weak reference: the macro usually lives in the frame it closes over.
  std::weak_ptr<Frame> weak = closure;
  return Value::function(name, [&s, weak](Interpreter& in, CallArgs& args) { return in.call_macro(s, weak.lock(), args); });
}

Value Interpreter::call_macro(const Stmt& m, const FramePtr& closure, CallArgs& args) {
  if (call_depth_ + 1 > limits_.max_recursion) fail_recursion(limits_);
  tick(kFrameSteps);
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } depth_guard{++call_depth_};
  FramePtr f = child_frame(closure);
  const size_t np = m.params.size();
  std::vector<bool> given(np, false);
  std::vector<Value> varargs;
  Value kwargs = Value::dict();
  // Jinja2's Macro.__call__: positionals first; extra ones only into `varargs` when the body
  // uses it, unknown keywords only into `kwargs` when the body uses that.
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < np) {
      f->set(m.params[k].first, args.pos[k]);
      given[k] = true;
    } else if (m.uses_varargs) {
      varargs.push_back(args.pos[k]);
    } else {
      fail(ErrorKind::Type, "macro '" + m.name + "' takes not more than " + std::to_string(np) + " argument(s)");
    }
  }
  bool caller_set = false;
  for (auto& [key, v] : args.kw) {
    size_t k = 0;
    while (k < np && m.params[k].first != key) ++k;
    if (k < np && !given[k]) {
      f->set(key, v);
      given[k] = true;
    } else if (key == "caller" && m.uses_caller && !caller_set) {
      f->set("caller", v);
      caller_set = true;
    } else if (m.uses_kwargs) {
      kwargs.dict_data().set(Value::string(key), v);
    } else if (key == "caller") {
      fail(ErrorKind::Type, "macro '" + m.name + "' was invoked with two values for the special caller argument. This is most likely a bug.");
    } else {
      fail(ErrorKind::Type, "macro '" + m.name + "' takes no keyword argument '" + key + "'");
    }
  }
  if (m.uses_caller && !caller_set) f->set("caller", Value::undefined("No caller defined"));
  FrameSwap swap(frame_, f);
  for (size_t k = 0; k < np; ++k) {
    if (given[k]) continue;
    const auto& [name, dflt] = m.params[k];
    f->set(name, dflt ? eval(*dflt) : Value::undefined("parameter " + py_str_repr(name) + " was not provided"));
  }
  f->set("varargs", Value::tuple(std::move(varargs)));
  f->set("kwargs", std::move(kwargs));
  std::string out;
  exec(m.body, out);
  return Value::string(std::move(out));
}

// ---- expressions -----------------------------------------------------------------------------
Value Interpreter::eval(const Expr& e) {
  NestGuard guard(*this);
  try {
    return eval_node(e);
  } catch (TemplateError& err) {
    locate(err, e.line, e.column);
    throw;
  }
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.items[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.items[k + 1]);
    const std::string& op = e.ops[k];
    bool r;
    if (op == "==") r = py_equal(left, right);
    else if (op == "!=") r = !py_equal(left, right);
    else if (op == "in" || op == "notin") r = py_contains(right, left) == (op == "in");
    else {
      const int c = py_compare(left, right, op.c_str());
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_node(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Literal: return e.literal;
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List: case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item));
      return e.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value d = Value::dict();
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        Value key = eval(*e.items[k]);
        d.dict_data().set(key, eval(*e.items[k + 1]));
      }
      return d;
    }
    case ExprKind::GetAttr: return getattr(eval(*e.a), e.name);
    case ExprKind::GetItem: {
      Value obj = eval(*e.a);
      if (e.b->kind == ExprKind::Slice) {
        Value parts[3];
        for (int k = 0; k < 3; ++k) parts[k] = e.b->items[k] ? eval(*e.b->items[k]) : Value::none();
        if (obj.is_undefined()) fail_undefined(obj);
        return slice_value(obj, parts[0], parts[1], parts[2]);
      }
      return getitem(obj, eval(*e.b));
    }
    case ExprKind::Slice: return Value::undefined("slice outside of a subscript");
    case ExprKind::Call: return eval_call(e);
    case ExprKind::Filter: {
      Value input = eval(*e.a);
      CallArgs args;
      eval_args(e, args);
      return call_filter(e.name, input, args);
    }
    case ExprKind::Test: {
      Value input = eval(*e.a);
      CallArgs args;
      eval_args(e, args);
      return Value::boolean(call_test(e.name, input, args));
    }
    case ExprKind::Not: return Value::boolean(!truthy(eval(*e.a)));
    case ExprKind::Neg: case ExprKind::Pos: {
      Value v = eval(*e.a);
      if (v.is_undefined()) fail_undefined(v);
      const bool neg = e.kind == ExprKind::Neg;
      if (v.kind == Kind::Float) return Value::number(neg ? -v.f : v.f);
      if (v.is_int()) {
        if (neg && v.as_int() == INT64_MIN) fail(ErrorKind::Value, "integer overflow");
        return Value::integer(neg ? -v.as_int() : v.as_int());
      }
      fail(ErrorKind::Type, std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + type_name(v) + "'");
    }
    case ExprKind::Binary: {
      Value a = eval(*e.a);
      Value b = eval(*e.b);
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::And: {
      Value l = eval(*e.a);
      return truthy(l) ? eval(*e.b) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.a);
      return truthy(l) ? l : eval(*e.b);
    }
    case ExprKind::Concat: {
      std::vector<Value> parts;
      std::vector<std::string> converted;  // str() of the non-strings
      size_t total = 0;
      for (const auto& item : e.items) {
        parts.push_back(eval(*item));
        if (!parts.back().is_string()) converted.push_back(to_str(parts.back()));
        total += parts.back().is_string() ? parts.back().str().size() : converted.back().size();
      }
      charge(total);
      std::string s;
      s.reserve(total);
      size_t c = 0;
      for (const Value& part : parts) s += part.is_string() ? part.str() : converted[c++];
      return Value::string(std::move(s));
    }
    case ExprKind::Compare: return eval_compare(e);
    case ExprKind::CondExpr:
      if (truthy(eval(*e.a))) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value::undefined();
}

// A filter chain of a {% filter %} or {% set x | f %} block: the innermost input is `input`.
static Value eval_filter_chain(Interpreter& in, const Expr& e, const Value& input,
                               const std::function<void(const Expr&, CallArgs&)>& eval_args) {
  Value v = e.a ? eval_filter_chain(in, *e.a, input, eval_args) : input;
  CallArgs args;
  eval_args(e, args);
  return in.call_filter(e.name, v, args);
}

// ---- statements ------------------------------------------------------------------------------
Interpreter::Flow Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

std::string Interpreter::render_body(const Body& body, FramePtr frame) {
  FrameSwap swap(frame_, std::move(frame));
  std::string out;
  exec(body, out);
  return out;
}

void Interpreter::assign(const Expr& target, const Value& value) {
  if (target.kind == ExprKind::Name) {
    frame_->set(target.name, value);
  } else if (target.kind == ExprKind::Tuple) {
    std::vector<Value> items = iterate(value);
    const size_t want = target.items.size();
    if (items.size() < want)
      fail(ErrorKind::Value, "not enough values to unpack (expected " + std::to_string(want) + ", got " + std::to_string(items.size()) + ")");
    if (items.size() > want) fail(ErrorKind::Value, "too many values to unpack (expected " + std::to_string(want) + ")");
    for (size_t k = 0; k < want; ++k) assign(*target.items[k], items[k]);
  } else if (target.kind == ExprKind::GetAttr) {  // {% set ns.attr = value %}
    Value ns = lookup(target.a->name);
    if (ns.kind != Kind::Object || !ns.obj_data().assignable)
      fail(ErrorKind::Runtime, "cannot assign attribute on non-namespace object");
    ns.obj_data().attrs.set(Value::string(target.name), value);
  }
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, std::string& out) {
  NestGuard guard(*this);
  try {
    auto args_fn = [this](const Expr& e, CallArgs& a) { eval_args(e, a); };
    switch (s.kind) {
      case StmtKind::Text: append(out, s.text); break;
      case StmtKind::Output: append(out, to_str(eval(*s.expr))); break;
      case StmtKind::If:
        for (const auto& [test, body] : s.branches)
          if (truthy(eval(*test))) return exec(body, out);
        return exec(s.else_body, out);
      case StmtKind::For: exec_for(s, eval(*s.expr), 0, out); break;
      case StmtKind::Set: assign(*s.target, eval(*s.expr)); break;
      case StmtKind::SetBlock: {
        Value v = Value::string(render_body(s.body, child_frame(frame_)));
        if (s.expr) v = eval_filter_chain(*this, *s.expr, v, args_fn);
        assign(*s.target, v);
        break;
      }
      case StmtKind::Macro: frame_->set(s.name, define_macro(s, s.name, frame_)); break;
      case StmtKind::CallBlock: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.a);
        CallArgs args;
        eval_args(call_expr, args);
        args.kw.emplace_back("caller", define_macro(s, "caller", frame_));
        append(out, to_str(call(callee, args)));
        break;
      }
      case StmtKind::FilterBlock: {
        Value body = Value::string(render_body(s.body, child_frame(frame_)));
        append(out, to_str(eval_filter_chain(*this, *s.expr, body, args_fn)));
        break;
      }
      case StmtKind::With: {
        FramePtr f = child_frame(frame_);
        for (const auto& [name, expr] : s.params) f->set(name, eval(*expr));
        FrameSwap swap(frame_, f);
        return exec(s.body, out);
      }
      case StmtKind::Scope: {
        if (s.expr) eval(*s.expr);
        if (!s.new_frame) return exec(s.body, out);
        FrameSwap swap(frame_, child_frame(frame_));
        return exec(s.body, out);
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
  } catch (TemplateError& err) {
    locate(err, s.line, s.column);
    throw;
  }
  return Flow::Normal;
}

// What a for loop's `loop` variable shows; attributes are computed when a template reads them.
struct LoopState {
  std::vector<Value> items;
  int depth = 0;
  int value_depth = 1;  // of the loop object (it holds the items)
  NativeFn recurse;
  std::vector<Value> last_changed;
  bool has_changed = false;

  static bool attr(const std::shared_ptr<LoopState>& self, int64_t k, std::string_view name, Value* out) {
    const auto& items = self->items;
    const int64_t n = static_cast<int64_t>(items.size());
    const int depth = self->depth;
    if (name == "index0") *out = Value::integer(k);
    else if (name == "index") *out = Value::integer(k + 1);
    else if (name == "revindex") *out = Value::integer(n - k);
    else if (name == "revindex0") *out = Value::integer(n - k - 1);
    else if (name == "first") *out = Value::boolean(k == 0);
    else if (name == "last") *out = Value::boolean(k == n - 1);
    else if (name == "length") *out = Value::integer(n);
    else if (name == "depth") *out = Value::integer(depth + 1);
    else if (name == "depth0") *out = Value::integer(depth);
    else if (name == "previtem") *out = k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item");
    else if (name == "nextitem") *out = k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item");
    else if (name == "cycle")
      *out = Value::function("cycle", [k](Interpreter&, CallArgs& args) {
        if (args.pos.empty()) fail(ErrorKind::Type, "no items for cycling given");
        return args.pos[static_cast<size_t>(k) % args.pos.size()];
      });
    else if (name == "changed") {
      *out = Value::function("changed", [self](Interpreter&, CallArgs& args) {
        if (self->has_changed && py_equal(Value::tuple(args.pos), Value::tuple(self->last_changed))) return Value::boolean(false);
        self->last_changed = args.pos;
        self->has_changed = true;
        return Value::boolean(true);
      });
      out->fn_data().depth = self->value_depth;
    }
    else return false;
    return true;
  }
};

void Interpreter::exec_for(const Stmt& s, const Value& iterable, int depth, std::string& out) {
  std::vector<Value> items = iterate(iterable);
  const LiveBytes held(static_cast<int64_t>(items.size() * sizeof(Value)));  // nested loops each hold a copy
  const FramePtr outer = frame_;
  if (s.cond) {  // {% for x in xs if cond %}: filtered before the loop variables are computed
    std::vector<Value> kept;
    for (Value& item : items) {
      tick();
      FrameSwap swap(frame_, child_frame(outer));
      assign(*s.target, item);
      if (truthy(eval(*s.cond))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    FrameSwap swap(frame_, child_frame(outer));
    exec(s.else_body, out);
    return;
  }
  auto state = std::make_shared<LoopState>();
  state->items = std::move(items);
  state->depth = depth;
  const int64_t n = static_cast<int64_t>(state->items.size());
  const int loop_value_depth = 1 + max_depth_of(state->items);
  check_value_depth(loop_value_depth);
  state->value_depth = loop_value_depth;
  // A loop object kept past its loop (in a namespace) keeps the items, not what `changed` saw nor
  // the frame `loop()` recurses in: those could refer back to the loop object (a cycle).
  struct Release {
    LoopState& st;
    ~Release() {
      st.last_changed.clear();
      st.recurse = nullptr;
    }
  } release{*state};
  if (s.recursive) {
    if (call_depth_ + 1 > limits_.max_recursion) fail_recursion(limits_);
    state->recurse = [&s, depth, outer](Interpreter& in, CallArgs& args) {
      if (args.pos.size() != 1) fail(ErrorKind::Type, "loop() takes exactly one argument");
      struct DepthGuard {
        int& d;
        ~DepthGuard() { --d; }
      } guard{++in.call_depth_};
      if (in.call_depth_ > in.limits_.max_recursion) fail_recursion(in.limits_);
      FrameSwap swap(in.frame_, outer);
      std::string sub;
      in.exec_for(s, args.pos[0], depth + 1, sub);
      return Value::string(std::move(sub));
    };
  }
  for (int64_t k = 0; k < n; ++k) {
    tick(kFrameSteps);
    FrameSwap swap(frame_, child_frame(outer));
    assign(*s.target, state->items[static_cast<size_t>(k)]);
    auto loop = std::make_shared<ObjectData>();
    loop->type_name = "LoopContext";
    loop->depth = loop_value_depth;
    if (s.recursive)  // through the state: nothing once the loop has ended
      loop->callable = [state](Interpreter& in, CallArgs& args) {
        if (!state->recurse) fail(ErrorKind::Runtime, "loop() called after its loop ended");
        return state->recurse(in, args);
      };
    loop->lazy_attr = [state, k](std::string_view name, Value* out) { return LoopState::attr(state, k, name, out); };
    frame_->set("loop", Value::object(std::move(loop)));
    if (exec(s.body, out) == Flow::Break) break;
  }
}

}  // namespace kestrel::jinja
