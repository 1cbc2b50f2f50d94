#include "kv/kv_cache.h"

#include <algorithm>
#include <string>

namespace kestrel {

Expected<std::unique_ptr<KvCache>> KvCache::create(const Options& o, Backend& backend) {
  if (o.n_cells <= 0) return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: n_ctx must be > 0");
  if (o.n_seq_max <= 0 || o.n_seq_max > kMaxSeq)
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "KV cache: n_seq_max must be in [1, " + std::to_string(kMaxSeq) + "]");
  std::unique_ptr<KvCache> c(new KvCache());
  c->backend_ = &backend;
  c->n_seq_max_ = o.n_seq_max;
  c->cell_pos_.assign(o.n_cells, -1);
  c->cell_seqs_.assign(o.n_cells, 0);
  auto make = [&](int64_t rows, std::vector<Tensor>& out) -> Status {
    Tensor t = make_tensor(o.type, rows, o.n_cells);
    t.data = backend.alloc(t.n_bytes());
    if (!t.data)
      return Error(KESTREL_ERR_OUT_OF_MEMORY, "KV cache: cannot allocate " + std::to_string(t.n_bytes()) + " bytes");
    c->buffers_.push_back(t.data);
    c->bytes_ += t.n_bytes();
    out.push_back(t);
    return Status::Ok();
  };
  if (o.v_rows.size() != o.k_rows.size())
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: K and V layouts have different layer counts");
  for (size_t l = 0; l < o.k_rows.size(); ++l) {
    if (o.k_rows[l] <= 0 || o.v_rows[l] <= 0 || (o.v_in_k && o.v_rows[l] > o.k_rows[l]))
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "KV cache: layer " + std::to_string(l) + " has K rows " +
                                                     std::to_string(o.k_rows[l]) + ", V rows " + std::to_string(o.v_rows[l]));
    KS_RETURN_IF_ERROR(make(o.k_rows[l], c->k_));
    if (o.v_in_k) {
      Tensor v = make_tensor(o.type, o.v_rows[l], o.n_cells, 1, 1, c->k_.back().data);
      v.nb[1] = c->k_.back().nb[1];
      v.nb[2] = v.nb[3] = v.nb[1] * static_cast<size_t>(o.n_cells);
      c->v_.push_back(v);
    } else {
      KS_RETURN_IF_ERROR(make(o.v_rows[l], c->v_));
    }
  }
  return c;
}

KvCache::~KvCache() {
  for (void* p : buffers_) backend_->release(p);
}

int32_t KvCache::n_used() const {
  return static_cast<int32_t>(std::count_if(cell_pos_.begin(), cell_pos_.end(), [](int32_t p) { return p >= 0; }));
}

void KvCache::update_used_end() {
  used_end_ = n_cells();
  while (used_end_ > 0 && cell_pos_[used_end_ - 1] < 0) --used_end_;
}

Status KvCache::claim(std::span<const int32_t> pos, std::span<const int32_t> seq, std::vector<int32_t>* slots) {
  slots->clear();
  for (size_t t = 0; t < pos.size(); ++t) {
    if (pos[t] < 0)
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "batch token " + std::to_string(t) + ": negative position");
    if (seq[t] < 0 || seq[t] >= n_seq_max_)
      return Error(KESTREL_ERR_OUT_OF_RANGE, "batch token " + std::to_string(t) + ": sequence id " +
                                                 std::to_string(seq[t]) + " outside [0, " +
                                                 std::to_string(n_seq_max_) + ")");
  }
  for (int32_t c = 0; c < n_cells() && slots->size() < pos.size(); ++c)
    if (cell_pos_[c] < 0) slots->push_back(c);
  if (slots->size() < pos.size()) {
    const size_t free_cells = slots->size();
    slots->clear();
    return Error(KESTREL_ERR_CONTEXT_FULL, "context full: the batch needs " + std::to_string(pos.size()) +
                                               " cells, " + std::to_string(free_cells) + " of " +
                                               std::to_string(n_cells()) + " are free");
  }
  for (size_t t = 0; t < pos.size(); ++t) {
    cell_pos_[(*slots)[t]] = pos[t];
    cell_seqs_[(*slots)[t]] = uint64_t{1} << seq[t];
  }
  update_used_end();
  return Status::Ok();
}

AttentionBatch KvCache::attention_batch(std::span<const int32_t> pos, std::span<const int32_t> seq) const {
  AttentionBatch b;
  b.n_tokens = static_cast<int32_t>(pos.size());
  b.token_pos = pos.data();
  b.token_seq = seq.data();
  b.n_cells = used_end_;
  b.cell_pos = cell_pos_.data();
  b.cell_seqs = cell_seqs_.data();
  return b;
}

void KvCache::seq_remove(int32_t seq, int32_t p0, int32_t p1) {
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT32_MAX;
  for (int32_t c = 0; c < n_cells(); ++c) {
    if (cell_pos_[c] < p0 || cell_pos_[c] >= p1) continue;
    if (seq < 0) cell_seqs_[c] = 0;
    else if (seq < kMaxSeq) cell_seqs_[c] &= ~(uint64_t{1} << seq);
    if (cell_seqs_[c] == 0) cell_pos_[c] = -1;
  }
  update_used_end();
}

void KvCache::seq_copy(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  if (src < 0 || src >= kMaxSeq || dst < 0 || dst >= kMaxSeq || src == dst) return;
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = INT32_MAX;
  for (int32_t c = 0; c < n_cells(); ++c)
    if (cell_pos_[c] >= p0 && cell_pos_[c] < p1 && ((cell_seqs_[c] >> src) & 1u))
      cell_seqs_[c] |= uint64_t{1} << dst;
}

void KvCache::seq_keep(int32_t seq) {
  for (int32_t c = 0; c < n_cells(); ++c) {
    if (seq >= 0 && seq < kMaxSeq && ((cell_seqs_[c] >> seq) & 1u)) {
      cell_seqs_[c] = uint64_t{1} << seq;
    } else {
      cell_seqs_[c] = 0;
      cell_pos_[c] = -1;
    }
  }
  update_used_end();
}

int32_t KvCache::seq_pos_max(int32_t seq) const {
  int32_t mx = -1;
  if (seq < 0 || seq >= kMaxSeq) return mx;
  for (int32_t c = 0; c < n_cells(); ++c)
    if (cell_pos_[c] >= 0 && ((cell_seqs_[c] >> seq) & 1u)) mx = std::max(mx, cell_pos_[c]);
  return mx;
}

void KvCache::clear() {
  std::fill(cell_pos_.begin(), cell_pos_.end(), -1);
  std::fill(cell_seqs_.begin(), cell_seqs_.end(), 0);
  used_end_ = 0;
}

}  // namespace kestrel
