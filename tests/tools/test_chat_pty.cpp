// `kestrel chat` driven through a pseudo-terminal as a person would: two turns (the second
// reusing the KV cache), /reset, Ctrl-C during a reply, Ctrl-C at the prompt, /exit; and the same
// over a pipe (stdin not a TTY); tools over a pipe (forced calls valid under the schema, /tool).
#include <doctest/doctest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/testdata.h"

using kestrel::test::cli_path;
using kestrel::test::testdata_file;

namespace {

// A child process on a pseudo-terminal; everything it prints (stdout and stderr) is collected.
class PtyProcess {
 public:
  explicit PtyProcess(const std::vector<std::string>& args) {
    // kestrel chat's history: a file of this process's, never the user's (libedit chmods it).
    static int n = 0;
    history_ = "/tmp/kestrel_pty_history_" + std::to_string(getpid()) + "_" + std::to_string(n++);
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      setenv("KESTREL_HISTORY", history_.c_str(), 0);
      std::vector<char*> argv;
      for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtyProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
    std::remove(history_.c_str());
  }
  void send(const std::string& s) { REQUIRE(write(fd_, s.data(), s.size()) == static_cast<ssize_t>(s.size())); }
  // Reads until `re` matches the output after `from` (returns the match end) or the timeout.
  bool wait_for(const std::regex& re, size_t from, double timeout_s, std::smatch* m = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      std::smatch local;
      std::smatch& mm = m ? *m : local;
      const std::string tail = out.substr(std::min(from, out.size()));
      tail_ = tail;
      if (std::regex_search(tail_, mm, re)) return true;
      const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (left <= 0 || !pump(static_cast<int>(left * 1000) + 1)) return false;
    }
  }
  // Waits for exit; returns the exit code (-1 on timeout or signal).
  int wait_exit(double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        while (pump(50)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return -1;
      pump(50);
    }
  }
  std::string out;

 private:
  bool pump(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    out.append(buf, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string history_;
  bool exited_ = false;
  std::string tail_;  // regex matches point into this
};

// The reply after the last echo of the typed `line` from `from` on, up to the stats line. The
// line may show twice: libedit prints its prompt before it takes the terminal out of cooked mode,
// so a line typed in that moment is echoed by the terminal and again by libedit (as in any
// readline program when one types ahead).
std::string reply_after(const std::string& out, size_t from, const std::string& line) {
  const size_t stats = out.find("[prompt ", from);
  const size_t echo = out.rfind(line, stats);
  if (stats == std::string::npos || echo == std::string::npos || echo < from) return "(no reply found)";
  return out.substr(echo + line.size(), stats - echo - line.size());
}

struct Stats {
  int prompt, fresh, cached, generated;
};
const std::regex kStats(R"(\[prompt (\d+) tokens: (\d+) new, (\d+) cached \| (\d+) generated)");
Stats parse(const std::smatch& m) { return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4])}; }

}  // namespace

TEST_CASE("kestrel chat on a terminal: cache reuse between turns, /reset, /exit") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  PtyProcess p({cli_path(), "chat", "-m", model, "--temp", "0", "-n", "24", "--stats"});
  REQUIRE(p.wait_for(std::regex("kestrel chat: .*context 512 · backend"), 0, 30));
  REQUIRE(p.wait_for(std::regex("> $"), 0, 30));

  size_t mark = p.out.size();
  p.send("Tell me a story about a cat.\n");
  std::smatch m;
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  const Stats t1 = parse(m);
  CHECK(t1.cached == 0);
  CHECK(t1.fresh == t1.prompt);
  CHECK(t1.generated > 0);
  // The reply text up to the stats line (whose speeds differ from run to run).
  const std::string reply1 = reply_after(p.out, mark, "Tell me a story about a cat.");
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));

  // Second turn: everything of the first turn is reused; only the new turn is processed.
  mark = p.out.size();
  p.send("And then?\n");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  const Stats t2 = parse(m);
  CHECK(t2.prompt > t1.prompt + t1.generated);
  CHECK(t2.cached >= t1.prompt);
  CHECK(t2.fresh == t2.prompt - t2.cached);
  CHECK(t2.fresh < t2.prompt - t1.prompt);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));

  // /reset: the same first message again processes everything and, greedy, says the same.
  mark = p.out.size();
  p.send("/reset\n");
  REQUIRE(p.wait_for(std::regex(R"(\[conversation reset\][\s\S]*> $)"), mark, 30));
  mark = p.out.size();
  p.send("Tell me a story about a cat.\n");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  const Stats t3 = parse(m);
  CHECK(t3.cached == 0);
  CHECK(t3.prompt == t1.prompt);
  CHECK(t3.generated == t1.generated);
  CHECK(reply_after(p.out, mark, "Tell me a story about a cat.") == reply1);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));

  p.send("/exit\n");
  CHECK(p.wait_exit(30) == 0);
}

TEST_CASE("kestrel chat: Ctrl-C stops the reply and returns to the prompt; Ctrl-C at the prompt exits") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  // A long reply: greedy stories260K does not stop on its own within this context.
  PtyProcess p({cli_path(), "chat", "-m", model, "--temp", "0", "-c", "16384", "-n", "12000", "--stats"});
  REQUIRE(p.wait_for(std::regex("> $"), 0, 30));
  size_t mark = p.out.size();
  p.send("Once upon a time\n");
  // Wait until the reply is streaming, then interrupt it.
  REQUIRE(p.wait_for(std::regex("Once upon a time\\s*\\r?\\n[\\s\\S]{40,}"), mark, 60));
  p.send("\x03");
  std::smatch m;
  REQUIRE(p.wait_for(std::regex(R"(\[stopped\])"), mark, 60));
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  CHECK(parse(m).generated < 12000);
  CHECK(p.out.find("interrupted", mark) != std::string::npos);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));
  // The session goes on after the interruption.
  mark = p.out.size();
  p.send("/help\n");
  REQUIRE(p.wait_for(std::regex(R"(/reset[\s\S]*> $)"), mark, 30));
  p.send("\x03");
  CHECK(p.wait_exit(30) == 130);
}

// Runs `kestrel chat -m model <args>` with `input` (printf syntax) on a pipe; checks it exits 0 and
// returns the output with the stats line of each turn.
static std::string chat_over_pipe(const std::string& model, const std::string& input, const std::string& args,
                                  std::vector<Stats>* turns) {
  const std::string cmd = "printf '" + input + "' | " + cli_path() + " chat -m " + model + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  CHECK(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, out);
  for (std::sregex_iterator it(out.begin(), out.end(), kStats), end; it != end; ++it) turns->push_back(parse(*it));
  return out;
}

TEST_CASE("kestrel chat reads lines from a pipe") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  std::vector<Stats> turns;
  const std::string out =
      chat_over_pipe(model, "Hello there\\nWhat next?\\n/exit\\n", "--temp 0 -n 8 --stats", &turns);
  REQUIRE(turns.size() == 2);
  CHECK(turns[1].cached >= turns[0].prompt);
  CHECK(out.find("> ") == std::string::npos);  // no prompt when stdin is not a terminal
}

TEST_CASE("kestrel chat survives invalid UTF-8 in a message (bytes become U+FFFD in the re-rendered conversation)") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  std::vector<Stats> turns;
  const std::string out =
      chat_over_pipe(model, "bad \\276\\377 bytes\\nagain\\n/exit\\n", "--temp 0 -n 4 --stats", &turns);
  CHECK_MESSAGE(turns.size() == 2, out);
}

TEST_CASE("kestrel chat with tools: a forced choice gives calls valid under the schema; /tool answers them") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  const std::string tmpl_json = testdata_file("chat_templates/Qwen-Qwen2.5-7B-Instruct.json");
  if (model.empty() || tmpl_json.empty()) return;
  char dir_tmpl[] = "/tmp/kestrel-chat-tools-XXXXXX";
  REQUIRE(mkdtemp(dir_tmpl) != nullptr);
  const std::string dir = dir_tmpl;
  const std::string tmpl = dir + "/qwen.jinja", tools = dir + "/tools.json";
  {
    std::ifstream in(tmpl_json);
    std::ofstream(tmpl) << nlohmann::json::parse(in)["template"].get<std::string>();
    std::ofstream(tools) << R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1}},
      "required": ["city", "days"]}}}])";
  }
  for (const char* choice : {"required", "get_weather"}) {
    CAPTURE(choice);
    std::vector<Stats> turns;
    const std::string out = chat_over_pipe(
        model, "Weather in Paris?\\n/tool sunny\\n/tool rainy\\n/tool windy\\n/tool cold\\n/exit\\n",
        "--temp 1 --seed 3 -n 400 -c 2048 --stats --chat-template " + tmpl + " --tools " + tools +
            " --tool-choice " + choice, &turns);
    CAPTURE(out);
    const std::regex call(R"(\[tool call (call_\w{24})\] get_weather (.*)\n)");
    int n_calls = 0;
    for (std::sregex_iterator it(out.begin(), out.end(), call), end; it != end; ++it) {
      ++n_calls;
      const auto args = nlohmann::json::parse((*it)[2].str());
      REQUIRE(args["city"].is_string());
      CHECK(args["city"].get<std::string>().size() <= 20 * 4);
      CHECK((args["days"].is_number_integer() && args["days"].get<int64_t>() >= 1));
      CHECK(args.size() == 2);
    }
    CHECK(n_calls >= 1);
    // The calls were answered one by one and the model replied to the results (a second turn).
    REQUIRE(turns.size() == 2);
    CHECK(turns[1].prompt > turns[0].prompt + turns[0].generated / 2);
    CHECK(turns[1].cached >= turns[0].prompt - 1);
  }
  // Misuse is a clear error, not a crash.
  std::vector<Stats> none;
  const std::string bad = chat_over_pipe(model, "/tool x\\n/exit\\n", "--tools " + tools, &none);
  CHECK(bad.find("no tool call is waiting") != std::string::npos);
  std::filesystem::remove_all(dir);
}

namespace {
nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}
}  // namespace

TEST_CASE("kestrel chat on a terminal: the Up arrow recalls the last line, /save and /load, unknown commands") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kestrel_chat_edit_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  // A history file of its own: the test must not read or write the user's ~/.kestrel_history.
  setenv("KESTREL_HISTORY", (dir / "history").c_str(), 1);
  PtyProcess p({cli_path(), "chat", "-m", model, "--temp", "0", "-n", "12", "--stats"});
  unsetenv("KESTREL_HISTORY");
  REQUIRE(p.wait_for(std::regex("> $"), 0, 30));
  size_t mark = p.out.size();
  p.send("Tell me about the cat.\n");
  std::smatch m;
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  const Stats t1 = parse(m);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));

  // Up arrow (ESC [ A), then Enter: the same line is sent again as the second message.
  mark = p.out.size();
  p.send("\x1b[A");
  REQUIRE(p.wait_for(std::regex("Tell me about the cat\\."), mark, 30));
  p.send("\r");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  CHECK(parse(m).prompt > t1.prompt + t1.generated);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));

  // An unknown command is an error and never reaches the model, with or without an argument.
  mark = p.out.size();
  p.send("/frobnicate the cat\n");
  REQUIRE(p.wait_for(std::regex(R"(unknown command /frobnicate[\s\S]*> $)"), mark, 30));
  CHECK(p.out.find("[prompt ", mark) == std::string::npos);

  // /save writes the conversation; /reset, /load brings it back (saved again: the same JSON).
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  mark = p.out.size();
  p.send("/save " + a + "\n");
  REQUIRE(p.wait_for(std::regex(R"(\[saved 4 messages to [\s\S]*> $)"), mark, 30));
  const nlohmann::json saved = read_json_file(a);
  REQUIRE(saved.is_array());
  REQUIRE(saved.size() == 4);
  CHECK(saved[0]["role"] == "user");
  CHECK(saved[0]["content"] == "Tell me about the cat.");
  CHECK(saved[1]["role"] == "assistant");
  CHECK(saved[2]["content"] == "Tell me about the cat.");
  CHECK(saved.dump().find("frobnicate") == std::string::npos);
  mark = p.out.size();
  p.send("/reset\n");
  REQUIRE(p.wait_for(std::regex(R"(\[conversation reset\][\s\S]*> $)"), mark, 30));
  p.send("/load " + a + "\n");
  REQUIRE(p.wait_for(std::regex(R"(\[loaded 4 messages[\s\S]*> $)"), mark, 30));
  mark = p.out.size();
  p.send("/save " + b + "\n");
  REQUIRE(p.wait_for(std::regex(R"(\[saved 4 messages[\s\S]*> $)"), mark, 30));
  CHECK(read_json_file(b) == saved);
  // The loaded conversation goes on: the next prompt holds all four messages.
  mark = p.out.size();
  p.send("/system You tell stories.\n");
  REQUIRE(p.wait_for(std::regex(R"(\[system message set\][\s\S]*> $)"), mark, 30));
  p.send("/set max-tokens 5\n");
  REQUIRE(p.wait_for(std::regex(R"(\[max-tokens = 5\][\s\S]*> $)"), mark, 30));
  p.send("/set warmth 3\n");
  REQUIRE(p.wait_for(std::regex(R"(unknown setting 'warmth'[\s\S]*> $)"), mark, 30));
  mark = p.out.size();
  p.send("And then?\n");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  CHECK(parse(m).prompt > t1.prompt * 2);
  CHECK(parse(m).generated <= 5);
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));
  // A bad file is an error that leaves the conversation as it was.
  mark = p.out.size();
  p.send("/load " + (dir / "missing.json").string() + "\n");
  REQUIRE(p.wait_for(std::regex(R"(/load: cannot open[\s\S]*> $)"), mark, 30));
  p.send("/stats\n");
  REQUIRE(p.wait_for(std::regex(R"(\[conversation: 7 messages)"), mark, 30));

  // A message between two """ lines keeps its line breaks; // sends a message that starts with /.
  mark = p.out.size();
  p.send("\"\"\"\nfirst line\nsecond line\n\"\"\"\n");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));
  mark = p.out.size();
  p.send("//slash is text\n");
  REQUIRE(p.wait_for(kStats, mark, 60, &m));
  REQUIRE(p.wait_for(std::regex("> $"), mark, 30));
  p.send("/save " + b + "\n");
  REQUIRE(p.wait_for(std::regex(R"(\[saved 11 messages)"), mark, 30));
  const nlohmann::json last = read_json_file(b);
  CHECK(last[0]["role"] == "system");
  CHECK(last[0]["content"] == "You tell stories.");
  CHECK(last[7]["content"] == "first line\nsecond line");
  CHECK(last[9]["content"] == "/slash is text");
  p.send("/exit\n");
  CHECK(p.wait_exit(30) == 0);
  // The history file holds the lines typed.
  std::ifstream h(dir / "history");
  std::stringstream hs;
  hs << h.rdbuf();
  CHECK(hs.str().find("cat.") != std::string::npos);  // libedit writes spaces as \040
  std::filesystem::remove_all(dir);
}
