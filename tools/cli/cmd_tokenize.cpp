// kestrel tokenize: prints the token ids of a text as a JSON array.
#include <cstdio>

#include "common.h"

namespace kestrel::cli {

int cmd_tokenize(int argc, char** argv) {
  std::vector<std::string> opts = kModelOptions;
  opts.push_back("-p,--prompt");
  Args a(argc, argv, opts, {"--no-add-special", "--parse-special"});
  const std::string text = a.has("--prompt") ? a.str("--prompt") : read_all_stdin();
  ModelPtr model = load_model_from_args(a, /*vocab_only=*/true);
  const auto ids = tokenize(model.get(), text, !a.has("--no-add-special"), a.has("--parse-special"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  std::printf("%s]\n", out.c_str());
  return 0;
}

}  // namespace kestrel::cli
