#include "args.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>

namespace kestrel::cli {
namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= names.size()) {
    const size_t comma = std::min(names.find(',', pos), names.size());
    if (comma > pos) out.push_back(names.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool is_positional(const Opt& o) { return !o.names.empty() && o.names[0] != '-'; }

// llama.cpp's multi-letter single-dash names ("-ctk"), which CLI11 does not take: such a word is
// rewritten to the option's long name before parsing, and --help lists it in the option's text.
bool is_dash_alias(const std::string& n) { return n.size() > 2 && n[0] == '-' && n[1] != '-'; }

}  // namespace

std::vector<std::string> option_names(const Opt& o) { return split_names(o.names); }

std::string nearest_option(const std::string& word, const Opts& opts) {
  const std::string w = word.substr(0, word.find('='));
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const Opt& o : opts)
    for (const std::string& n : option_names(o)) {
      if (n[0] != '-') continue;
      // A prefix of a long name ("--ctx" of "--ctx-size") is as near as it gets.
      const size_t d = (w.size() > 2 && n.rfind(w, 0) == 0) ? 1 : edit_distance(w, n);
      if (d < best_d) best_d = d, best = n;
    }
  return best_d <= std::max<size_t>(2, w.size() / 3) ? best : "";
}

Args::Args(const std::string& command, const std::string& summary, const Opts& opts, int argc, char** argv) {
  CLI::App app(summary, "kestrel " + command);
  app.allow_extras(true);  // collected below, to name the nearest known option
  app.get_formatter()->column_width(34);
  app.footer("Output goes to stdout, logs to stderr. Exit status: 0 ok, 1 error, 2 usage error.");
  std::vector<std::pair<CLI::Option*, std::string>> made;  // option, canonical name
  std::vector<std::pair<std::string, std::string>> aliases;  // "-ctk", "--cache-type-k"
  for (const Opt& o : opts) {
    const std::vector<std::string> all_names = option_names(o);
    std::vector<std::string> names;
    std::string cli11_names, also;
    for (const std::string& n : all_names)
      if (!is_dash_alias(n)) names.push_back(n), cli11_names += (cli11_names.empty() ? "" : ",") + n;
    for (const std::string& n : all_names)
      if (is_dash_alias(n)) aliases.emplace_back(n, names.back()), also += (also.empty() ? " (also " : ", ") + n;
    const std::string help = o.help + (also.empty() ? "" : also + ")");
    CLI::Option* opt = nullptr;
    if (o.value.empty() && !is_positional(o)) {
      opt = app.add_flag(cli11_names, help);
    } else {
      opt = app.add_option(cli11_names, help);
      opt->type_name(o.value.empty() ? names.back() : o.value);
      opt->multi_option_policy(o.repeat ? CLI::MultiOptionPolicy::TakeAll : CLI::MultiOptionPolicy::TakeLast);
      if (!o.env.empty()) opt->envname(o.env);
    }
    made.emplace_back(opt, names.back());
  }
  // CLI11 wants argv[0] first; the words given are argv[0..argc).
  std::vector<std::string> words(argv, argv + argc);
  for (std::string& w : words)
    for (const auto& [alias, name] : aliases)
      if (w == alias || w.rfind(alias + "=", 0) == 0) w = name + w.substr(alias.size());
  std::reverse(words.begin(), words.end());
  try {
    app.parse(words);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    throw HelpShown{};
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  for (const std::string& extra : app.remaining()) {
    if (extra.size() > 1 && extra[0] == '-') {
      const std::string near = nearest_option(extra, opts);
      throw UsageError("unknown option '" + extra + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
                       "; kestrel " + command + " --help lists them");
    }
    throw UsageError("unexpected argument '" + extra + "'; kestrel " + command + " --help shows the usage");
  }
  for (const auto& [opt, name] : made) {
    if (opt->count() == 0 && opt->results().empty()) continue;
    if (is_positional(Opt{name, "", ""})) {
      for (const std::string& r : opt->results()) positional_.push_back(r);
      continue;
    }
    std::vector<std::string>& v = values_[name];
    if (opt->get_expected_min() == 0) {
      v.push_back("1");  // a flag
    } else {
      for (const std::string& r : opt->results()) v.push_back(r);
    }
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::str(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? dflt : it->second.back();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::required(const std::string& name) const {
  if (!has(name)) throw UsageError("missing required option " + name);
  return str(name);
}

long long Args::integer(const std::string& name, long long dflt) const {
  if (!has(name)) return dflt;
  const std::string s = str(name);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || *end) throw UsageError(name + ": '" + s + "' is not an integer");
  return v;
}

double Args::number(const std::string& name, double dflt) const {
  if (!has(name)) return dflt;
  const std::string s = str(name);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end) throw UsageError(name + ": '" + s + "' is not a number");
  return v;
}

std::string read_all_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

bool stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

bool progress_bar(float p, void*) {
  const int width = 30, filled = static_cast<int>(p * width);
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%%", filled, "==============================", width - filled, "",
               static_cast<int>(p * 100));
  if (p >= 1.0f) std::fprintf(stderr, "\n");
  return true;
}

}  // namespace kestrel::cli
