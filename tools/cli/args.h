// The CLI's options: each subcommand declares its options once (names, value, help text) and
// CLI11 parses them, so `--help` lists exactly what a command accepts; unknown options name
// themselves and the nearest known one.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown after --help printed the command's help: the command exits 0.
struct HelpShown {};

// One option: names like "-m,--model" (the last is the canonical name the command reads), the
// value's name ("" for a flag without a value), the help text (with its default). A name without a
// leading '-' is a positional argument. `repeat`: may be given more than once (Args::all).
struct Opt {
  std::string names;
  std::string value;
  std::string help;
  bool repeat = false;
  std::string env;  // an environment variable giving the default ("KESTREL_MODEL")
};
using Opts = std::vector<Opt>;
inline Opts operator+(Opts a, const Opts& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Args {
 public:
  // Parses argv (the words after `kestrel COMMAND`) against opts.
  Args(const std::string& command, const std::string& summary, const Opts& opts, int argc, char** argv);
  bool has(const std::string& name) const;
  std::string str(const std::string& name, const std::string& dflt = "") const;
  std::string required(const std::string& name) const;
  long long integer(const std::string& name, long long dflt) const;
  double number(const std::string& name, double dflt) const;
  std::vector<std::string> all(const std::string& name) const;  // every value of a repeated option
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;  // canonical name -> values given
  std::vector<std::string> positional_;
};

// The help text's lines for the options (also what the CLI test checks each option against).
std::vector<std::string> option_names(const Opt& o);  // "-m", "--model"
// The known option name nearest to `word` (edit distance), or "" when none is close.
std::string nearest_option(const std::string& word, const Opts& opts);

// Shared helpers.
std::string read_all_stdin();
bool stderr_is_tty();
// A progress bar on stderr while loading (only when stderr is a terminal).
bool progress_bar(float progress, void* user);

}  // namespace kestrel::cli
