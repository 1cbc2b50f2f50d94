// Merge table loading and the priority-queue merge loop.
#include "tokenizer/bpe_merge.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace kestrel {

Expected<MergeTable> MergeTable::from_gguf(const gguf::File& f, const Vocab& v) {
  const char* key = "tokenizer.ggml.merges";
  const gguf::Value* val = f.find(key);
  if (!val || val->type != gguf::ValueType::ARRAY || val->elem_type != gguf::ValueType::STRING)
    return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + key + "' is missing or not an array of strings");
  MergeTable t;
  t.map_.reserve(val->array.size());
  std::string joined;
  for (size_t i = 0; i < val->array.size(); ++i) {
    const std::string& m = val->array[i].str;
    // The separator is the first space after the first byte (a token may itself be a space).
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos)
      return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + key + "' entry " + std::to_string(i) + " '" + m +
                                           "' is not \"left right\"");
    const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    joined.assign(left);
    joined.append(right);
    const int32_t l = v.find(left), r = v.find(right), res = v.find(joined);
    if (l < 0 || r < 0 || res < 0) {
      ++t.skipped_;
      continue;
    }
    // The first (lowest-rank) entry of a duplicated pair wins.
    t.map_.emplace((uint64_t(uint32_t(l)) << 32) | uint32_t(r), Merge{static_cast<int32_t>(i), res});
  }
  return t;
}

Expected<bool> read_ignore_merges(const gguf::File& f, bool dflt) {
  const char* key = "tokenizer.kestrel.ignore_merges";
  const gguf::Value* v = f.find(key);
  if (!v) return dflt;
  auto b = f.get_bool(key);
  if (!b) return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + key + "' is a " + gguf::value_type_name(v->type) +
                                               ", not a bool");
  return *b;
}

namespace {

struct Candidate {
  int32_t rank;
  int32_t left, right;        // symbol indices
  int32_t left_id, right_id;  // the ids they had when queued (stale check)
};

// Heap order: lowest rank on top, then the leftmost pair.
struct Later {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

struct Scratch {
  std::vector<int32_t> prev, next;
  std::vector<Candidate> heap;
};

}  // namespace

void bpe_merge(const MergeTable& merges, std::vector<BpeSymbol>& syms) {
  const int32_t n = static_cast<int32_t>(syms.size());
  if (n < 2) return;
  thread_local Scratch s;
  s.prev.resize(n);
  s.next.resize(n);
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
    if (const MergeTable::Merge* m = merges.find(syms[l].id, syms[r].id)) {
      s.heap.push_back({m->rank, l, r, syms[l].id, syms[r].id});
      std::push_heap(s.heap.begin(), s.heap.end(), Later{});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), Later{});
    const Candidate c = s.heap.back();
    s.heap.pop_back();
    BpeSymbol& l = syms[c.left];
    BpeSymbol& r = syms[c.right];
    // Stale: one side was merged away or changed since the pair was queued.
    if (l.end == l.begin || r.end == r.begin || s.next[c.left] != c.right || l.id != c.left_id || r.id != c.right_id)
      continue;
    l.id = merges.find(l.id, r.id)->result;
    l.end = r.end;
    r.begin = r.end;  // dead
    s.next[c.left] = s.next[c.right];
    if (s.next[c.right] >= 0) s.prev[s.next[c.right]] = c.left;
    push(s.prev[c.left], c.left);
    push(c.left, s.next[c.left]);
  }
  size_t out = 0;
  for (int32_t i = 0; i != -1; i = s.next[i]) syms[out++] = syms[i];
  syms.resize(out);
}

}  // namespace kestrel
