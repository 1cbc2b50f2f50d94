// What ATTENTION needs to know about the batch and the paged cache, as one I32 graph tensor (a
// per-step input: the KV cache packs it, the step uploads it with the other inputs, kernels read
// it where it lives). Cells are grouped in blocks of block_size; each sequence has a block table,
// the physical blocks it reads in its own order (blocks of a shared prefix appear in several
// tables). Token t reads the cells of its sequence's table only: cell(t, i) for i in
// [0, n_cells_of(t)), in that order, whatever other sequences share the batch.
//
// Packed layout (int32): a header of kHeader values
//   [n_tokens, n_seq, n_cells, block_size, max_cells, n_table_entries, 0, 0]
// then token_pos[n_tokens], token_seq[n_tokens], cell_pos[n_cells] (-1 = empty),
// table_begin[n_seq + 1] (sequence s owns tables[table_begin[s] .. table_begin[s + 1])),
// tables[n_table_entries] (physical block ids), then unused room: the KV cache gives the tables
// a power of two (at least 32) of entries, so that the batch's length, and with it the step's
// memory plan, changes only when the tables' total doubles, not with every new block (a
// backend's step graph, keyed by the tensors' shapes and addresses, then stays valid).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

// Kernels view the batch where it lives: under nvcc these members are device functions too.
#if defined(__CUDACC__)
#define KS_HOST_DEVICE __host__ __device__
#else
#define KS_HOST_DEVICE
#endif

namespace kestrel {

struct AttentionBatch {
  static constexpr int64_t kHeader = 8;
  static int64_t packed_size(int64_t n_tokens, int64_t n_seq, int64_t n_cells, int64_t n_table_entries) {
    return kHeader + 2 * n_tokens + n_cells + n_seq + 1 + n_table_entries;
  }

  int32_t n_tokens = 0;
  int32_t n_seq = 0;
  int32_t n_cells = 0;
  int32_t block_size = 1;
  int32_t max_cells = 0;  // the largest n_cells_of over the batch's tokens
  const int32_t* token_pos = nullptr;    // [n_tokens]
  const int32_t* token_seq = nullptr;    // [n_tokens]
  const int32_t* cell_pos = nullptr;     // [n_cells]; -1 = empty
  const int32_t* table_begin = nullptr;  // [n_seq + 1]
  const int32_t* tables = nullptr;       // physical block ids

  // A view of a packed batch in memory the caller can read (host memory, or inside a kernel).
  KS_HOST_DEVICE static AttentionBatch view(const int32_t* p) {
    AttentionBatch b;
    b.n_tokens = p[0], b.n_seq = p[1], b.n_cells = p[2], b.block_size = p[3], b.max_cells = p[4];
    b.token_pos = p + kHeader;
    b.token_seq = b.token_pos + b.n_tokens;
    b.cell_pos = b.token_seq + b.n_tokens;
    b.table_begin = b.cell_pos + b.n_cells;
    b.tables = b.table_begin + b.n_seq + 1;
    return b;
  }

  KS_HOST_DEVICE int32_t n_cells_of(int32_t t) const {
    const int32_t s = token_seq[t];
    return (table_begin[s + 1] - table_begin[s]) * block_size;
  }
  KS_HOST_DEVICE int32_t cell(int32_t t, int32_t i) const {
    return tables[table_begin[token_seq[t]] + i / block_size] * block_size + i % block_size;
  }
  // f(i, cell(t, i)) for i = 0, 1, ... n_cells_of(t) - 1, block by block (no division per cell).
  template <class F>
  void for_each_cell(int32_t t, F&& f) const {
    const int32_t s = token_seq[t];
    int32_t i = 0;
    for (int32_t k = table_begin[s]; k < table_begin[s + 1]; ++k)
      for (int32_t c = tables[k] * block_size, e = c + block_size; c < e; ++c) f(i++, c);
  }
  // Cell c (of t's table) is visible to token t when it holds a position <= token_pos[t] and, with
  // a sliding window W, token_pos[t] - cell_pos[c] < W.
  KS_HOST_DEVICE bool visible(int32_t t, int32_t c, int32_t window) const {
    const int32_t cp = cell_pos[c];
    if (cp < 0 || cp > token_pos[t]) return false;
    return window <= 0 || token_pos[t] - cp < window;
  }
};

// The packed batch of one sequence holding positions 0 .. ctx-1 in cells 0 .. ctx-1 (its table:
// blocks 0, 1, ... of block_size cells; the last block's spare cells empty), its last n_tokens
// positions the batch's queries: a benchmark's or a calibration's cache.
inline std::vector<int32_t> pack_one_sequence(int32_t ctx, int32_t n_tokens, int32_t block_size) {
  const int32_t n_blocks = (ctx + block_size - 1) / block_size, cells = n_blocks * block_size;
  std::vector<int32_t> b = {n_tokens, 1, cells, block_size, cells, n_blocks, 0, 0};
  for (int32_t t = 0; t < n_tokens; ++t) b.push_back(ctx - n_tokens + t);
  b.insert(b.end(), static_cast<size_t>(n_tokens), 0);
  for (int32_t c = 0; c < cells; ++c) b.push_back(c < ctx ? c : -1);
  b.push_back(0), b.push_back(n_blocks);
  for (int32_t i = 0; i < n_blocks; ++i) b.push_back(i);
  return b;
}

}  // namespace kestrel
