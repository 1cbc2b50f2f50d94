// The C API under misuse: every public function of kestrel.h called with NULL handles, NULL
// out-pointers, NULL buffers with cap > 0, cap 0, negative or huge counts, out-of-range tokens,
// huge n_threads / n_ctx / n_batch and unset struct_size. Each case runs in a forked child, so a
// crash fails that case only and a hang is ended by alarm(); the child's exit code carries the
// kestrel_status the call returned, and the parent compares it with the documented one. Calls
// after free are not part of the contract and are not tried.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/sanitized.h"
#include "common/testdata.h"
#include "kestrel.h"

namespace {

constexpr kestrel_status OK = KESTREL_OK;
constexpr kestrel_status INVALID = KESTREL_ERR_INVALID_ARGUMENT;
constexpr kestrel_status RANGE = KESTREL_ERR_OUT_OF_RANGE;
constexpr kestrel_status SMALL = KESTREL_ERR_BUFFER_TOO_SMALL;
// A call whose documented result is not a status (void, counts): it returns kOk when it behaved
// as documented and kWrong otherwise.
constexpr kestrel_status kWrong = KESTREL_ERR_INTERNAL;
// A case that only has to return (any status, with a message when it failed).
constexpr int kAny = -1;

constexpr int kExitBase = 64;       // child exit code: kExitBase + status
constexpr int kExitNoMessage = 63;  // a failure without a kestrel_last_error() message

const char* kMessages = R"([{"role": "user", "content": "hi"}])";

// What a child works with: the model loaded by the parent (before fork, no threads running), and
// handles made on demand inside the child.
struct Env {
  kestrel_model* model = nullptr;
  kestrel_context* context(uint32_t n_ctx = 64) {
    if (!ctx_) {
      kestrel_context_options o;
      kestrel_context_options_init(&o);
      o.n_ctx = n_ctx;
      o.n_threads = 1;
      o.n_seq_max = 2;
      if (kestrel_context_new(model, &o, &ctx_) != OK) _exit(2);
    }
    return ctx_;
  }
  kestrel_engine* engine() {
    if (!engine_) {
      kestrel_engine_options o;
      kestrel_engine_options_init(&o);
      o.n_ctx = 128;
      o.n_parallel = 2;
      o.n_batch = 32;
      o.n_threads = 1;
      if (kestrel_engine_new(model, &o, &engine_) != OK) _exit(3);
    }
    return engine_;
  }
  kestrel_detokenizer* detok() {
    if (!detok_ && kestrel_detokenizer_new(model, false, &detok_) != OK) _exit(4);
    return detok_;
  }
  kestrel_sampler* sampler() {
    if (!sampler_ && kestrel_sampler_new(nullptr, &sampler_) != OK) _exit(5);
    return sampler_;
  }

 private:
  kestrel_context* ctx_ = nullptr;
  kestrel_engine* engine_ = nullptr;
  kestrel_detokenizer* detok_ = nullptr;
  kestrel_sampler* sampler_ = nullptr;
};

struct Case {
  std::string fn, what;
  int want;  // a kestrel_status, or kAny
  std::function<kestrel_status(Env&)> call;
};

kestrel_status expect(bool ok) { return ok ? OK : kWrong; }

// Runs c in a child; "" when it returned what it should, else what went wrong.
std::string run_case(const Case& c, kestrel_model* model) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) signal(sig, SIG_DFL);  // not doctest's handlers
    alarm(kestrel::test::kSanitized ? 60 : 15);
    Env env;
    env.model = model;
    const kestrel_status st = c.call(env);
    const bool message = st == OK || kestrel_last_error()[0] != '\0';
    _exit(message ? kExitBase + static_cast<int>(st) : kExitNoMessage);
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
  }
  if (WIFSIGNALED(ws))
    return WTERMSIG(ws) == SIGALRM ? "hung (killed by alarm)" : "crashed with signal " + std::to_string(WTERMSIG(ws));
  const int code = WEXITSTATUS(ws);
  if (code == kExitNoMessage) return "failed without a message in kestrel_last_error()";
  if (code < kExitBase) return "the child exited with code " + std::to_string(code) + " (setup failed or sanitizer)";
  const int got = code - kExitBase;
  if (c.want == kAny || got == c.want) return "";
  return std::string("returned ") + kestrel_status_name(static_cast<kestrel_status>(got)) + ", expected " +
         kestrel_status_name(static_cast<kestrel_status>(c.want));
}

using BufferFn = std::function<kestrel_status(Env&, char* buf, size_t cap, size_t* len)>;

// The (buf, cap, *len) convention, for one function: a NULL buffer with cap > 0 is refused, a
// sizing call (NULL, 0) succeeds, a short buffer says so, a good one works; *len where required.
void buffer_cases(std::vector<Case>& cs, const std::string& fn, bool len_required, const BufferFn& f) {
  cs.push_back({fn, "NULL buf, cap 64", INVALID, [f](Env& e) {
                  size_t len = 0;
                  return f(e, nullptr, 64, &len);
                }});
  cs.push_back({fn, "NULL buf, cap SIZE_MAX", INVALID, [f](Env& e) {
                  size_t len = 0;
                  return f(e, nullptr, SIZE_MAX, &len);
                }});
  cs.push_back({fn, "sizing call (NULL, 0)", OK, [f](Env& e) {
                  size_t len = 0;
                  return f(e, nullptr, 0, &len);
                }});
  cs.push_back({fn, "buffer of 1 byte", kAny, [f](Env& e) {
                  char b[1] = {'x'};
                  size_t len = 0;
                  const kestrel_status st = f(e, b, 1, &len);
                  if (st == OK) return expect(len == 0 && b[0] == '\0');
                  return st == SMALL ? expect(len > 0) : st;
                }});
  cs.push_back({fn, "buffer large enough", OK, [f](Env& e) {
                  std::vector<char> b(1 << 16, 'x');
                  size_t len = SIZE_MAX;
                  const kestrel_status st = f(e, b.data(), b.size(), &len);
                  return st == OK ? expect(len < b.size() && b[len] == '\0') : st;
                }});
  cs.push_back({fn, len_required ? "NULL len" : "NULL len with a buffer", len_required ? INVALID : OK, [f](Env& e) {
                  char b[1 << 14];
                  return f(e, b, sizeof b, nullptr);
                }});
}

void model_cases(std::vector<Case>& cs, const std::string& path) {
  auto load = [path](kestrel_model_options* o) {
    kestrel_model* m = nullptr;
    const kestrel_status st = kestrel_model_load(path.c_str(), o, &m);
    kestrel_model_free(m);
    return st;
  };
  auto with_threads = [load](int32_t n) {
    return [load, n](Env&) {
      kestrel_model_options o;
      kestrel_model_options_init(&o);
      o.n_threads = n;
      return load(&o);
    };
  };
  const std::string F = "kestrel_model_load";
  cs.push_back({F, "NULL path", INVALID, [](Env&) {
                  kestrel_model* m = nullptr;
                  return kestrel_model_load(nullptr, nullptr, &m);
                }});
  cs.push_back({F, "NULL out", INVALID, [path](Env&) { return kestrel_model_load(path.c_str(), nullptr, nullptr); }});
  cs.push_back({F, "empty path", KESTREL_ERR_IO, [](Env&) {
                  kestrel_model* m = nullptr;
                  return kestrel_model_load("", nullptr, &m);
                }});
  cs.push_back({F, "a directory", kAny, [](Env&) {
                  kestrel_model* m = nullptr;
                  return kestrel_model_load("/", nullptr, &m);
                }});
  for (uint32_t size : {0u, 2u, 1u << 20}) {
    cs.push_back({F, "struct_size " + std::to_string(size), INVALID, [load, size](Env&) {
                    kestrel_model_options o;
                    kestrel_model_options_init(&o);
                    o.struct_size = size;
                    return load(&o);
                  }});
  }
  cs.push_back({F, "unknown backend", INVALID, [load](Env&) {
                  kestrel_model_options o;
                  kestrel_model_options_init(&o);
                  o.backend = "no-such-backend";
                  return load(&o);
                }});
  for (int32_t n : {100000, 1025, -1, INT32_MIN, INT32_MAX})
    cs.push_back({F, "n_threads " + std::to_string(n), INVALID, with_threads(n)});
  cs.push_back({F, "progress cancels", KESTREL_ERR_CANCELLED, [load](Env&) {
                  kestrel_model_options o;
                  kestrel_model_options_init(&o);
                  o.progress = [](float, void*) { return false; };
                  return load(&o);
                }});
  cs.push_back({"kestrel_model_free", "NULL", OK, [](Env&) {
                  kestrel_model_free(nullptr);
                  return OK;
                }});
  cs.push_back({"kestrel_model_options_init", "NULL", OK, [](Env&) {
                  kestrel_model_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({"kestrel_model_describe", "NULL model", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_model_describe(nullptr, b, sizeof b, &len);
                }});
  cs.push_back({"kestrel_model_describe", "NULL buf, cap 0, NULL len", INVALID,
                [](Env& e) { return kestrel_model_describe(e.model, nullptr, 0, nullptr); }});
  buffer_cases(cs, "kestrel_model_describe", false,
               [](Env& e, char* b, size_t cap, size_t* len) { return kestrel_model_describe(e.model, b, cap, len); });
  cs.push_back({"kestrel_model_n_vocab", "NULL", OK, [](Env&) { return expect(kestrel_model_n_vocab(nullptr) == 0); }});
  cs.push_back({"kestrel_model_n_ctx_train", "NULL", OK,
                [](Env&) { return expect(kestrel_model_n_ctx_train(nullptr) == 0); }});
  cs.push_back({"kestrel_model_token_bos", "NULL", OK, [](Env&) { return expect(kestrel_model_token_bos(nullptr) == -1); }});
  cs.push_back({"kestrel_model_token_eos", "NULL", OK, [](Env&) { return expect(kestrel_model_token_eos(nullptr) == -1); }});
  cs.push_back({"kestrel_model_token_is_eog", "NULL model", OK,
                [](Env&) { return expect(!kestrel_model_token_is_eog(nullptr, 2)); }});
  for (int32_t t : {-1, 512, INT32_MAX, INT32_MIN})
    cs.push_back({"kestrel_model_token_is_eog", "token " + std::to_string(t), OK,
                  [t](Env& e) { return expect(!kestrel_model_token_is_eog(e.model, t)); }});
}

void tokenizer_cases(std::vector<Case>& cs) {
  const std::string T = "kestrel_tokenize";
  cs.push_back({T, "NULL model", INVALID, [](Env&) {
                  kestrel_token t[4];
                  size_t n = 0;
                  return kestrel_tokenize(nullptr, "a", 1, false, false, t, 4, &n);
                }});
  cs.push_back({T, "NULL text, length 5", INVALID, [](Env& e) {
                  kestrel_token t[4];
                  size_t n = 0;
                  return kestrel_tokenize(e.model, nullptr, 5, false, false, t, 4, &n);
                }});
  cs.push_back({T, "NULL text, length 0", OK, [](Env& e) {
                  size_t n = 7;
                  const kestrel_status st = kestrel_tokenize(e.model, nullptr, 0, false, false, nullptr, 0, &n);
                  return st == OK ? expect(n == 0) : st;
                }});
  cs.push_back({T, "NULL n_tokens", INVALID, [](Env& e) {
                  kestrel_token t[4];
                  return kestrel_tokenize(e.model, "a", 1, false, false, t, 4, nullptr);
                }});
  cs.push_back({T, "NULL tokens, cap 64", INVALID, [](Env& e) {
                  size_t n = 0;
                  return kestrel_tokenize(e.model, "Once upon", 9, true, false, nullptr, 64, &n);
                }});
  cs.push_back({T, "cap 1", SMALL, [](Env& e) {
                  kestrel_token t[1];
                  size_t n = 0;
                  return kestrel_tokenize(e.model, "Once upon a time", 16, true, false, t, 1, &n);
                }});
  cs.push_back({T, "invalid UTF-8 text", OK, [](Env& e) {
                  kestrel_token t[64];
                  size_t n = 0;
                  return kestrel_tokenize(e.model, "\xff\xfe\xc0\x80\xed\xa0\x80", 7, true, true, t, 64, &n);
                }});

  const std::string D = "kestrel_detokenize";
  static const kestrel_token good[] = {403, 407};
  cs.push_back({D, "NULL model", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_detokenize(nullptr, good, 2, false, b, sizeof b, &len);
                }});
  cs.push_back({D, "NULL tokens, n 3", INVALID, [](Env& e) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_detokenize(e.model, nullptr, 3, false, b, sizeof b, &len);
                }});
  cs.push_back({D, "NULL tokens, n SIZE_MAX", INVALID, [](Env& e) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_detokenize(e.model, nullptr, SIZE_MAX, false, b, sizeof b, &len);
                }});
  for (kestrel_token t : {512, -1, INT32_MIN, INT32_MAX})
    cs.push_back({D, "token " + std::to_string(t), RANGE, [t](Env& e) {
                    char b[16];
                    size_t len = 0;
                    return kestrel_detokenize(e.model, &t, 1, false, b, sizeof b, &len);
                  }});
  buffer_cases(cs, D, false, [](Env& e, char* b, size_t cap, size_t* len) {
    return kestrel_detokenize(e.model, good, 2, false, b, cap, len);
  });

  const std::string P = "kestrel_token_to_piece";
  cs.push_back({P, "NULL model", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_token_to_piece(nullptr, 403, false, b, sizeof b, &len);
                }});
  for (kestrel_token t : {512, -1, INT32_MIN})
    cs.push_back({P, "token " + std::to_string(t), RANGE, [t](Env& e) {
                    char b[16];
                    size_t len = 0;
                    return kestrel_token_to_piece(e.model, t, false, b, sizeof b, &len);
                  }});
  buffer_cases(cs, P, true, [](Env& e, char* b, size_t cap, size_t* len) {
    return kestrel_token_to_piece(e.model, 403, false, b, cap, len);
  });
}

void detokenizer_cases(std::vector<Case>& cs) {
  cs.push_back({"kestrel_detokenizer_new", "NULL model", INVALID, [](Env&) {
                  kestrel_detokenizer* d = nullptr;
                  return kestrel_detokenizer_new(nullptr, false, &d);
                }});
  cs.push_back({"kestrel_detokenizer_new", "NULL out", INVALID,
                [](Env& e) { return kestrel_detokenizer_new(e.model, false, nullptr); }});
  cs.push_back({"kestrel_detokenizer_free", "NULL", OK, [](Env&) {
                  kestrel_detokenizer_free(nullptr);
                  return OK;
                }});
  const std::string P = "kestrel_detokenizer_push";
  cs.push_back({P, "NULL detokenizer", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_detokenizer_push(nullptr, 403, b, sizeof b, &len);
                }});
  for (kestrel_token t : {512, -2, INT32_MIN, INT32_MAX})
    cs.push_back({P, "token " + std::to_string(t), RANGE, [t](Env& e) {
                    char b[16];
                    size_t len = 0;
                    return kestrel_detokenizer_push(e.detok(), t, b, sizeof b, &len);
                  }});
  cs.push_back({P, "token -1 (drain only)", OK, [](Env& e) {
                  char b[16];
                  size_t len = 7;
                  const kestrel_status st = kestrel_detokenizer_push(e.detok(), -1, b, sizeof b, &len);
                  return st == OK ? expect(len == 0) : st;
                }});
  buffer_cases(cs, P, true, [](Env& e, char* b, size_t cap, size_t* len) {
    return kestrel_detokenizer_push(e.detok(), 403, b, cap, len);
  });
  // A refused call leaves the detokenizer as it was: the same push then gives the text once.
  cs.push_back({P, "a refused call (NULL buf, cap 8) loses nothing", OK, [](Env& e) {
                  size_t len = 0;
                  if (kestrel_detokenizer_push(e.detok(), 403, nullptr, 8, &len) != INVALID) return kWrong;
                  char b[64];
                  const kestrel_status st = kestrel_detokenizer_push(e.detok(), 403, b, sizeof b, &len);
                  return st == OK ? expect(std::string(b, len) == " Once") : st;
                }});
  cs.push_back({P, "a short buffer keeps the text for the next call", OK, [](Env& e) {
                  char b[64];
                  size_t len = 0;
                  if (kestrel_detokenizer_push(e.detok(), 403, b, 2, &len) != SMALL) return kWrong;
                  const kestrel_status st = kestrel_detokenizer_push(e.detok(), -1, b, sizeof b, &len);
                  return st == OK ? expect(std::string(b, len) == " Once") : st;
                }});
  const std::string F = "kestrel_detokenizer_flush";
  cs.push_back({F, "NULL detokenizer", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_detokenizer_flush(nullptr, b, sizeof b, &len);
                }});
  buffer_cases(cs, F, true,
               [](Env& e, char* b, size_t cap, size_t* len) { return kestrel_detokenizer_flush(e.detok(), b, cap, len); });
}

// A reply parser over the model's template (kestrel_reply_parser_*), for the cases below.
kestrel_reply_parser* reply_parser(Env& e, const char* choice = nullptr) {
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.tools_json = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
  kestrel_reply_parser* p = nullptr;
  if (kestrel_reply_parser_new(e.model, &o, "", choice, 0, &p) != OK) _exit(2);
  return p;
}

void reply_cases(std::vector<Case>& cs) {
  const std::string N = "kestrel_reply_parser_new";
  cs.push_back({N, "NULL out", INVALID, [](Env& e) { return kestrel_reply_parser_new(e.model, nullptr, "", nullptr, 0, nullptr); }});
  cs.push_back({N, "NULL model and no template", INVALID, [](Env&) {
                  kestrel_reply_parser* p = nullptr;
                  return kestrel_reply_parser_new(nullptr, nullptr, "", nullptr, 0, &p);
                }});
  cs.push_back({N, "unknown flags", INVALID, [](Env& e) {
                  kestrel_reply_parser* p = nullptr;
                  return kestrel_reply_parser_new(e.model, nullptr, "", nullptr, 0x80, &p);
                }});
  cs.push_back({N, "required without tools", INVALID, [](Env& e) {
                  kestrel_reply_parser* p = nullptr;
                  return kestrel_reply_parser_new(e.model, nullptr, nullptr, "required", 0, &p);
                }});
  cs.push_back({N, "struct_size 0", INVALID, [](Env& e) {
                  kestrel_chat_options o;
                  kestrel_chat_options_init(&o);
                  o.struct_size = 0;
                  kestrel_reply_parser* p = nullptr;
                  return kestrel_reply_parser_new(e.model, &o, "", nullptr, 0, &p);
                }});
  for (const char* bad : {"", "{", "{\"a\": 1}", "\xff"})
    cs.push_back({N, std::string("tools '") + bad + "'", INVALID, [bad](Env& e) {
                    kestrel_chat_options o;
                    kestrel_chat_options_init(&o);
                    o.tools_json = bad;
                    kestrel_reply_parser* p = nullptr;
                    return kestrel_reply_parser_new(e.model, &o, "", nullptr, 0, &p);
                  }});
  cs.push_back({"kestrel_reply_parser_free", "NULL", OK, [](Env&) {
                  kestrel_reply_parser_free(nullptr);
                  return OK;
                }});
  const std::string G = "kestrel_reply_parser_grammar";
  cs.push_back({G, "NULL parser", INVALID, [](Env&) {
                  size_t len = 0;
                  return kestrel_reply_parser_grammar(nullptr, nullptr, 0, &len);
                }});
  buffer_cases(cs, G, true, [](Env& e, char* b, size_t cap, size_t* len) {
    return kestrel_reply_parser_grammar(reply_parser(e, "required"), b, cap, len);
  });
  const std::string P = "kestrel_reply_parser_push";
  cs.push_back({P, "NULL parser", INVALID, [](Env&) {
                  char b[64];
                  size_t len = 0;
                  return kestrel_reply_parser_push(nullptr, "x", 1, false, b, sizeof b, &len);
                }});
  cs.push_back({P, "NULL text, length 3", INVALID, [](Env& e) {
                  char b[64];
                  size_t len = 0;
                  return kestrel_reply_parser_push(reply_parser(e), nullptr, 3, false, b, sizeof b, &len);
                }});
  cs.push_back({P, "after final", INVALID, [](Env& e) {
                  kestrel_reply_parser* p = reply_parser(e);
                  char b[64];
                  size_t len = 0;
                  if (kestrel_reply_parser_push(p, "a", 1, true, b, sizeof b, &len) != OK) return kWrong;
                  return kestrel_reply_parser_push(p, "b", 1, false, b, sizeof b, &len);
                }});
  cs.push_back({P, "invalid UTF-8 and NULs in the text", OK, [](Env& e) {
                  char b[256];
                  size_t len = 0;
                  const char text[] = "\xff\xfe<tool_call>\0{\"name\"";
                  return kestrel_reply_parser_push(reply_parser(e), text, sizeof text - 1, true, b, sizeof b, &len);
                }});
  buffer_cases(cs, P, true, [](Env& e, char* b, size_t cap, size_t* len) {
    return kestrel_reply_parser_push(reply_parser(e), "hello", 5, true, b, cap, len);
  });
}

void chat_cases(std::vector<Case>& cs) {
  const std::string C = "kestrel_chat_format";
  cs.push_back({"kestrel_chat_options_init", "NULL", OK, [](Env&) {
                  kestrel_chat_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({C, "NULL messages", INVALID, [](Env& e) {
                  char b[256];
                  size_t len = 0;
                  return kestrel_chat_format(e.model, nullptr, nullptr, b, sizeof b, &len);
                }});
  cs.push_back({C, "NULL model and no template", INVALID, [](Env&) {
                  char b[256];
                  size_t len = 0;
                  return kestrel_chat_format(nullptr, kMessages, nullptr, b, sizeof b, &len);
                }});
  cs.push_back({C, "struct_size 0", INVALID, [](Env& e) {
                  kestrel_chat_options o;
                  kestrel_chat_options_init(&o);
                  o.struct_size = 0;
                  char b[256];
                  size_t len = 0;
                  return kestrel_chat_format(e.model, kMessages, &o, b, sizeof b, &len);
                }});
  for (const char* bad : {"", "{", "{\"role\": \"user\"}", "[1, 2", "\xff"})
    cs.push_back({C, std::string("messages '") + bad + "'", INVALID, [bad](Env& e) {
                    char b[256];
                    size_t len = 0;
                    return kestrel_chat_format(e.model, bad, nullptr, b, sizeof b, &len);
                  }});
  cs.push_back({C, "100000-deep nested messages", kAny, [](Env& e) {
                  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
                  char b[256];
                  size_t len = 0;
                  return kestrel_chat_format(e.model, deep.c_str(), nullptr, b, sizeof b, &len);
                }});
  buffer_cases(cs, C, true, [](Env& e, char* b, size_t cap, size_t* len) {
    kestrel_chat_options o;
    kestrel_chat_options_init(&o);
    o.template_source = "{{ messages[0]['content'] }}";
    return kestrel_chat_format(e.model, kMessages, &o, b, cap, len);
  });

  reply_cases(cs);
  const std::string T = "kestrel_chat_tokenize";
  cs.push_back({T, "NULL model", INVALID, [](Env&) {
                  kestrel_token t[8];
                  size_t n = 0;
                  return kestrel_chat_tokenize(nullptr, "<s>hi", 5, t, 8, &n);
                }});
  cs.push_back({T, "NULL text, length 5", INVALID, [](Env& e) {
                  kestrel_token t[8];
                  size_t n = 0;
                  return kestrel_chat_tokenize(e.model, nullptr, 5, t, 8, &n);
                }});
  cs.push_back({T, "NULL text, length 0", OK, [](Env& e) {
                  kestrel_token t[8];
                  size_t n = 0;
                  const kestrel_status st = kestrel_chat_tokenize(e.model, nullptr, 0, t, 8, &n);
                  return st == OK ? expect(n == 1 && t[0] == kestrel_model_token_bos(e.model)) : st;  // BOS only
                }});
  cs.push_back({T, "NULL n_tokens", INVALID, [](Env& e) {
                  kestrel_token t[8];
                  return kestrel_chat_tokenize(e.model, "<s>hi", 5, t, 8, nullptr);
                }});
  cs.push_back({T, "NULL tokens, cap 64", INVALID, [](Env& e) {
                  size_t n = 0;
                  return kestrel_chat_tokenize(e.model, "<s>hi", 5, nullptr, 64, &n);
                }});
  cs.push_back({T, "sizing call (NULL, 0)", SMALL, [](Env& e) {
                  size_t n = 0;
                  const kestrel_status st = kestrel_chat_tokenize(e.model, "<s>Once upon", 12, nullptr, 0, &n);
                  return st == SMALL && n < 2 ? kWrong : st;
                }});
  cs.push_back({T, "cap 1", SMALL, [](Env& e) {
                  kestrel_token t[1];
                  size_t n = 0;
                  return kestrel_chat_tokenize(e.model, "<s>Once upon a time", 19, t, 1, &n);
                }});
  cs.push_back({T, "invalid UTF-8 text", OK, [](Env& e) {
                  kestrel_token t[64];
                  size_t n = 0;
                  return kestrel_chat_tokenize(e.model, "\xff\xfe\xc0\x80\xed\xa0\x80", 7, t, 64, &n);
                }});
  cs.push_back({T, "text of BOS texts only", OK, [](Env& e) {
                  kestrel_token t[8];
                  size_t n = 0;
                  const kestrel_status st = kestrel_chat_tokenize(e.model, "<s><s>", 6, t, 8, &n);
                  return st == OK ? expect(n == 2) : st;  // one of the three BOS dropped
                }});
}

// n_ctx / n_batch / n_seq_max / n_threads: every out-of-range value refused with a message.
void context_cases(std::vector<Case>& cs) {
  const std::string N = "kestrel_context_new";
  cs.push_back({"kestrel_context_options_init", "NULL", OK, [](Env&) {
                  kestrel_context_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({N, "NULL model", INVALID, [](Env&) {
                  kestrel_context* c = nullptr;
                  return kestrel_context_new(nullptr, nullptr, &c);
                }});
  cs.push_back({N, "NULL out", INVALID, [](Env& e) { return kestrel_context_new(e.model, nullptr, nullptr); }});
  auto make = [](std::function<void(kestrel_context_options&)> set) {
    return [set](Env& e) {
      kestrel_context_options o;
      kestrel_context_options_init(&o);
      o.n_ctx = 64;
      o.n_threads = 1;
      set(o);
      kestrel_context* c = nullptr;
      const kestrel_status st = kestrel_context_new(e.model, &o, &c);
      kestrel_context_free(c);
      return st;
    };
  };
  cs.push_back({N, "struct_size 0", INVALID, make([](kestrel_context_options& o) { o.struct_size = 0; })});
  for (uint32_t n : {0xFFFFFFFFu, 0x80000000u, (1u << 24) + 1})
    cs.push_back({N, "n_ctx " + std::to_string(n), INVALID, make([n](kestrel_context_options& o) { o.n_ctx = n; })});
  for (uint32_t n : {0xFFFFFFFFu, 0x80000000u, (1u << 20) + 1})
    cs.push_back({N, "n_batch " + std::to_string(n), INVALID, make([n](kestrel_context_options& o) { o.n_batch = n; })});
  for (uint32_t n : {0u, 65u, 0xFFFFFFFFu})
    cs.push_back({N, "n_seq_max " + std::to_string(n), INVALID, make([n](kestrel_context_options& o) { o.n_seq_max = n; })});
  for (int32_t n : {100000, 1025, -1, INT32_MIN, INT32_MAX})
    cs.push_back({N, "n_threads " + std::to_string(n), INVALID, make([n](kestrel_context_options& o) { o.n_threads = n; })});
  cs.push_back({N, "a vocabulary-only model", INVALID, [](Env&) {
                  kestrel_model_options mo;
                  kestrel_model_options_init(&mo);
                  mo.vocab_only = true;
                  kestrel_model* m = nullptr;
                  if (kestrel_model_load(kestrel::test::testdata_file("models/stories260K-f32.gguf").c_str(), &mo, &m) != OK)
                    return kWrong;
                  kestrel_context* c = nullptr;
                  return kestrel_context_new(m, nullptr, &c);
                }});
  for (int v : {5, -1, 1000})
    cs.push_back({N, "kv_type " + std::to_string(v), INVALID,
                  make([v](kestrel_context_options& o) { o.kv_type = v; })});
  for (int v : {5, -2, 1000})
    cs.push_back({N, "kv_type_v " + std::to_string(v), INVALID,
                  make([v](kestrel_context_options& o) { o.kv_type_v = v; })});
  cs.push_back({N, "kv_type F8_E4M3 (fine)", OK, make([](kestrel_context_options& o) { o.kv_type = KESTREL_KV_F8_E4M3; })});
  cs.push_back({N, "kv_type Q8_0, kv_type_v Q4_0 (fine)", OK, make([](kestrel_context_options& o) {
                  o.kv_type = KESTREL_KV_Q8_0;
                  o.kv_type_v = KESTREL_KV_Q4_0;
                })});
  // A caller built against API version 8 (no kv_type_v): the bytes past its struct_size are not read.
  cs.push_back({N, "API 8 struct_size, garbage after it (fine)", OK, make([](kestrel_context_options& o) {
                  o.struct_size = offsetof(kestrel_context_options, kv_type_v);
                  o.kv_type_v = 77;
                })});
  cs.push_back({N, "kv_type F32 (fine)", OK, make([](kestrel_context_options& o) { o.kv_type = KESTREL_KV_F32; })});
  // A caller built against API version 4 (no kv_type): the bytes past its struct_size are not read.
  cs.push_back({N, "API 4 struct_size, garbage after it (fine)", OK, make([](kestrel_context_options& o) {
                  o.struct_size = offsetof(kestrel_context_options, kv_type);
                  o.kv_type = 77;
                })});
  cs.push_back({N, "n_threads 2 (fine)", OK, make([](kestrel_context_options& o) { o.n_threads = 2; })});
  cs.push_back({"kestrel_context_free", "NULL", OK, [](Env&) {
                  kestrel_context_free(nullptr);
                  return OK;
                }});
  cs.push_back({"kestrel_context_n_ctx", "NULL", OK, [](Env&) { return expect(kestrel_context_n_ctx(nullptr) == 0); }});
  cs.push_back({"kestrel_context_backend", "NULL", OK,
                [](Env&) { return expect(std::string(kestrel_context_backend(nullptr)).empty()); }});
  cs.push_back({"kestrel_context_set_profiling", "NULL", INVALID,
                [](Env&) { return kestrel_context_set_profiling(nullptr, true); }});
  cs.push_back({"kestrel_context_profile", "NULL ctx", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_context_profile(nullptr, false, b, sizeof b, &len);
                }});
  buffer_cases(cs, "kestrel_context_profile", true,
               [](Env& e, char* b, size_t cap, size_t* len) { return kestrel_context_profile(e.context(), false, b, cap, len); });
}

void decode_cases(std::vector<Case>& cs) {
  const std::string D = "kestrel_decode";
  // n_tokens: the number of tokens unless given.
  auto decode = [](std::vector<kestrel_token> toks, std::vector<int32_t> pos, std::vector<int32_t> seq,
                   std::optional<int32_t> n = std::nullopt) {
    return [=](Env& e) {
      kestrel_batch b{n ? *n : static_cast<int32_t>(toks.size()), toks.empty() ? nullptr : toks.data(),
                      pos.empty() ? nullptr : pos.data(), seq.empty() ? nullptr : seq.data(), nullptr};
      return kestrel_decode(e.context(), &b);
    };
  };
  cs.push_back({D, "NULL ctx", INVALID, [](Env&) {
                  const kestrel_token t = 1;
                  kestrel_batch b{1, &t, nullptr, nullptr, nullptr};
                  return kestrel_decode(nullptr, &b);
                }});
  cs.push_back({D, "NULL batch", INVALID, [](Env& e) { return kestrel_decode(e.context(), nullptr); }});
  cs.push_back({D, "n_tokens 0", INVALID, decode({1}, {}, {}, 0)});
  cs.push_back({D, "n_tokens -5", INVALID, decode({1}, {}, {}, -5)});
  cs.push_back({D, "NULL tokens, n_tokens 3", INVALID, decode({}, {}, {}, 3)});
  for (kestrel_token t : {512, -1, INT32_MIN})
    cs.push_back({D, "token " + std::to_string(t), RANGE, decode({1, t}, {}, {})});
  for (int32_t s : {2, -1, INT32_MAX})
    cs.push_back({D, "seq id " + std::to_string(s), RANGE, decode({1}, {}, {s})});
  cs.push_back({D, "negative position", INVALID, decode({1}, {-3}, {})});
  cs.push_back({D, "more tokens than n_ctx", KESTREL_ERR_CONTEXT_FULL, decode(std::vector<kestrel_token>(65, 5), {}, {})});
  // After a token at the largest position, the next implicit position must not overflow.
  cs.push_back({D, "position INT32_MAX, then the next one", kAny, [decode](Env& e) {
                  const kestrel_status st = decode({1}, {INT32_MAX}, {})(e);
                  if (st != OK) return st;
                  return decode({1}, {}, {})(e);
                }});
  const std::string L = "kestrel_get_logits";
  cs.push_back({L, "NULL ctx", INVALID, [](Env&) {
                  const float* l = nullptr;
                  return kestrel_get_logits(nullptr, 0, &l, nullptr);
                }});
  cs.push_back({L, "NULL logits", INVALID, [](Env& e) { return kestrel_get_logits(e.context(), 0, nullptr, nullptr); }});
  for (int32_t i : {1, -2, INT32_MIN, INT32_MAX})
    cs.push_back({L, "row " + std::to_string(i) + " after a 1-token decode", RANGE, [decode, i](Env& e) {
                    if (decode({1}, {}, {})(e) != OK) return kWrong;
                    const float* l = nullptr;
                    return kestrel_get_logits(e.context(), i, &l, nullptr);
                  }});
  cs.push_back({L, "before any decode", RANGE, [](Env& e) {
                  const float* l = nullptr;
                  return kestrel_get_logits(e.context(), 0, &l, nullptr);
                }});
}

void kv_cases(std::vector<Case>& cs) {
  cs.push_back({"kestrel_kv_seq_remove", "NULL ctx", INVALID, [](Env&) { return kestrel_kv_seq_remove(nullptr, 0, 0, -1); }});
  for (int32_t s : {7, INT32_MAX, INT32_MIN})
    cs.push_back({"kestrel_kv_seq_remove", "seq " + std::to_string(s), kAny,
                  [s](Env& e) { return kestrel_kv_seq_remove(e.context(), s, INT32_MIN, INT32_MIN); }});
  cs.push_back({"kestrel_kv_seq_copy", "NULL ctx", INVALID, [](Env&) { return kestrel_kv_seq_copy(nullptr, 0, 1, 0, -1); }});
  for (int32_t s : {2, -1, INT32_MAX})
    cs.push_back({"kestrel_kv_seq_copy", "dst " + std::to_string(s), INVALID,
                  [s](Env& e) { return kestrel_kv_seq_copy(e.context(), 0, s, 0, -1); }});
  cs.push_back({"kestrel_kv_seq_keep", "NULL ctx", INVALID, [](Env&) { return kestrel_kv_seq_keep(nullptr, 0); }});
  for (int32_t s : {2, -1, INT32_MAX})
    cs.push_back({"kestrel_kv_seq_keep", "seq " + std::to_string(s), RANGE,
                  [s](Env& e) { return kestrel_kv_seq_keep(e.context(), s); }});
  cs.push_back({"kestrel_kv_seq_pos_max", "NULL ctx", OK, [](Env&) { return expect(kestrel_kv_seq_pos_max(nullptr, 0) == -1); }});
  for (int32_t s : {2, -1, INT32_MIN})
    cs.push_back({"kestrel_kv_seq_pos_max", "seq " + std::to_string(s), OK,
                  [s](Env& e) { return expect(kestrel_kv_seq_pos_max(e.context(), s) == -1); }});
  cs.push_back({"kestrel_kv_clear", "NULL", OK, [](Env&) {
                  kestrel_kv_clear(nullptr);
                  return OK;
                }});
}

void embed_cases(std::vector<Case>& cs) {
  const std::string F = "kestrel_embed";
  static const kestrel_token kTok[3] = {1, 5, 9};
  static const int32_t kLen[2] = {2, 1};
  cs.push_back({F, "NULL ctx", INVALID, [](Env&) {
                  float o[8];
                  size_t n = 0;
                  return kestrel_embed(nullptr, kTok, kLen, 2, KESTREL_POOLING_MEAN, true, o, 8, &n);
                }});
  cs.push_back({F, "NULL lengths", INVALID, [](Env& e) {
                  float o[8];
                  size_t n = 0;
                  return kestrel_embed(e.context(), kTok, nullptr, 2, KESTREL_POOLING_MEAN, true, o, 8, &n);
                }});
  cs.push_back({F, "n_inputs -1", INVALID, [](Env& e) {
                  float o[8];
                  size_t n = 0;
                  return kestrel_embed(e.context(), kTok, kLen, -1, KESTREL_POOLING_MEAN, true, o, 8, &n);
                }});
  cs.push_back({F, "pooling 9", INVALID, [](Env& e) {
                  float o[8];
                  size_t n = 0;
                  return kestrel_embed(e.context(), kTok, kLen, 2, 9, true, o, 8, &n);
                }});
  cs.push_back({F, "length -3", INVALID, [](Env& e) {
                  float o[8];
                  size_t n = 0;
                  const int32_t len = -3;
                  return kestrel_embed(e.context(), kTok, &len, 1, KESTREL_POOLING_MEAN, true, o, 8, &n);
                }});
  cs.push_back({F, "token out of range", kAny, [](Env& e) {
                  static const kestrel_token bad[1] = {1 << 30};
                  const int32_t len = 1;
                  size_t n = 0;
                  std::vector<float> o(1 << 16);
                  const kestrel_status st = kestrel_embed(e.context(), bad, &len, 1, KESTREL_POOLING_MEAN, true, o.data(),
                                                          o.size(), &n);
                  return st == OK ? kWrong : OK;
                }});
  cs.push_back({F, "NULL out, cap 8", INVALID, [](Env& e) {
                  size_t n = 0;
                  return kestrel_embed(e.context(), kTok, kLen, 2, KESTREL_POOLING_MEAN, true, nullptr, 8, &n);
                }});
  cs.push_back({F, "too small a buffer", SMALL, [](Env& e) {
                  float o[2];
                  size_t n = 0;
                  return kestrel_embed(e.context(), kTok, kLen, 2, KESTREL_POOLING_MEAN, true, o, 2, &n);
                }});
}

void sampler_cases(std::vector<Case>& cs) {
  const std::string L = "kestrel_logprobs";
  static const float kRow[4] = {0.5f, -1.0f, 2.0f, 0.0f};
  cs.push_back({L, "NULL logits", INVALID, [](Env&) { return kestrel_logprobs(nullptr, 4, 0, nullptr, nullptr, 0); }});
  cs.push_back({L, "n_vocab 0", INVALID, [](Env&) { return kestrel_logprobs(kRow, 0, -1, nullptr, nullptr, 0); }});
  cs.push_back({L, "n_vocab -5", INVALID, [](Env&) { return kestrel_logprobs(kRow, -5, -1, nullptr, nullptr, 0); }});
  cs.push_back({L, "token 4 of 4", INVALID, [](Env&) { return kestrel_logprobs(kRow, 4, 4, nullptr, nullptr, 0); }});
  cs.push_back({L, "token -2", INVALID, [](Env&) { return kestrel_logprobs(kRow, 4, -2, nullptr, nullptr, 0); }});
  cs.push_back({L, "NULL top, k 3", INVALID, [](Env&) { return kestrel_logprobs(kRow, 4, 0, nullptr, nullptr, 3); }});
  cs.push_back({L, "k 1000 of 4", OK, [](Env&) {
                  kestrel_token_logprob top[4];
                  float lp = 0;
                  const kestrel_status st = kestrel_logprobs(kRow, 4, 2, &lp, top, 1000);  // writes min(k, n_vocab)
                  return st == OK ? expect(top[0].token == 2 && top[3].token == 1 && lp == top[0].logprob) : st;
                }});
  const std::string N = "kestrel_sampler_new";
  auto make = [](std::function<void(kestrel_sampler_options&)> set) {
    return [set](Env&) {
      kestrel_sampler_options o;
      kestrel_sampler_options_init(&o);
      set(o);
      kestrel_sampler* s = nullptr;
      const kestrel_status st = kestrel_sampler_new(&o, &s);
      kestrel_sampler_free(s);
      return st;
    };
  };
  cs.push_back({"kestrel_sampler_options_init", "NULL", OK, [](Env&) {
                  kestrel_sampler_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({N, "NULL out", INVALID, [](Env&) { return kestrel_sampler_new(nullptr, nullptr); }});
  cs.push_back({N, "struct_size 0", INVALID, make([](kestrel_sampler_options& o) { o.struct_size = 0; })});
  cs.push_back({N, "NaN temperature", INVALID, make([](kestrel_sampler_options& o) { o.temperature = NAN; })});
  cs.push_back({N, "n_logit_bias 3, NULL arrays", INVALID, make([](kestrel_sampler_options& o) { o.n_logit_bias = 3; })});
  cs.push_back({N, "n_logit_bias -1", INVALID, make([](kestrel_sampler_options& o) { o.n_logit_bias = -1; })});
  cs.push_back({N, "logit bias on token -4", INVALID, make([](kestrel_sampler_options& o) {
                  static const kestrel_token t[] = {-4};
                  static const float v[] = {1.0f};
                  o.logit_bias_tokens = t;
                  o.logit_bias_values = v;
                  o.n_logit_bias = 1;
                })});
  cs.push_back({"kestrel_sampler_free", "NULL", OK, [](Env&) {
                  kestrel_sampler_free(nullptr);
                  return OK;
                }});
  const std::string S = "kestrel_sampler_sample";
  static const std::vector<float> logits(512, 0.5f);
  cs.push_back({S, "NULL sampler", INVALID, [](Env&) {
                  kestrel_token t = 0;
                  return kestrel_sampler_sample(nullptr, logits.data(), 512, &t);
                }});
  cs.push_back({S, "NULL logits", INVALID, [](Env& e) {
                  kestrel_token t = 0;
                  return kestrel_sampler_sample(e.sampler(), nullptr, 512, &t);
                }});
  cs.push_back({S, "NULL out", INVALID, [](Env& e) { return kestrel_sampler_sample(e.sampler(), logits.data(), 512, nullptr); }});
  for (int32_t n : {0, -1, INT32_MIN})
    cs.push_back({S, "n_vocab " + std::to_string(n), INVALID, [n](Env& e) {
                    kestrel_token t = 0;
                    return kestrel_sampler_sample(e.sampler(), logits.data(), n, &t);
                  }});
  cs.push_back({S, "all logits NaN", kAny, [](Env& e) {
                  const std::vector<float> nan(512, NAN);
                  kestrel_token t = 0;
                  return kestrel_sampler_sample(e.sampler(), nan.data(), 512, &t);
                }});
  cs.push_back({S, "all logits -inf", kAny, [](Env& e) {
                  const std::vector<float> inf(512, -INFINITY);
                  kestrel_token t = 0;
                  return kestrel_sampler_sample(e.sampler(), inf.data(), 512, &t);
                }});
  cs.push_back({"kestrel_sampler_accept", "NULL", OK, [](Env&) {
                  kestrel_sampler_accept(nullptr, 1);
                  return OK;
                }});
  cs.push_back({"kestrel_sampler_accept", "out-of-range tokens, then sample with penalties", OK, [](Env&) {
                  kestrel_sampler_options o;
                  kestrel_sampler_options_init(&o);
                  o.repeat_penalty = 1.3f;
                  o.frequency_penalty = 0.5f;
                  kestrel_sampler* s = nullptr;
                  if (kestrel_sampler_new(&o, &s) != OK) return kWrong;
                  for (kestrel_token t : {-7, INT32_MAX, INT32_MIN, 600}) kestrel_sampler_accept(s, t);
                  kestrel_token t = -1;
                  const kestrel_status st = kestrel_sampler_sample(s, logits.data(), 512, &t);
                  return st == OK ? expect(t >= 0 && t < 512) : st;
                }});
  cs.push_back({"kestrel_sampler_reset", "NULL", OK, [](Env&) {
                  kestrel_sampler_reset(nullptr);
                  return OK;
                }});
  const std::string GR = "kestrel_sampler_set_grammar";
  cs.push_back({GR, "NULL sampler", INVALID, [](Env& e) {
                  return kestrel_sampler_set_grammar(nullptr, e.model, "root ::= \"a\"", nullptr, nullptr);
                }});
  cs.push_back({GR, "NULL model", INVALID, [](Env& e) {
                  return kestrel_sampler_set_grammar(e.sampler(), nullptr, "root ::= \"a\"", nullptr, nullptr);
                }});
  cs.push_back({GR, "grammar and json_schema both", INVALID, [](Env& e) {
                  return kestrel_sampler_set_grammar(e.sampler(), e.model, "root ::= \"a\"", "{}", nullptr);
                }});
  cs.push_back({GR, "a grammar that does not parse", INVALID, [](Env& e) {
                  return kestrel_sampler_set_grammar(e.sampler(), e.model, "root ::= (", nullptr, nullptr);
                }});
  cs.push_back({GR, "a schema keyword it cannot enforce", KESTREL_ERR_UNSUPPORTED, [](Env& e) {
                  return kestrel_sampler_set_grammar(e.sampler(), e.model, nullptr, R"({"type": "string", "pattern": "a+"})",
                                                     nullptr);
                }});
  cs.push_back({GR, "a grammar and a reply that forces a call", INVALID, [](Env& e) {
                  return kestrel_sampler_set_grammar(e.sampler(), e.model, "root ::= \"a\"", nullptr,
                                                     reply_parser(e, "required"));
                }});
  cs.push_back({GR, "then removed: sampling is free again", OK, [](Env& e) {
                  if (kestrel_sampler_set_grammar(e.sampler(), e.model, "root ::= \"zzz\"", nullptr, nullptr) != OK)
                    return kWrong;
                  return kestrel_sampler_set_grammar(e.sampler(), e.model, nullptr, nullptr, reply_parser(e));
                }});
  cs.push_back({"kestrel_reply_parser_show_markers", "NULL parser", INVALID, [](Env& e) {
                  return kestrel_reply_parser_show_markers(nullptr, e.detok());
                }});
  cs.push_back({"kestrel_reply_parser_show_markers", "NULL detokenizer", INVALID, [](Env& e) {
                  return kestrel_reply_parser_show_markers(reply_parser(e), nullptr);
                }});
  cs.push_back({"kestrel_reply_parser_show_markers", "a parser and a detokenizer", OK, [](Env& e) {
                  return kestrel_reply_parser_show_markers(reply_parser(e), e.detok());
                }});
  cs.push_back({"kestrel_spec_options_init", "NULL", OK, [](Env&) {
                  kestrel_spec_options_init(nullptr);
                  return OK;
                }});
}

void generate_cases(std::vector<Case>& cs) {
  const std::string G = "kestrel_generate";
  auto gen = [](std::function<void(kestrel_generate_options&)> set, std::string prompt = "Once upon") {
    return [set, prompt](Env& e) {
      kestrel_generate_options o;
      kestrel_generate_options_init(&o);
      o.max_tokens = 4;
      set(o);
      return kestrel_generate(e.context(), prompt.c_str(), &o, nullptr);
    };
  };
  cs.push_back({"kestrel_generate_options_init", "NULL", OK, [](Env&) {
                  kestrel_generate_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({G, "NULL ctx", INVALID, [](Env&) { return kestrel_generate(nullptr, "a", nullptr, nullptr); }});
  cs.push_back({G, "NULL prompt", INVALID, [](Env& e) { return kestrel_generate(e.context(), nullptr, nullptr, nullptr); }});
  cs.push_back({G, "struct_size 0", INVALID, gen([](kestrel_generate_options& o) { o.struct_size = 0; })});
  cs.push_back({G, "empty prompt without BOS", INVALID, gen([](kestrel_generate_options& o) { o.add_special = false; }, "")});
  cs.push_back({G, "n_stop_strings -1", INVALID, gen([](kestrel_generate_options& o) { o.n_stop_strings = -1; })});
  cs.push_back({G, "NULL stop_strings, n 2", INVALID, gen([](kestrel_generate_options& o) { o.n_stop_strings = 2; })});
  cs.push_back({G, "a NULL stop string", INVALID, gen([](kestrel_generate_options& o) {
                  static const char* const stops[] = {"x", nullptr};
                  o.stop_strings = stops;
                  o.n_stop_strings = 2;
                })});
  cs.push_back({G, "sampling struct_size 0", INVALID, gen([](kestrel_generate_options& o) {
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.struct_size = 0;
                  o.sampling = &so;
                })});
  cs.push_back({G, "logit bias with NULL arrays", INVALID, gen([](kestrel_generate_options& o) {
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.n_logit_bias = 2;
                  o.sampling = &so;
                })});
  cs.push_back({G, "speculative mode 99", INVALID, gen([](kestrel_generate_options& o) {
                  static kestrel_spec_options sp;
                  kestrel_spec_options_init(&sp);
                  sp.mode = static_cast<kestrel_spec_mode>(99);
                  o.speculative = &sp;
                })});
  cs.push_back({G, "DRAFT without a draft context", INVALID, gen([](kestrel_generate_options& o) {
                  static kestrel_spec_options sp;
                  kestrel_spec_options_init(&sp);
                  sp.mode = KESTREL_SPEC_DRAFT;
                  o.speculative = &sp;
                })});
  cs.push_back({G, "speculative struct_size 0", INVALID, gen([](kestrel_generate_options& o) {
                  static kestrel_spec_options sp;
                  kestrel_spec_options_init(&sp);
                  sp.struct_size = 0;
                  o.speculative = &sp;
                })});
  cs.push_back({G, "spec_stats with struct_size 3 (too small to write)", OK, gen([](kestrel_generate_options& o) {
                  static kestrel_spec_stats stats;
                  stats.struct_size = 3;
                  o.spec_stats = &stats;
                })});
  cs.push_back({G, "NULL stop_strings, n INT32_MAX", INVALID,
                gen([](kestrel_generate_options& o) { o.n_stop_strings = INT32_MAX; })});
  cs.push_back({G, "max_tokens -1", kAny, gen([](kestrel_generate_options& o) { o.max_tokens = -1; })});
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "Once upon a time ";
  cs.push_back({G, "a prompt longer than the context", KESTREL_ERR_CONTEXT_FULL,
                gen([](kestrel_generate_options&) {}, long_prompt)});
}

void engine_cases(std::vector<Case>& cs) {
  const std::string N = "kestrel_engine_new";
  auto make = [](std::function<void(kestrel_engine_options&)> set) {
    return [set](Env& e) {
      kestrel_engine_options o;
      kestrel_engine_options_init(&o);
      o.n_ctx = 128;
      o.n_threads = 1;
      set(o);
      kestrel_engine* en = nullptr;
      const kestrel_status st = kestrel_engine_new(e.model, &o, &en);
      kestrel_engine_free(en);
      return st;
    };
  };
  cs.push_back({"kestrel_engine_options_init", "NULL", OK, [](Env&) {
                  kestrel_engine_options_init(nullptr);
                  return OK;
                }});
  cs.push_back({N, "NULL model", INVALID, [](Env&) {
                  kestrel_engine* en = nullptr;
                  return kestrel_engine_new(nullptr, nullptr, &en);
                }});
  cs.push_back({N, "NULL out", INVALID, [](Env& e) { return kestrel_engine_new(e.model, nullptr, nullptr); }});
  cs.push_back({N, "struct_size 0", INVALID, make([](kestrel_engine_options& o) { o.struct_size = 0; })});
  cs.push_back({N, "kv_type 7", INVALID, make([](kestrel_engine_options& o) { o.kv_type = 7; })});
  cs.push_back({N, "kv_type_v 7", INVALID, make([](kestrel_engine_options& o) { o.kv_type_v = 7; })});
  cs.push_back({N, "kv_type_v Q8_0 (fine)", OK, make([](kestrel_engine_options& o) { o.kv_type_v = KESTREL_KV_Q8_0; })});
  cs.push_back({N, "kv_type F8_E4M3 (fine)", OK, make([](kestrel_engine_options& o) { o.kv_type = KESTREL_KV_F8_E4M3; })});
  for (uint32_t n : {0xFFFFFFFFu, 0x80000000u, (1u << 24) + 1})
    cs.push_back({N, "n_ctx " + std::to_string(n), INVALID, make([n](kestrel_engine_options& o) { o.n_ctx = n; })});
  for (uint32_t n : {0xFFFFFFFFu, 0x80000000u, (1u << 20) + 1})
    cs.push_back({N, "n_batch " + std::to_string(n), INVALID, make([n](kestrel_engine_options& o) { o.n_batch = n; })});
  for (uint32_t n : {0u, 65u, 0xFFFFFFFFu})
    cs.push_back({N, "n_parallel " + std::to_string(n), INVALID, make([n](kestrel_engine_options& o) { o.n_parallel = n; })});
  for (int32_t n : {100000, 1025, -1, INT32_MIN, INT32_MAX})
    cs.push_back({N, "n_threads " + std::to_string(n), INVALID, make([n](kestrel_engine_options& o) { o.n_threads = n; })});
  cs.push_back({N, "DRAFT without a draft model", INVALID, make([](kestrel_engine_options& o) {
                  static kestrel_spec_options sp;
                  kestrel_spec_options_init(&sp);
                  sp.mode = KESTREL_SPEC_DRAFT;
                  o.speculative = &sp;
                })});
  cs.push_back({"kestrel_engine_free", "NULL", OK, [](Env&) {
                  kestrel_engine_free(nullptr);
                  return OK;
                }});
  cs.push_back({"kestrel_request_init", "NULL", OK, [](Env&) {
                  kestrel_request_init(nullptr);
                  return OK;
                }});

  static const kestrel_token prompt[] = {1, 403, 407};
  auto submit = [](std::function<void(kestrel_request&)> set) {
    return [set](Env& e) {
      kestrel_request r;
      kestrel_request_init(&r);
      r.prompt = prompt;
      r.n_prompt = 3;
      r.max_tokens = 2;
      set(r);
      uint64_t id = 0;
      const kestrel_status st = kestrel_submit(e.engine(), &r, &id);
      return st == OK ? kestrel_wait(e.engine(), id, nullptr) : st;
    };
  };
  const std::string S = "kestrel_submit";
  cs.push_back({S, "NULL engine", INVALID, [](Env&) {
                  kestrel_request r;
                  kestrel_request_init(&r);
                  uint64_t id = 0;
                  return kestrel_submit(nullptr, &r, &id);
                }});
  cs.push_back({S, "NULL request", INVALID, [](Env& e) {
                  uint64_t id = 0;
                  return kestrel_submit(e.engine(), nullptr, &id);
                }});
  cs.push_back({S, "NULL id", INVALID, [](Env& e) {
                  kestrel_request r;
                  kestrel_request_init(&r);
                  r.prompt = prompt;
                  r.n_prompt = 3;
                  return kestrel_submit(e.engine(), &r, nullptr);
                }});
  cs.push_back({S, "a well-formed request", OK, submit([](kestrel_request&) {})});
  cs.push_back({S, "struct_size 0", INVALID, submit([](kestrel_request& r) { r.struct_size = 0; })});
  cs.push_back({S, "n_prompt 0", INVALID, submit([](kestrel_request& r) { r.n_prompt = 0; })});
  cs.push_back({S, "n_prompt -1", INVALID, submit([](kestrel_request& r) { r.n_prompt = -1; })});
  cs.push_back({S, "NULL prompt, n_prompt 3", INVALID, submit([](kestrel_request& r) { r.prompt = nullptr; })});
  cs.push_back({S, "a prompt token out of range", RANGE, submit([](kestrel_request& r) {
                  static const kestrel_token bad[] = {1, 512};
                  r.prompt = bad;
                  r.n_prompt = 2;
                })});
  cs.push_back({S, "a prompt longer than n_ctx", KESTREL_ERR_CONTEXT_FULL, submit([](kestrel_request& r) {
                  static const std::vector<kestrel_token> many(200, 5);
                  r.prompt = many.data();
                  r.n_prompt = 200;
                })});
  cs.push_back({S, "max_tokens 0", INVALID, submit([](kestrel_request& r) { r.max_tokens = 0; })});
  cs.push_back({S, "n_stop_tokens -1", INVALID, submit([](kestrel_request& r) { r.n_stop_tokens = -1; })});
  cs.push_back({S, "NULL stop_tokens, n 2", INVALID, submit([](kestrel_request& r) { r.n_stop_tokens = 2; })});
  cs.push_back({S, "NULL stop_strings, n 1", INVALID, submit([](kestrel_request& r) { r.n_stop_strings = 1; })});
  cs.push_back({S, "a stop string that is not UTF-8", INVALID, submit([](kestrel_request& r) {
                  static const char* const stops[] = {"\xa9"};
                  r.stop_strings = stops;
                  r.n_stop_strings = 1;
                })});
  cs.push_back({S, "sampling struct_size 0", INVALID, submit([](kestrel_request& r) {
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.struct_size = 0;
                  r.sampling = &so;
                })});
  cs.push_back({S, "logit bias with NULL arrays", INVALID, submit([](kestrel_request& r) {
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.n_logit_bias = 4;
                  r.sampling = &so;
                })});
  cs.push_back({S, "NULL logit bias arrays, n INT32_MAX", INVALID, submit([](kestrel_request& r) {
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.n_logit_bias = INT32_MAX;
                  r.sampling = &so;
                })});
  cs.push_back({S, "every token banned", kAny, submit([](kestrel_request& r) {
                  static std::vector<kestrel_token> ids(512);
                  static std::vector<float> bans(512, -INFINITY);
                  for (int i = 0; i < 512; ++i) ids[static_cast<size_t>(i)] = i;
                  static kestrel_sampler_options so;
                  kestrel_sampler_options_init(&so);
                  so.logit_bias_tokens = ids.data();
                  so.logit_bias_values = bans.data();
                  so.n_logit_bias = 512;
                  r.sampling = &so;
                })});
  cs.push_back({S, "DRAFT without a draft model", INVALID, submit([](kestrel_request& r) {
                  static kestrel_spec_options sp;
                  kestrel_spec_options_init(&sp);
                  sp.mode = KESTREL_SPEC_DRAFT;
                  r.speculative = &sp;
                })});
  cs.push_back({"kestrel_cancel", "NULL engine", INVALID, [](Env&) { return kestrel_cancel(nullptr, 1); }});
  cs.push_back({"kestrel_cancel", "unknown id", RANGE, [](Env& e) { return kestrel_cancel(e.engine(), 12345); }});
  cs.push_back({"kestrel_wait", "NULL engine", INVALID, [](Env&) { return kestrel_wait(nullptr, 1, nullptr); }});
  cs.push_back({"kestrel_wait", "a result with struct_size 2 (too small to write)", OK, [](Env& e) {
                  kestrel_request r;
                  kestrel_request_init(&r);
                  r.prompt = prompt;
                  r.n_prompt = 3;
                  r.max_tokens = 2;
                  uint64_t id = 0;
                  if (kestrel_submit(e.engine(), &r, &id) != OK) return kWrong;
                  kestrel_request_result res{};
                  res.struct_size = 2;
                  const kestrel_status st = kestrel_wait(e.engine(), id, &res);
                  return st == OK ? expect(res.struct_size == 2 && res.n_generated == 0) : st;
                }});
  cs.push_back({"kestrel_wait", "unknown id", RANGE, [](Env& e) { return kestrel_wait(e.engine(), UINT64_MAX, nullptr); }});
  cs.push_back({"kestrel_engine_generate", "NULL engine", INVALID, [](Env&) {
                  kestrel_request r;
                  kestrel_request_init(&r);
                  return kestrel_engine_generate(nullptr, &r, nullptr);
                }});
  cs.push_back({"kestrel_engine_generate", "NULL request", INVALID,
                [](Env& e) { return kestrel_engine_generate(e.engine(), nullptr, nullptr); }});
  cs.push_back({"kestrel_engine_stats", "NULL engine", INVALID, [](Env&) {
                  char b[16];
                  size_t len = 0;
                  return kestrel_engine_stats(nullptr, b, sizeof b, &len);
                }});
  buffer_cases(cs, "kestrel_engine_stats", true,
               [](Env& e, char* b, size_t cap, size_t* len) { return kestrel_engine_stats(e.engine(), b, cap, len); });
}

void misc_cases(std::vector<Case>& cs) {
  cs.push_back({"kestrel_status_name", "values outside the enum", OK, [](Env&) {
                  return expect(std::string(kestrel_status_name(static_cast<kestrel_status>(999))) == "ERR_UNKNOWN" &&
                                kestrel_status_name(static_cast<kestrel_status>(-1)) != nullptr);
                }});
  cs.push_back({"kestrel_last_error", "before any call", OK, [](Env&) { return expect(kestrel_last_error() != nullptr); }});
  cs.push_back({"kestrel_api_version", "plain", OK, [](Env&) { return expect(kestrel_api_version() == KESTREL_API_VERSION); }});
  cs.push_back({"kestrel_log_set", "NULL function, levels outside the enum", OK, [](Env&) {
                  kestrel_log_set(nullptr, nullptr, static_cast<kestrel_log_level>(99));
                  kestrel_log_set(nullptr, nullptr, static_cast<kestrel_log_level>(-5));
                  kestrel_log_set(nullptr, nullptr, KESTREL_LOG_WARN);
                  return OK;
                }});
}

// Every function kestrel.h declares (read from the source tree next to this file).
std::set<std::string> header_functions() {
  std::string path = __FILE__;
  path = path.substr(0, path.rfind("tests/api/")) + "runtime/include/kestrel.h";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::set<std::string> names;
  const std::regex decl(R"(KESTREL_API[^;(]*?\b(kestrel_\w+)\s*\()");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), decl); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1].str());
  return names;
}

}  // namespace

TEST_CASE("C API misuse: every public function, each case in a forked child") {
  const std::string path = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  kestrel_log_set(nullptr, nullptr, KESTREL_LOG_NONE);
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.n_threads = 1;
  kestrel_model* model = nullptr;
  REQUIRE(kestrel_model_load(path.c_str(), &mo, &model) == OK);

  std::vector<Case> cs;
  misc_cases(cs);
  model_cases(cs, path);
  tokenizer_cases(cs);
  detokenizer_cases(cs);
  chat_cases(cs);
  context_cases(cs);
  decode_cases(cs);
  kv_cases(cs);
  sampler_cases(cs);
  embed_cases(cs);
  generate_cases(cs);
  engine_cases(cs);
  const std::set<std::string> declared = header_functions();
  CHECK(declared.size() > 50);
  std::set<std::string> covered;
  for (const Case& c : cs) covered.insert(c.fn);
  for (const std::string& fn : declared) CHECK_MESSAGE(covered.count(fn), fn << " has no misuse case");

  int failed = 0;
  for (const Case& c : cs) {
    const std::string why = run_case(c, model);
    failed += !why.empty();
    CHECK_MESSAGE(why.empty(), c.fn << " (" << c.what << "): " << why);
  }
  MESSAGE(cs.size() << " C API misuse cases, " << failed << " failed");
  std::printf("C API misuse: %zu cases\n", cs.size());
  kestrel_model_free(model);
}
