// kestrel chat: interactive multi-turn chat in the terminal (or over a pipe, a line per message).
// Replies stream as they are generated; each turn only the new tokens are processed (the KV
// cache is kept between turns). Ctrl-C stops a reply; Ctrl-C at the prompt (or a second one while
// the reply is stopping) exits. With --tools, replies are split into reasoning, content and tool
// calls (docs/TOOLS.md); /tool answers a call. On a terminal, lines are edited with libedit
// (history, the Up arrow); /save and /load keep a conversation as JSON messages.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "chat_session.h"
#include "common.h"
#include "info_summary.h"
#include "line_input.h"

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

const char* kHelp =
    "commands:\n"
    "  /system TEXT      set the system message (empty: none); the conversation stays\n"
    "  /set NAME VALUE   temp, top-p, top-k, min-p, seed or max-tokens for the next replies\n"
    "  /save FILE        write the conversation as JSON messages\n"
    "  /load FILE        read a conversation written by /save (or any JSON array of messages)\n"
    "  /stats            the last reply's token counts and speeds, and the context in use\n"
    "  /reset            forget the conversation (the system message stays)\n"
    "  /tool TEXT        answer the oldest open tool call with TEXT (the model replies once all are answered)\n"
    "  /exit             leave (also /quit, Ctrl-D, or Ctrl-C at the prompt)\n"
    "  /help             this text\n"
    "Ctrl-C during a reply stops it. End a line with \\ to go on on the next line, or put the message\n"
    "between two lines of \"\"\". A message that starts with / is written //.\n";

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
  const std::string params = human_count(d["n_params"].get<double>());
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

// /set NAME VALUE: a sampling setting or the reply limit; false (with a message) when unknown.
bool apply_setting(const std::string& name, const std::string& value, kestrel_sampler_options* so, ChatSession* chat) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end) {
    std::fprintf(stderr, "/set %s: '%s' is not a number\n", name.c_str(), value.c_str());
    return false;
  }
  if (name == "temp" || name == "temperature") so->temperature = static_cast<float>(v);
  else if (name == "top-p" || name == "top_p") so->top_p = static_cast<float>(v);
  else if (name == "top-k" || name == "top_k") so->top_k = static_cast<int32_t>(v);
  else if (name == "min-p" || name == "min_p") so->min_p = static_cast<float>(v);
  else if (name == "seed") so->seed = static_cast<uint64_t>(v);
  else if (name == "max-tokens" || name == "max_tokens" || name == "n-predict") {
    chat->set_max_reply_tokens(static_cast<int32_t>(v));
    return true;
  } else {
    std::fprintf(stderr, "/set: unknown setting '%s' (temp, top-p, top-k, min-p, seed, max-tokens)\n", name.c_str());
    return false;
  }
  chat->set_sampling(*so);
  return true;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!(f << text)) throw Error(KESTREL_ERR_IO, "cannot write '" + path + "'");
}

// The session commands (not /tool, which replies); false when `line` is none of them.
bool run_command(const std::string& line, ChatSession& chat, kestrel_sampler_options& so,
                 const std::optional<ChatTurnStats>& last, uint32_t n_ctx) {
  const size_t sp = line.find(' ');
  const std::string cmd = line.substr(0, sp);
  std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\r')) arg.pop_back();
  if (cmd == "/help") {
    std::fputs(kHelp, stdout);
  } else if (cmd == "/reset") {
    chat.reset();
    std::fputs("[conversation reset]\n", stdout);
  } else if (cmd == "/system") {
    chat.set_system(arg);
    std::printf("[system message %s]\n", arg.empty() ? "removed" : "set");
  } else if (cmd == "/set") {
    const size_t s2 = arg.find(' ');
    if (s2 == std::string::npos) std::fputs("/set NAME VALUE (temp, top-p, top-k, min-p, seed, max-tokens)\n", stderr);
    else if (apply_setting(arg.substr(0, s2), arg.substr(s2 + 1), &so, &chat))
      std::printf("[%s = %s]\n", arg.substr(0, s2).c_str(), arg.substr(s2 + 1).c_str());
  } else if (cmd == "/save") {
    if (arg.empty()) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "/save FILE");
    const nlohmann::ordered_json c = chat.conversation();
    write_text_file(arg, c.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    std::printf("[saved %zu messages to %s]\n", c.size(), arg.c_str());
  } else if (cmd == "/load") {
    if (arg.empty()) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "/load FILE");
    const nlohmann::ordered_json c = nlohmann::ordered_json::parse(read_file(arg, "conversation"), nullptr, false);
    if (c.is_discarded()) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "'" + arg + "' is not JSON");
    chat.load(c);
    std::printf("[loaded %zu messages from %s]\n", c.size(), arg.c_str());
  } else if (cmd == "/stats") {
    if (last) print_stats(*last);
    else std::fputs("[no reply yet]\n", stderr);
    std::fprintf(stderr, "[conversation: %zu messages, %zu of %u context tokens in the cache; temp %g, top-p %g, top-k %d, max-tokens %d]\n",
                 chat.conversation().size(), chat.cached_tokens(), n_ctx, so.temperature, so.top_p, so.top_k,
                 chat.max_reply_tokens());
  } else {
    return false;
  }
  std::fflush(stdout);
  return true;
}

}  // namespace

Opts chat_options() {
  return model_options(true) +
         Opts{{"--system", "TEXT", "the system message"},
              {"--chat-template", "FILE", "a Jinja chat template instead of the model's"},
              ctx_option("context size in tokens (default 0: the model's, at most 4096)"),
              {"-n,--n-predict", "N", "most tokens per reply (default -1: no limit but the context)"},
              {"--tools", "FILE", "tools (a JSON array, OpenAI's shape) the model may call (docs/TOOLS.md)"},
              {"--tool-choice", "CHOICE", "auto, none, required or a tool's name (default auto)"},
              {"--load", "FILE", "start from a conversation saved with /save"},
              {"--stats", "", "print token counts and speeds after each reply"}} +
         sampler_options() + cache_options();
}

int cmd_chat(const Args& a) {
  kestrel_sampler_options so = sampler_options_from_args(a);
  const long long n_ctx_arg = a.integer("--ctx-size", 0);
  const int32_t max_reply = static_cast<int32_t>(a.integer("--n-predict", -1));
  const std::string tmpl = a.has("--chat-template") ? read_file(a.str("--chat-template"), "chat template") : "";
  ChatTools tools;
  if (a.has("--tools")) tools.tools_json = read_file(a.str("--tools"), "tools file");
  if (a.has("--tool-choice")) {
    if (!a.has("--tools")) throw UsageError("--tool-choice needs --tools");
    tools.tool_choice = a.str("--tool-choice");
  }
  const bool stats = a.has("--stats");
  const bool tty = isatty(STDIN_FILENO);
  const KvTypes kv_types = kv_types_from_args(a);

  ModelPtr model = load_model_from_args(a, false, /*allow_demo=*/true);
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  kv_types.apply(co);
  // Default context: the training context, at most 4096 tokens (a 128K KV cache is gigabytes).
  const long long n_train = nlohmann::json::parse(describe(model.get()))["hparams"]["n_ctx_train"].get<long long>();
  co.n_ctx = static_cast<uint32_t>(n_ctx_arg > 0 ? n_ctx_arg : std::min<long long>(n_train, 4096));
  ContextPtr ctx = new_context(model.get(), &co);
  ChatSession chat(model.get(), ctx.get(), so, tmpl, max_reply, tools);
  if (a.has("--system")) chat.set_system(a.str("--system"));
  if (a.has("--load")) run_command("/load " + a.str("--load"), chat, so, std::nullopt, kestrel_context_n_ctx(ctx.get()));
  std::fprintf(stderr, "kestrel chat: %s\n", load_summary(model.get(), ctx.get()).c_str());
  if (tty) std::fprintf(stderr, "type /help for commands\n");
  install_sigint();
  LineInput input(tty, g_interrupted_at_prompt);
  std::optional<ChatTurnStats> last;

  for (;;) {
    std::fflush(stdout);
    std::string msg;
    std::optional<std::string> line = input.read(tty ? "> " : "");
    if (line && *line == "\"\"\"") {  // a block up to the next """ line
      std::string block;
      while ((line = input.read(tty ? ". " : "")) && *line != "\"\"\"") block += (block.empty() ? "" : "\n") + *line;
      if (line) line = block;
    } else {
      while (line && !line->empty() && line->back() == '\\') {
        msg += line->substr(0, line->size() - 1) + "\n";
        line = input.read(tty ? ". " : "");
      }
    }
    if (!line) {
      if (tty) std::fputs("\n", stdout);
      return g_interrupted_at_prompt.load() ? 130 : 0;
    }
    msg += *line;
    if (msg.empty()) continue;
    input.remember(msg);
    if (msg == "/exit" || msg == "/quit") return 0;
    if (msg[0] == '/' && msg.rfind("//", 0) != 0 && msg != "/tool" && msg.rfind("/tool ", 0) != 0) {
      try {
        if (!run_command(msg, chat, so, last, kestrel_context_n_ctx(ctx.get())))
          std::fprintf(stderr, "unknown command %s (try /help; a message starting with / is written //)\n",
                       msg.substr(0, msg.find(' ')).c_str());
      } catch (const Error& e) {
        std::fprintf(stderr, "%s: %s\n", msg.substr(0, msg.find(' ')).c_str(), e.what());
      }
      continue;
    }
    if (msg.rfind("//", 0) == 0) msg.erase(0, 1);
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
      last = s;
    } catch (const Error& e) {
      g_generating.store(false);
      std::fprintf(stderr, "\nkestrel chat: %s: %s\n", kestrel_status_name(e.status()), e.what());
    }
  }
}

}  // namespace kestrel::cli
