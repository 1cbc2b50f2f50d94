#include "core/trace.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace kestrel::trace {

std::atomic<bool> g_on{false};

namespace {

struct Event {
  char ph;  // 'X' complete, 'i' instant, 'M' metadata
  const char* cat;
  std::string name, args;
  double ts, dur;
};

struct ThreadBuf {
  int tid = 0;
  uint64_t epoch = 0;  // the start() it belongs to
  std::vector<Event> events;
};

std::mutex g_mu;  // guards g_bufs and g_epoch's change
std::vector<std::shared_ptr<ThreadBuf>> g_bufs;
std::atomic<uint64_t> g_epoch{0};
std::atomic<int64_t> g_t0_ns{0};  // steady_clock at start()
thread_local std::shared_ptr<ThreadBuf> t_buf;

// This thread's buffer for the current recording (registered on first use).
ThreadBuf& buf() {
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (!t_buf || t_buf->epoch != epoch) {
    auto b = std::make_shared<ThreadBuf>();
    b->epoch = epoch;
    std::lock_guard<std::mutex> lock(g_mu);
    b->tid = static_cast<int>(g_bufs.size()) + 1;
    g_bufs.push_back(b);
    t_buf = b;
  }
  return *t_buf;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else out += static_cast<char>(c);
  }
  out += '"';
}

int64_t clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double now_us() { return static_cast<double>(clock_ns() - g_t0_ns.load(std::memory_order_relaxed)) / 1e3; }

void start() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_bufs.clear();
  g_t0_ns.store(clock_ns(), std::memory_order_relaxed);
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  g_on.store(true, std::memory_order_release);
}

Status write(const std::string& path) {
  g_on.store(false, std::memory_order_release);
  std::vector<std::shared_ptr<ThreadBuf>> bufs;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    bufs.swap(g_bufs);
    g_epoch.fetch_add(1, std::memory_order_acq_rel);  // late events go to buffers no one reads
  }
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  char num[128];
  for (const auto& b : bufs)
    for (const Event& e : b->events) {
      out += first ? "" : ",\n";
      first = false;
      out += "{\"ph\":\"";
      out += e.ph;
      out += "\",\"cat\":";
      json_string(out, e.cat ? e.cat : "");
      out += ",\"name\":";
      json_string(out, e.name);
      std::snprintf(num, sizeof num, ",\"pid\":1,\"tid\":%d,\"ts\":%.3f", b->tid, e.ts);
      out += num;
      if (e.ph == 'X') {
        std::snprintf(num, sizeof num, ",\"dur\":%.3f", e.dur);
        out += num;
      }
      if (e.ph == 'i') out += ",\"s\":\"t\"";
      if (!e.args.empty()) out += ",\"args\":" + e.args;
      out += "}";
    }
  out += "\n]}\n";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Error(KESTREL_ERR_IO, "trace: cannot write " + path);
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) return Error(KESTREL_ERR_IO, "trace: cannot write " + path);
  return Status::Ok();
}

void Span::begin(const char* cat, std::string name, std::string args) {
  active_ = true;
  cat_ = cat;
  name_ = std::move(name);
  args_ = std::move(args);
  t0_ = now_us();
}

void Span::end() {
  const double t1 = now_us();
  if (!on()) return;  // stopped meanwhile
  buf().events.push_back({'X', cat_, std::move(name_), std::move(args_), t0_, t1 - t0_});
}

void device_span(const std::string& track, const char* cat, std::string name, double ts_us, double dur_us) {
  if (!on()) return;
  static std::map<std::string, std::shared_ptr<ThreadBuf>> tracks;  // g_mu
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  std::shared_ptr<ThreadBuf>& b = tracks[track];
  if (!b || b->epoch != epoch) {  // the track's first span of this recording
    b = std::make_shared<ThreadBuf>();
    b->epoch = epoch;
    b->tid = static_cast<int>(g_bufs.size()) + 1;
    g_bufs.push_back(b);
    std::string args = "{\"name\":";
    json_string(args, track);
    b->events.push_back({'M', "", "thread_name", args + "}", 0, 0});
  }
  b->events.push_back({'X', cat, std::move(name), {}, ts_us, dur_us});
}

void instant(const char* cat, const std::string& name, const std::string& args) {
  if (on()) buf().events.push_back({'i', cat, name, args, now_us(), 0});
}

void thread_name(const std::string& name) {
  if (on()) {
    std::string args = "{\"name\":";
    json_string(args, name);
    args += "}";
    buf().events.push_back({'M', "", "thread_name", args, 0, 0});
  }
}

}  // namespace kestrel::trace
