// kestrel tokenize: prints the token ids of a text as a JSON array; with --show-pieces, an array of
// {"id": ID, "piece": TEXT} objects (pieces that are not whole UTF-8, such as byte tokens, are
// shown with U+FFFD).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common.h"

namespace kestrel::cli {

Opts tokenize_options() {
  return model_options() + Opts{{"-p,--prompt", "TEXT", "the text (default: -f FILE, else standard input)"},
                                {"-f,--file", "FILE", "read the text from FILE"},
                                {"--no-add-special", "", "do not add BOS/EOS"},
                                {"--parse-special", "", "read special-token text as those tokens"},
                                {"--show-pieces", "", "print {\"id\", \"piece\"} objects instead of bare ids"}};
}

int cmd_tokenize(const Args& a) {
  a.required("--model");
  const std::string text = a.has("--prompt") ? a.str("--prompt")
                           : a.has("--file") ? read_option_file("--file", a.str("--file"))
                                             : read_all_stdin();
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
