// `kestrel bench --grammar json|FILE`: generation under a grammar against the same generation
// without it (bench_grammar.cpp), for the grammar's per-token cost.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace kestrel::cli {

struct GrammarBench {
  std::string spec;     // "json", a .json file (a JSON Schema) or a GBNF file
  std::string prompt = "Once upon a time";
  int32_t n_gen = 128;  // tokens generated per run
  int reps = 3;
  int32_t n_threads = 0;
};

// Appends (test, cells) rows for the markdown table; returns the test's JSON object.
nlohmann::json bench_grammar(const kestrel_model* model, const GrammarBench& b,
                             std::vector<std::pair<std::string, std::string>>* rows);

}  // namespace kestrel::cli
