// Helpers shared by the tokenizer tests: llama.cpp's .inp/.out vector files, the cases JSON files,
// loading a tokenizer from a GGUF (on disk or rebuilt in memory with extra keys).
#pragma once
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::test {

// Cases of a .inp file: separated by "\n__ggml_vocab_test__\n"; a final piece without separator
// (gemma-4's file) counts too when it is not empty.
inline std::vector<std::string> split_inp(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t p; (p = inp.find(sep, pos)) != std::string::npos; pos = p + sep.size()) out.push_back(inp.substr(pos, p - pos));
  if (pos < inp.size()) out.push_back(inp.substr(pos));
  return out;
}

// Lines of a .out file: token ids separated by spaces.
inline std::vector<std::vector<int32_t>> read_out(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::vector<int32_t> ids;
    const std::string line = text.substr(pos, e - pos);
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ') ++j;
      if (j > i) ids.push_back(std::stoi(line.substr(i, j - i)));
      i = j;
    }
    out.push_back(ids);
    pos = e + 1;
  }
  return out;
}

inline std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  auto f = gguf::File::open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().to_string());
  auto t = Tokenizer::from_gguf(*f.value());
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  return std::move(t.value());
}

// The GGUF at `path` rebuilt in memory with `extra` keys set (added or replaced).
inline std::unique_ptr<gguf::File> gguf_with(const std::string& path, const std::vector<gguf::KeyValue>& extra) {
  auto f = gguf::File::open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().to_string());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.value()->metadata()) w.set(kv.key, kv.value);
  for (const gguf::KeyValue& kv : extra) w.set(kv.key, kv.value);
  auto g = gguf::File::from_bytes(w.to_bytes(), path + " (rebuilt)");
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  return std::move(g.value());
}

inline nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_text_file(path));
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace kestrel::test
