// A Chrome / Perfetto trace (the Trace Event Format: chrome://tracing and ui.perfetto.dev open
// it): spans of ops per thread, engine steps, scheduler decisions, speculative drafts and
// verifications. Off unless started: every hook then costs one relaxed atomic load and nothing
// else. On: each thread appends to its own buffer (no lock per event); write() gathers them.
#pragma once
#include <atomic>
#include <string>

#include "core/status.h"

namespace kestrel::trace {

extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// Starts recording (dropping anything recorded before).
void start();
// Stops recording and writes {"traceEvents": [...]} to path.
Status write(const std::string& path);
// Microseconds since start().
double now_us();

// A complete ("X") event from construction to destruction on this thread. `args` is a JSON
// object's text or empty. Spans of one thread nest, as the format wants.
class Span {
 public:
  Span(const char* cat, const char* name, std::string args = {}) {
    if (on()) begin(cat, name, std::move(args));
  }
  Span(const char* cat, const std::string& name, std::string args = {}) {
    if (on()) begin(cat, name, std::move(args));
  }
  ~Span() {
    if (active_) end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // Replaces the args, e.g. with what the span found out (written at the end).
  void set_args(std::string args) { args_ = std::move(args); }
  // Records nothing after all (an engine step that found no work).
  void drop() { active_ = false; }

 private:
  void begin(const char* cat, std::string name, std::string args);
  void end();
  bool active_ = false;
  const char* cat_ = nullptr;
  std::string name_, args_;
  double t0_ = 0;
};

// A span timed elsewhere (a GPU kernel's, between device events), on a track of its own named
// `track` ("cuda stream"): start and duration in microseconds on now_us()'s clock.
void device_span(const std::string& track, const char* cat, std::string name, double ts_us, double dur_us);

// An instant ("i") event on this thread.
void instant(const char* cat, const std::string& name, const std::string& args = {});
// Names this thread in the trace ("engine", "pool worker 1").
void thread_name(const std::string& name);

}  // namespace kestrel::trace
