// `kestrel bench --draft MODEL | --spec ngram`: speculative generation against plain generation,
// and the cost of a verification pass (bench_spec.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace kestrel::cli {

struct SpecBench {
  kestrel_spec_options spec;
  std::string prompt;   // generation starts here
  int32_t n_gen = 128;  // tokens generated per run
  int reps = 3;
  int32_t n_threads = 0;
  int32_t k_verify = 4;  // the verification-cost test scores 1 + k tokens in one pass
  int32_t depth = 128;   // ... after this many cached tokens
};

// Appends (test, cells) rows for the markdown table; returns the JSON objects of the tests.
nlohmann::json bench_speculative(const kestrel_model* model, const kestrel_model* draft_model, const SpecBench& b,
                                 std::vector<std::pair<std::string, std::string>>* rows);

}  // namespace kestrel::cli
