// The tree-walking interpreter: frames (Jinja2 scoping: a for-loop iteration, a macro call, a
// with-block each get a new frame; if-blocks do not), statements, expressions, calls, and the
// resource limits (limits.h) that keep a hostile template from exhausting stack, memory or time.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/ast.h"

namespace kestrel::jinja {

struct Frame {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find_local(std::string_view name) const {
    for (const auto& kv : vars)
      if (kv.first == name) return &kv.second;
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(std::string(name), std::move(v));
  }
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  Interpreter(const DictData& globals, const Limits& limits, const std::tm& now);
  std::string render(const Body& body);

  // ---- for filters, tests, methods and globals --------------------------------------------
  Value call(const Value& callee, CallArgs& args);
  Value call_filter(std::string_view name, const Value& input, CallArgs& args);
  bool call_test(std::string_view name, const Value& input, CallArgs& args);
  Value getattr(const Value& obj, std::string_view name);   // obj.name (sandboxed)
  Value getitem(const Value& obj, const Value& key);        // obj[key] (sandboxed)
  // Before building a string (or list) of `bytes`: checks it against the limits (limits.h) and
  // counts the work of filling it.
  void charge(uint64_t bytes);
  // Counts n units of work (evaluations, loop iterations, items a builtin walks over).
  void tick(uint64_t n = 1) { count_work(n); }
  // namespace() objects are the only values a template can mutate, so the only way it can build
  // a reference cycle; the interpreter holds them and empties them when the render ends.
  void track_namespace(std::shared_ptr<ObjectData> ns) {
    count_live(kNamespaceBytes);  // held until the render ends
    namespaces_.push_back(std::move(ns));
  }
  static constexpr int64_t kNamespaceBytes = 512;
  const std::tm& now() const { return now_; }

 private:
  enum class Flow { Normal, Break, Continue };
  friend struct NestGuard;

  Value eval(const Expr& e);
  Value eval_node(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_compare(const Expr& e);
  void eval_args(const Expr& e, CallArgs& args);
  Value lookup(const std::string& name) const;
  Flow exec(const Body& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, const Value& iterable, int depth, std::string& out);
  void assign(const Expr& target, const Value& value);
  Value define_macro(const Stmt& s, const std::string& name, const FramePtr& closure);
  Value call_macro(const Stmt& m, const FramePtr& closure, CallArgs& args);
  std::string render_body(const Body& body, FramePtr frame);
  void append(std::string& out, std::string_view text);

  const DictData& globals_;
  Limits limits_;
  std::tm now_;
  FramePtr frame_;
  int call_depth_ = 0;
  int nesting_ = 0;
  Budget budget_;
  std::vector<std::shared_ptr<ObjectData>> namespaces_;
};

// Operators with Python semantics (operators.cpp).
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool py_contains(const Value& container, const Value& item);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Builtin registries (filters.cpp, tests.cpp, methods.cpp, globals.cpp).
using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// The bound method obj.name, an unsafe-undefined for mutating methods, or nullopt-like
// (returns false) when obj's type has no attribute of that name.
bool find_method(const Value& obj, std::string_view name, Value* out);
// range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
void add_builtin_globals(DictData& globals);

}  // namespace kestrel::jinja
