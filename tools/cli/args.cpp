#include "args.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>

namespace kestrel::cli {

Args::Args(int argc, char** argv, const std::vector<std::string>& options, const std::vector<std::string>& flags) {
  std::map<std::string, bool> takes_value;
  auto declare = [&](const std::string& spec, bool value) {
    std::stringstream ss(spec);
    std::string part, canon;
    std::vector<std::string> names;
    while (std::getline(ss, part, ',')) names.push_back(part);
    canon = names.back();
    for (const auto& n : names) {
      canonical_[n] = canon;
      takes_value[n] = value;
    }
  };
  for (const auto& o : options) declare(o, true);
  for (const auto& f : flags) declare(f, false);
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
      std::string value;
      bool inline_value = false;
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      auto it = canonical_.find(a);
      if (it == canonical_.end()) throw UsageError("unknown option '" + a + "'");
      if (takes_value[a]) {
        if (!inline_value) {
          if (i + 1 >= argc) throw UsageError("option '" + a + "' needs a value");
          value = argv[++i];
        }
        values_[it->second] = value;
      } else {
        values_[it->second] = "1";
      }
    } else {
      positional_.push_back(a);
    }
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) > 0; }

std::string Args::str(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() ? dflt : it->second;
}

std::string Args::required(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError("missing required option " + name);
  return it->second;
}

long long Args::integer(const std::string& name, long long dflt) const {
  auto it = values_.find(name);
  if (it == values_.end()) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno || end == it->second.c_str() || *end) throw UsageError(name + ": '" + it->second + "' is not an integer");
  return v;
}

double Args::number(const std::string& name, double dflt) const {
  auto it = values_.find(name);
  if (it == values_.end()) return dflt;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end) throw UsageError(name + ": '" + it->second + "' is not a number");
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
