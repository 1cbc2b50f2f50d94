// HttpServer's insides, shared by the event loop (http_server.cpp) and the workers
// (http_worker.cpp). Ownership of a connection: the loop's, except between dispatch() and the
// worker's give-back, when exactly one worker has it and the loop does not touch it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/http/http_parser.h"
#include "server/http/http_server.h"

namespace kestrel::server::http {

using Clock = std::chrono::steady_clock;

struct Conn {
  enum class State {
    kHead,    // waiting for (the rest of) a request head; deadline: header timeout
    kIdle,    // keep-alive, nothing received since the last reply; deadline: idle timeout
    kBody,    // reading the body; deadline: body timeout
    kLinger,  // an error reply sent (or sending), input drained until the peer closes or a deadline
    kWorker,  // a worker owns it: out of the epoll set
  };
  uint64_t id = 0;
  int fd = -1;
  std::string addr;       // remote address, without the port
  bool counted = true;    // counts towards the connection limits (refused ones do not)
  bool dead = false;      // closed; erased from the table after the current event
  State state = State::kHead;
  Clock::time_point deadline;
  uint32_t events = 0;    // epoll events registered (0: not in the set)
  std::string in;         // received and not yet used
  std::string out;        // written by the loop, not yet sent (100 Continue, error replies)
  bool shut_wr = false;
  size_t discarded = 0;   // bytes dropped while lingering
  RequestHead head;
  ChunkedDecoder chunks;
  std::string body;
  Request req;            // what the worker serves
};

struct HttpServer::Impl {
  explicit Impl(Limits l);
  ~Impl();

  Limits limits;
  // Set before run(); read-only while serving.
  std::map<std::string, std::vector<std::pair<std::string, Handler>>> routes;  // path -> (method, handler)
  std::function<bool(const Request&, Response&)> pre_routing;
  std::function<void(int, const std::string&, Response&)> error_formatter;
  std::vector<std::pair<std::string, std::string>> common_headers;
  ReplyDone on_reply;

  int listen_fd = -1, epoll_fd = -1, wake_fd = -1, spare_fd = -1;
  std::atomic<bool> stopping{false};

  // The loop thread's own.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, int> per_client;  // counted connections per remote address
  std::vector<uint64_t> dead_ids;
  int n_counted = 0, n_refused = 0, n_in_workers = 0;
  uint64_t next_id = 2;  // 0 and 1 are the listening socket and the wake-up eventfd
  std::vector<char> rbuf;
  bool fd_warning_shown = false;

  // Loop -> workers: complete requests. Workers -> loop: connections back (true: close it).
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Conn*> work;
  bool quit = false;
  std::mutex ret_mu;
  std::vector<std::pair<Conn*, bool>> returned;
  std::vector<std::thread> workers;

  // http_server.cpp: binding and the event loop.
  int bind(const std::string& host, int port, std::string* why);
  void run();
  void wake();
  void accept_all();
  void shed_one();
  template <class F>
  void guarded(Conn& c, F&& f);
  void on_event(Conn& c, uint32_t ev);
  void read_conn(Conn& c);
  void advance(Conn& c);
  void dispatch(Conn& c);
  void refuse(Conn& c, int status, const std::string& message);
  bool flush(Conn& c);
  void set_events(Conn& c, uint32_t ev);
  void close_conn(Conn& c);
  void take_returned();
  void sweep(Clock::time_point now);
  void begin_stop();
  void reap();

  // http_worker.cpp: serving one request on a worker thread.
  void worker_main();
  bool serve(Conn& c);  // true: keep the connection
  void handle(const Request& req, Response& res);
  // The layer's own error replies, through the error formatter (thread-safe: loop and workers).
  void error_reply(int status, const std::string& message, Response& res);
  // Adds the common headers the reply does not set itself.
  void decorate(Response& res) const;
  // Calls on_reply (if set), catching what it throws.
  void reply_done(const Request& req, const Response& res, bool complete);
};

}  // namespace kestrel::server::http
