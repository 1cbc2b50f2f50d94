// kestrel tokenize: prints the token ids of a text as a JSON array; with --show-pieces, an array of
// {"id": ID, "piece": TEXT} objects (pieces that are not whole UTF-8, such as byte tokens, are
// shown with U+FFFD).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"

namespace kestrel::cli {

int cmd_tokenize(int argc, char** argv) {
  std::vector<std::string> opts = kModelOptions;
  opts.push_back("-p,--prompt");
  Args a(argc, argv, opts, {"--no-add-special", "--parse-special", "--show-pieces"});
  a.required("--model");
  const std::string text = a.has("--prompt") ? a.str("--prompt") : read_all_stdin();
  ModelPtr model = load_model_from_args(a, /*vocab_only=*/true);
  const auto ids = tokenize(model.get(), text, !a.has("--no-add-special"), a.has("--parse-special"));
  if (!a.has("--show-pieces")) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", out.c_str());
    return 0;
  }
  nlohmann::json out = nlohmann::json::array();
  for (kestrel_token id : ids) {
    out.push_back({{"id", id}, {"piece", token_to_piece(model.get(), id, /*render_special=*/true)}});
  }
  std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace kestrel::cli
