// The built-in demo model (tools/cli/demo/stories260K-q8_0.gguf, compiled into the binary): what
// run, chat and serve load when no -m and no $KESTREL_MODEL name a model.
#pragma once
#include "kestrel.hpp"

namespace kestrel::cli {

inline constexpr const char* kDemoModelName = "stories260K-q8_0.gguf";
// Loads it through an in-memory file (memfd), mapped like any GGUF.
ModelPtr load_demo_model(const kestrel_model_options* opts);

}  // namespace kestrel::cli
