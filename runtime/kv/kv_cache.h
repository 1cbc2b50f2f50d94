// The KV cache: per layer a K and a V matrix of n_cells columns ([row, n_cells], F16 like
// llama.cpp; with v_in_k only K is stored and V views its leading values), and per cell the position and the set of sequences that own it. Sequence
// operations (remove a range, copy, keep) work on cells, so speculative rollback and the
// scheduler share one mechanism. Paging (block tables, prefix sharing) builds on this interface.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "core/status.h"
#include "tensor/graph.h"

namespace kestrel {

class KvCache {
 public:
  static constexpr int32_t kMaxSeq = 64;  // sequence ids live in a 64-bit mask per cell

  struct Options {
    int32_t n_cells = 512;
    int32_t n_seq_max = 1;
    DType type = DType::F16;
    std::vector<int64_t> k_rows;  // per layer: values per cell in K (head_dim_k * n_kv_head)
    std::vector<int64_t> v_rows;  // per layer, for V
    // V is not stored: it is a view of the first v_rows values of each K row (MLA's latent).
    bool v_in_k = false;
  };
  static Expected<std::unique_ptr<KvCache>> create(const Options& opts, Backend& backend);
  ~KvCache();

  int32_t n_cells() const { return static_cast<int32_t>(cell_pos_.size()); }
  int32_t n_seq_max() const { return n_seq_max_; }
  int32_t n_used() const;
  size_t bytes() const { return bytes_; }  // K and V storage of every layer
  const Tensor& k(int layer) const { return k_[layer]; }
  const Tensor& v(int layer) const { return v_[layer]; }

  // Claims one free cell per token, marks it with the token's position and sequence, and fills
  // slots. Positions must be >= 0 and sequence ids < n_seq_max. Fails with CONTEXT_FULL (and
  // claims nothing) if there are not enough free cells.
  Status claim(std::span<const int32_t> pos, std::span<const int32_t> seq, std::vector<int32_t>* slots);
  // The visibility data the ATTENTION op reads (valid until the cache changes).
  AttentionBatch attention_batch(std::span<const int32_t> pos, std::span<const int32_t> seq) const;

  // Sequence operations; p1 < 0 means "to the end". seq < 0 means every sequence.
  void seq_remove(int32_t seq, int32_t p0, int32_t p1);
  void seq_copy(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  void seq_keep(int32_t seq);
  int32_t seq_pos_max(int32_t seq) const;  // -1 if the sequence has no cells
  void clear();

 private:
  KvCache() = default;
  Backend* backend_ = nullptr;
  int32_t n_seq_max_ = 1;
  size_t bytes_ = 0;
  std::vector<Tensor> k_, v_;
  std::vector<void*> buffers_;
  std::vector<int32_t> cell_pos_;   // -1 = free
  std::vector<uint64_t> cell_seqs_; // bit s = owned by sequence s
  int32_t used_end_ = 0;            // one past the highest non-free cell
  void update_used_end();
};

}  // namespace kestrel
