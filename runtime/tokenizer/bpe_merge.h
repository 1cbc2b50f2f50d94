// Rank-ordered BPE merging shared by the byte-level BPE and the SentencePiece-BPE tokenizers.
// Merges are keyed by token-id pairs; a word is a linked list of symbols and a priority queue
// holds candidate pairs (lowest rank first, leftmost on ties, as Hugging Face and llama.cpp do),
// so a word of n symbols costs O(n log n), never O(n^2).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kestrel {

struct Vocab;

class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;  // token id of left+right
  };
  // Reads tokenizer.ggml.merges ("left right", rank = index). An entry without a space is a
  // FORMAT error; merges whose parts or result are not tokens can never apply and are skipped.
  static Expected<MergeTable> from_gguf(const gguf::File& f, const Vocab& v);

  const Merge* find(int32_t left, int32_t right) const {
    auto it = map_.find((uint64_t(uint32_t(left)) << 32) | uint32_t(right));
    return it == map_.end() ? nullptr : &it->second;
  }
  size_t size() const { return map_.size(); }
  size_t skipped() const { return skipped_; }

 private:
  std::unordered_map<uint64_t, Merge> map_;
  size_t skipped_ = 0;
};

// tokenizer.kestrel.ignore_merges, or `dflt` when absent; a non-bool value is a FORMAT error.
Expected<bool> read_ignore_merges(const gguf::File& f, bool dflt);

// One symbol of a word: a token id (-1: a character that is no token) and its bytes
// [begin, end) in the word.
struct BpeSymbol {
  int32_t id;
  uint32_t begin, end;
};

// Merges `syms` in place by rank until no pair of neighbours has a merge; the survivors stay in
// order. Thread-safe (scratch space is per thread).
void bpe_merge(const MergeTable& merges, std::vector<BpeSymbol>& syms);

}  // namespace kestrel
