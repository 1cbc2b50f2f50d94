// The KV cache, paged: per layer a K and a V matrix of n_cells columns ([row, n_cells], F16 like
// llama.cpp; with v_in_k only K is stored and V views its leading values), the cells grouped in
// fixed-size blocks from a BlockPool. Each sequence has a block table; a token's K/V go to the
// next cell of its sequence's last block. Blocks are shared by reference count: seq_copy shares
// them, and full blocks of a prompt are published to the prefix cache so that a later sequence
// with the same leading tokens attaches them (attach_prefix) instead of recomputing them. A
// shared block that must change (an append to a shared last block, a removal) is copied first.
// Sequence operations (remove a range, copy, keep) serve speculative rollback and the scheduler.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/backend.h"
#include "core/limits.h"
#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/recurrent_state.h"
#include "tensor/graph.h"

namespace kestrel {

class KvCache {
 public:
  static constexpr int32_t kMaxSeq = static_cast<int32_t>(limits::kMaxSeq);

  struct Options {
    int32_t n_cells = 512;
    int32_t n_seq_max = 1;
    // Cells per block; 0 picks 16, or less when n_cells is small for n_seq_max sequences.
    int32_t block_size = 0;
    DType type_k = DType::F16, type_v = DType::F16;  // with v_in_k, V's view takes K's
    std::vector<int64_t> k_rows;  // per layer: values per cell in K (head_dim_k * n_kv_head)
    std::vector<int64_t> v_rows;  // per layer, for V
    // V is not stored: it is a view of the first v_rows values of each K row (MLA's latent).
    bool v_in_k = false;
    // Hybrid models: per layer, the recurrent state's values per sequence (recurrent_state.h);
    // empty, or 0 for a layer without one. A layer with a state has no K/V (k_rows 0).
    std::vector<int64_t> conv_rows, ssm_rows;
  };
  struct Stats {
    int32_t block_size = 0, blocks = 0;
    int32_t blocks_held = 0;    // in some sequence's table
    int32_t blocks_cached = 0;  // held by nobody, kept for prefix reuse
    int32_t blocks_free = 0;
    int64_t prefix_queries = 0, prefix_hit_tokens = 0, prefix_query_tokens = 0;
  };
  // The K/V storage lives in the device's memory; block copies stay on the device.
  static Expected<std::unique_ptr<KvCache>> create(const Options& opts, Device& device);
  ~KvCache();

  int32_t n_cells() const { return static_cast<int32_t>(cell_pos_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t n_seq_max() const { return n_seq_max_; }
  int32_t n_used() const;  // cells holding a token of some sequence
  size_t bytes() const { return bytes_; }  // K and V storage of every layer
  const Tensor& k(int layer) const { return k_[layer]; }
  const Tensor& v(int layer) const { return v_[layer]; }
  // The recurrent states of a hybrid model; nullptr otherwise. With them, sequences cannot drop
  // their last tokens except back to a checkpoint (checkpoint()), and no prefix is shared.
  const RecurrentState* recurrent() const { return state_.get(); }
  // Saves every recurrent state of seq, to restore when seq_remove(seq, p, -1) drops the
  // tokens from position p = seq_pos_max(seq) + 1 on (speculative decoding's rollback). OK and
  // nothing to do without recurrent states.
  Status checkpoint(int32_t seq);
  Stats stats() const;
  const std::vector<int32_t>& block_table(int32_t seq) const { return tables_[static_cast<size_t>(seq)]; }
  int32_t cell_pos(int32_t cell) const { return cell_pos_[static_cast<size_t>(cell)]; }  // -1 = empty

  // OK if claim() of tokens of these sequences would succeed; CONTEXT_FULL (naming the shortfall)
  // otherwise. Sequence ids must be valid.
  Status can_claim(std::span<const int32_t> seq) const;
  // Claims one cell per token (the next cell of its sequence), records its position and token id,
  // and fills slots. Fails with CONTEXT_FULL, claiming nothing, when the blocks run out.
  Status claim(std::span<const int32_t> tokens, std::span<const int32_t> pos, std::span<const int32_t> seq,
               std::vector<int32_t>* slots);
  // The ATTENTION op's view of this batch over the cache, packed (tensor/attention_batch.h):
  // the graph's attention input for the step.
  void pack_attention_batch(std::span<const int32_t> pos, std::span<const int32_t> seq,
                            std::vector<int32_t>* out) const;

  // Prefix cache: for an empty sequence about to process `tokens` from position 0, attaches the
  // longest run of cached full blocks holding exactly those leading tokens and returns how many
  // tokens they cover (a multiple of the block size, always < tokens.size(), so the caller still
  // decodes the last token and gets its logits). 0 when nothing matches or seq is not empty.
  int32_t attach_prefix(int32_t seq, std::span<const int32_t> tokens);

  // Sequence operations; p1 < 0 means "to the end". seq < 0 means every sequence. With recurrent
  // states: removing a sequence's every token zeroes its states, removing its tokens from its
  // checkpoint's position on restores them; other removals that touch its tokens, and copies of
  // less than a whole sequence into an empty one, are UNSUPPORTED and change nothing.
  Status seq_remove(int32_t seq, int32_t p0, int32_t p1);
  Status seq_copy(int32_t src, int32_t dst, int32_t p0, int32_t p1);
  void seq_keep(int32_t seq);
  int32_t seq_pos_max(int32_t seq) const;  // -1 if the sequence has no cells
  void clear();                            // every sequence, and the prefix cache

 private:
  KvCache() = default;
  int32_t used_in(int32_t seq, size_t i) const;  // cells in use of block i of seq's table
  int32_t blocks_needed(std::span<const int32_t> seq) const;
  // Cells of block table entry i of seq with a position, and how many of them lie in [p0, p1).
  struct Split {
    int32_t n_set = 0, n_in = 0;
    bool partial() const { return n_in > 0 && n_in < n_set; }
  };
  Split split(int32_t seq, size_t i, int32_t p0, int32_t p1) const;
  int32_t new_block();                                  // allocated, its cells empty; -1 if none left
  int32_t copy_block(int32_t b, int32_t n_cells_used);  // a private copy of b; -1 if none left
  // K/V rows (a device copy), positions and tokens. A device error is kept in device_error_ and
  // returned by the public operation that caused it (the cache is then unusable).
  void copy_cells(int32_t from, int32_t to, int32_t n);
  void maybe_publish(int32_t seq);
  void drop_table(int32_t seq);

  Device* device_ = nullptr;
  Status device_error_;
  int32_t n_seq_max_ = 1;
  int32_t block_size_ = 16;
  size_t bytes_ = 0;
  std::vector<Tensor> k_, v_;
  std::vector<void*> buffers_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<int32_t> cell_pos_;  // -1 = empty
  std::vector<int32_t> cell_tok_;  // the token whose K/V the cell holds (prefix cache checks)
  std::vector<std::vector<int32_t>> tables_;  // per sequence
  std::vector<int32_t> fill_;      // per sequence: cells written in its last block
  std::unique_ptr<RecurrentState> state_;
  std::vector<int32_t> ckpt_pos_;  // per sequence: the position its checkpoint resumes at (-1: none)
  // Checks (and, with apply, performs) what seq_remove does to the recurrent states.
  Status remove_states(int32_t seq, int32_t p0, int32_t p1, bool apply);
  void reset_states(int32_t except);  // zeroes every sequence's states but except's
  int64_t prefix_queries_ = 0, prefix_hit_tokens_ = 0, prefix_query_tokens_ = 0;
};

}  // namespace kestrel
