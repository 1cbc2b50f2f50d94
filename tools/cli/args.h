// A small argument parser for the CLI subcommands: declared options, typed values, clear errors.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kestrel::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  // flags: options without a value; options: options taking one value. Names like "-m,--model".
  Args(int argc, char** argv, const std::vector<std::string>& options, const std::vector<std::string>& flags);
  bool has(const std::string& name) const;
  std::string str(const std::string& name, const std::string& dflt = "") const;
  std::string required(const std::string& name) const;
  long long integer(const std::string& name, long long dflt) const;
  double number(const std::string& name, double dflt) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;  // canonical (long) name -> value
  std::vector<std::string> positional_;
  std::map<std::string, std::string> canonical_;
};

// Subcommands: each returns the process exit code.
int cmd_run(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_serve(int argc, char** argv);

// Shared helpers.
std::string read_all_stdin();
bool stderr_is_tty();
// A progress bar on stderr while loading (only when stderr is a terminal).
bool progress_bar(float progress, void* user);

}  // namespace kestrel::cli
