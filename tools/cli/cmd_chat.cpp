// kestrel chat: interactive multi-turn chat in the terminal (or over a pipe, a line per message).
// Replies stream as they are generated; each turn only the new tokens are processed (the KV
// cache is kept between turns). Ctrl-C stops a reply; Ctrl-C at the prompt (or a second one while
// the reply is stopping) exits. With --tools, replies are split into reasoning, content and tool
// calls (docs/TOOLS.md); /tool answers a call.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "chat_session.h"
#include "common.h"

namespace kestrel::cli {
namespace {

std::atomic<bool> g_generating{false};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_interrupted_at_prompt{false};

void on_sigint(int) {
  if (g_generating.load()) {
    if (g_stop.exchange(true)) _exit(130);  // a second Ctrl-C before the reply stopped
  } else {
    g_interrupted_at_prompt.store(true);
  }
}

void install_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C at the prompt interrupts read()
  sigaction(SIGINT, &sa, nullptr);
}

// One line from stdin without the newline; nullopt at end of input or on Ctrl-C. SIGINT stays
// blocked except inside ppoll(), so a Ctrl-C that lands just before the wait cannot be lost.
std::optional<std::string> read_line() {
  sigset_t block, open;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &open);
  sigdelset(&open, SIGINT);
  std::string line;
  std::optional<std::string> result;
  for (;;) {
    if (g_interrupted_at_prompt.load()) break;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (ppoll(&p, 1, nullptr, &open) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') {
        result = line;
        break;
      }
      line.push_back(c);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && !line.empty()) result = line;
    break;
  }
  pthread_sigmask(SIG_UNBLOCK, &block, nullptr);
  return result;
}

const char* kHelp =
    "commands:\n"
    "  /reset   forget the conversation (the system message stays)\n"
    "  /tool T  answer the oldest open tool call with T (the model replies once all are answered)\n"
    "  /exit    leave (also /quit, Ctrl-D, or Ctrl-C at the prompt)\n"
    "  /help    this text\n"
    "Ctrl-C during a reply stops it. End a line with \\ to continue the message on the next line.\n";

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(KESTREL_ERR_IO, std::string("cannot open ") + what + " '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "stories260K (llama) · 292.8K params · f32 · context 512 · backend cpu"
std::string load_summary(const kestrel_model* m, const kestrel_context* ctx) {
  const nlohmann::json d = nlohmann::json::parse(describe(m));
  std::string quant = "?";
  uint64_t most = 0;
  for (const auto& [type, bytes] : d["tensor_types"].items())
    if (bytes.get<uint64_t>() > most) most = bytes.get<uint64_t>(), quant = type;
  const double p = d["n_params"].get<double>();
  char params[32];
  if (p >= 1e9) std::snprintf(params, sizeof params, "%.2fB", p / 1e9);
  else if (p >= 1e6) std::snprintf(params, sizeof params, "%.1fM", p / 1e6);
  else std::snprintf(params, sizeof params, "%.1fK", p / 1e3);
  const std::string name = d["name"].get<std::string>();
  return (name.empty() ? std::string("model") : name) + " (" + d["architecture"].get<std::string>() + ") · " +
         params + " params · " + quant + " · context " + std::to_string(kestrel_context_n_ctx(ctx)) +
         " · backend " + kestrel_context_backend(ctx);
}

void print_stats(const ChatTurnStats& s) {
  const double pp = s.prompt_s > 0 ? s.new_tokens / s.prompt_s : 0, tg = s.gen_s > 0 ? s.generated / s.gen_s : 0;
  std::fprintf(stderr, "[prompt %d tokens: %d new, %d cached | %d generated | %.1f tok/s prompt, %.1f tok/s gen%s%s]\n",
               s.prompt_tokens, s.new_tokens, s.cached_tokens, s.generated, pp, tg,
               s.interrupted ? " | interrupted" : "", s.truncated ? " | token limit" : "");
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::vector<std::string> opts = kModelOptions;
  opts.insert(opts.end(), kSamplerOptions.begin(), kSamplerOptions.end());
  opts.insert(opts.end(), kCacheOptions.begin(), kCacheOptions.end());
  opts.insert(opts.end(), {"--system", "--chat-template", "-c,--ctx-size", "-n,--n-predict", "--tools", "--tool-choice"});
  Args a(argc, argv, opts, {"--stats"});
  a.required("--model");
  const kestrel_sampler_options so = sampler_options_from_args(a);
  const long long n_ctx_arg = a.integer("--ctx-size", 0);
  const int32_t max_reply = static_cast<int32_t>(a.integer("--n-predict", -1));
  const std::string tmpl = a.has("--chat-template") ? read_file(a.str("--chat-template"), "chat template") : "";
  ChatTools tools;
  if (a.has("--tools")) tools.tools_json = read_file(a.str("--tools"), "tools file");
  if (a.has("--tool-choice")) {
    if (!a.has("--tools")) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "--tool-choice needs --tools");
    tools.tool_choice = a.str("--tool-choice");
  }
  const bool stats = a.has("--stats");
  const bool tty = isatty(STDIN_FILENO);
  const kestrel_kv_type kv_type = kv_type_from_args(a);

  ModelPtr model = load_model_from_args(a);
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.kv_type = kv_type;
  // Default context: the training context, at most 4096 tokens (a 128K KV cache is gigabytes).
  const long long n_train = nlohmann::json::parse(describe(model.get()))["hparams"]["n_ctx_train"].get<long long>();
  co.n_ctx = static_cast<uint32_t>(n_ctx_arg > 0 ? n_ctx_arg : std::min<long long>(n_train, 4096));
  ContextPtr ctx = new_context(model.get(), &co);
  ChatSession chat(model.get(), ctx.get(), so, tmpl, max_reply, tools);
  if (a.has("--system")) chat.set_system(a.str("--system"));
  std::fprintf(stderr, "kestrel chat: %s\n", load_summary(model.get(), ctx.get()).c_str());
  if (tty) std::fprintf(stderr, "type /help for commands\n");
  install_sigint();

  for (;;) {
    if (tty) std::fputs("> ", stdout), std::fflush(stdout);
    std::string msg;
    std::optional<std::string> line;
    while ((line = read_line()) && !line->empty() && line->back() == '\\') {
      msg += line->substr(0, line->size() - 1) + "\n";
      if (tty) std::fputs(". ", stdout), std::fflush(stdout);
    }
    if (!line) {
      if (tty) std::fputs("\n", stdout);
      return g_interrupted_at_prompt.load() ? 130 : 0;
    }
    msg += *line;
    if (msg.empty()) continue;
    if (msg == "/exit" || msg == "/quit") return 0;
    if (msg == "/help") {
      std::fputs(kHelp, stdout);
      continue;
    }
    if (msg == "/reset") {
      chat.reset();
      std::fputs("[conversation reset]\n", stdout);
      continue;
    }
    if (msg[0] == '/' && msg.find(' ') == std::string::npos) {
      std::printf("unknown command %s (try /help)\n", msg.c_str());
      continue;
    }
    const bool is_tool = msg == "/tool" || msg.rfind("/tool ", 0) == 0;
    if (is_tool && chat.open_tool_calls() == 0) {
      std::puts("no tool call is waiting for a result");
      continue;
    }
    g_stop.store(false);
    g_generating.store(true);
    // Reasoning shows between [thinking] and [/thinking] (dim on a terminal).
    bool thinking = false;
    auto show = [&](std::string_view t, bool reasoning) {
      if (t.empty()) return;
      if (reasoning != thinking) {
        std::fputs(reasoning ? (tty ? "\x1b[2m[thinking] " : "[thinking] ") : (tty ? " [/thinking]\x1b[0m\n" : " [/thinking]\n"),
                   stdout);
        thinking = reasoning;
      }
      std::fwrite(t.data(), 1, t.size(), stdout), std::fflush(stdout);
    };
    try {
      std::optional<ChatTurnStats> r =
          is_tool ? chat.tool_result(msg.size() > 6 ? msg.substr(6) : "", show, g_stop) : chat.reply(msg, show, g_stop);
      g_generating.store(false);
      if (!r) {
        std::printf("[%zu more tool calls wait for /tool]\n", chat.open_tool_calls());
        continue;
      }
      const ChatTurnStats& s = *r;
      if (thinking) std::fputs(tty ? " [/thinking]\x1b[0m" : " [/thinking]", stdout);  // the reply ended thinking
      std::fputs("\n", stdout);
      for (const auto& c : s.tool_calls)
        std::printf("[tool call %s] %s %s\n", c["id"].get<std::string>().c_str(),
                    c["function"]["name"].get<std::string>().c_str(), c["function"]["arguments"].get<std::string>().c_str());
      std::fflush(stdout);
      if (s.dropped_messages) std::fprintf(stderr, "[left out the %d oldest messages to fit the context]\n", s.dropped_messages);
      if (s.interrupted) std::fprintf(stderr, "[stopped]\n");
      if (stats) print_stats(s);
    } catch (const Error& e) {
      g_generating.store(false);
      std::fprintf(stderr, "\nkestrel chat: %s: %s\n", kestrel_status_name(e.status()), e.what());
    }
  }
}

}  // namespace kestrel::cli
